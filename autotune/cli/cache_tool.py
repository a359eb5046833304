"""autotune_cache: inspect, diff, merge, prune, verify, rekey and convert
caches.

Reads results files (text or binary, by extension), per-fusion cache
directories and remote namespaces (redis://HOST:PORT/DB[?prefix=NAME])
alike; push and pull move entries between files and a remote. Inputs are never modified (but by
rekey, which rewrites its files in place); outputs are written atomically
(a per-fusion directory output: one atomic file per entry).

Exit codes:
  0  success (diff: no differences; verify: no findings)
  1  diff: the inputs differ; merge: conflicts under --policy=fail;
     verify: findings (stale kernel fingerprints, old key versions)
  2  bad input or usage: missing path, truncated / garbage file, unknown
     format version, foreign file in a cache directory, duplicate keys;
     nothing is written

Run as `python tools/autotune_cache.py`, `python -m autotune.cli.cache_tool`
or `bazel run @rules_autotune//tools:autotune_cache --` (relative paths
from where bazel was run). Text or binary: by extension (.txt .textproto
.pbtxt; .pb .binpb .binarypb .bin), else by content, so `-` (stdin) and
`<(git show HEAD:testdata/x.textproto)` work.
"""
import argparse
import collections
import datetime
import importlib
import json
import math
import os
import sys

from autotune import codec
from autotune.cache import merge
from autotune.cache import io as cache_io
from autotune.cache.io import materialize, read_cache, stats, write_cache
from autotune.cli import compile_cache, doctor, merge_driver, remote_tool, report
from autotune.binaries import compile_requests
from autotune.report import coverage as report_coverage
from autotune.report import roofline, summary
from autotune.records import (KEY_VERSION, Config)
from autotune.runtime import freshness, offers
from autotune.errors import (AutotuneError, CacheFileError, RemoteToolError,
                             ToolError)
from autotune.log import printable

POLICIES = merge.POLICIES


def _show_candidates(args):
    out = []
    for path in args.paths:
        entries = read_cache(path, parse_all=True)
        materialize(entries, path, everything=True)
        out.append({"path": path, "fusions": summary.fusion_records(
            entries, args.kernel)})
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: {len(item['fusions'])} fusions"
                        + (f" of {args.kernel}" if args.kernel else "")))
        for record in item["fusions"]:
            print()
            for line in candidate_table(record):
                print(line)
    return 0


def candidate_table(record):
    """Lines of one fusion's candidate table (show --candidates), with
    what came from the cache escaped (log.printable)."""
    lines = [printable(f"{record['kernel']} [{record['signature']}] on "
                       f"{record['device']}"),
             printable(f"  winner {record['best']}: "
                       f"{record['reason_text']}")]
    if record.get("speedup_over_default"):
        lines.append(f"  {record['speedup_over_default']:.2f}x the first "
                     "offered config (an untuned launch)")
    if record.get("method"):
        lines.append(printable(f"  measured with {record['method']}"))
    lines += roofline_lines(record)
    rows = record["candidates"]
    if not rows:
        return lines
    configs = [printable(r["config"]) for r in rows]
    width = max(map(len, configs))
    rates = [roofline.format_rate(r.get("bytes_per_s"), "B/s")
             for r in rows]
    rate_width = max(map(len, rates + ["bytes/s"])) \
        if any(r.get("bytes_per_s") for r in rows) else 0
    rate_head = f"  {'bytes/s':>{rate_width}}" if rate_width else ""
    lines.append(f"    {'config':<{width}}  {'time (us)':>12}  {'ratio':>6}"
                 f"  {'spread':>6}{rate_head}  failure")
    for r, config, rate in zip(rows, configs, rates):
        time = f"{r['run_time_us']:.3f}" if r["run_time_us"] is not None \
            else "-"
        rate = f"  {rate:>{rate_width}}" if rate_width else ""
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        spread = f"{r['spread'] * 100:.1f}%" if r["spread"] else "-"
        failure = r["failure"] or ""
        if r["failure_detail"]:
            failure += f" ({r['failure_detail'][:60]})"
        lines.append(f"  {'*' if r['winner'] else ' '} "
                     f"{config:<{width}}  {time:>12}  {ratio:>6}  "
                     f"{spread:>6}{rate}  {printable(failure)}".rstrip())
    return lines


def roofline_lines(record):
    """What the winner's launch moves and achieves against the device's
    roof (report/roofline.py), each figure with where it came from, and
    the advice for a fusion far below it."""
    f = record.get("roofline")
    if not f:
        return []
    rate = roofline.format_rate
    moved = f"  moves {rate(f['bytes'], 'B')} ({f['bytes_counted']})"
    if f["flops"]:
        moved += (f", {rate(f['flops'], 'FLOP')} at {f['precision']}, "
                  f"{f['arithmetic_intensity']:.3g} FLOP/B")
    lines = [moved]
    if f["bytes_per_s"] is not None:
        achieved = f"  achieves {rate(f['bytes_per_s'], 'B/s')}"
        if f["flops_per_s"]:
            achieved += f", {rate(f['flops_per_s'], 'FLOP/s')}"
        if f["note"]:
            achieved += f" ({f['note']})"
        if f["share_of_roof"] is not None:
            achieved += (f": {f['share_of_roof'] * 100:.0f} % of "
                         f"{f['share_of']}"
                         f" ({rate(_roof_value(f), _roof_unit(f))})")
            if f["bound"]:
                achieved += f", {f['bound']}-bound"
        elif f["gpu_figures"]:
            achieved += ": no roof known for this device"
        lines.append(achieved)
    if record.get("advice"):
        lines.append(printable(f"  advice: {record['advice']}"))
    return [printable(line) for line in lines]


def _roof_value(f):
    return f["roof_peak_flops"] if f["bound"] == "compute" \
        else f["roof_bandwidth"]


def _roof_unit(f):
    return "FLOP/s" if f["bound"] == "compute" else "B/s"


def cmd_show(args):
    if args.candidates:
        return _show_candidates(args)
    if args.compile_requests:
        return _show_compile_requests(args)
    if args.coverage:
        return _show_coverage(args)
    if args.kernel:
        raise ToolError("show: --kernel goes with --candidates")
    out = []
    for path in args.paths:
        entries = read_cache(path, parse_all=True)
        info = stats(entries, path)
        if args.entries:
            info["list"] = [{"device": e.key.device, "kernel": e.key.kernel,
                             "signature": e.key.signature,
                             "best": e.best.short(),
                             "run_time_us": e.run_time_us}
                            for e in sorted(entries,
                                             key=summary.entry_sort_key)]
        out.append(info)
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    # Names and values from the cache are escaped (log.printable): a
    # cache file may come from anyone, and must not drive the terminal.
    for info in out:
        print(printable(f"{info['path']}: {info['entries']} entries, "
                        f"{info['bytes']} bytes; oldest {info['oldest']}, "
                        f"newest {info['newest']}"))
        if info.get("dangling_links"):
            print(f"  skipped {info['dangling_links']} dangling link(s) "
                  "(entries moved aside as .corrupt-*, naming nothing)")
        for title, key in (("device", "by_device"), ("kernel", "by_kernel"),
                           ("triton", "by_triton_version")):
            for name, count in info[key].items():
                print(f"  {title:<7} {count:>8}  {printable(name)}")
        for item in info.get("list", []):
            print(printable(f"  {item['kernel']} [{item['signature']}] on "
                            f"{item['device']}: {item['best']} "
                            f"({item['run_time_us']:.3f} us)"))
    return 0


def coverage(entries, tuners=None):
    """report/coverage.py's table; with tuners (tree_autotuners: the
    tree's kernels) the stale entries are named too."""
    stale_reason = None if tuners is None else \
        (lambda entry: tree_stale_reason(entry, tuners))
    return report_coverage.coverage(entries, stale_reason)


def _show_coverage(args):
    """show --coverage: the coverage table of each cache."""
    tuners = tree_autotuners(args.kernel_module) if args.kernel_module \
        else None
    out = []
    for path in args.paths:
        rows = coverage(read_cache(path, parse_all=True), tuners)
        out.append({"path": path, "devices": rows,
                    "stale_checked": tuners is not None})
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: coverage by device"
                        + ("" if item["stale_checked"] else
                           " (stale not checked: give --kernel_module)")))
        for row in item["devices"]:
            print(printable(
                f"  {row['device']}: {row['entries']}/{row['fusions']} "
                f"fusions, {len(row['missing'])} missing, "
                f"{len(row['stale'])} stale; last tuned "
                f"{row['last_tuned'] or 'unknown'}"))
            for name in row["missing"]:
                print(printable(f"    missing: {name}"))
            for name in row["stale"]:
                print(printable(f"    stale: {name}"))
    return 0


def _show_compile_requests(args):
    """Every entry's compile requests (what `compile` builds)."""
    out = []
    for path in args.paths:
        for entry in sorted(read_cache(path, parse_all=True),
                            key=summary.entry_sort_key):
            if args.kernel and entry.key.kernel != args.kernel:
                continue
            out.append({"path": path, "device": entry.key.device,
                        "kernel": entry.key.kernel,
                        "signature": entry.key.signature,
                        "best": entry.best.short(),
                        "compile_requests": [r._asdict() for r in
                                             entry.compile_requests]})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: {item['kernel']} "
                        f"[{item['signature']}] on {item['device']}: "
                        f"{item['best']}"))
        for request in item["compile_requests"]:
            print(printable(f"  {request['kernel']}({request['arguments']})"
                            f" [{request['options']}] triton "
                            f"{request['triton_version']}"))
        if not item["compile_requests"]:
            print("  no compile request (record one with a dump or an "
                  "update)")
    return 0


# -- diff -----------------------------------------------------------------

def cmd_diff(args):
    if args.a == args.b == "-":
        raise ToolError("diff: only one input can be - (stdin)")
    old, new = read_cache(args.a), read_cache(args.b)
    # By fusion, as regenerate and pytest say it: an edited kernel's entry
    # is re-tuned (or changed), with its fingerprints, not added and
    # removed.
    changes = summary.CacheChanges(old, new)
    if args.json:
        print(json.dumps(changes.as_dict(), indent=2))
    else:
        print(printable(f"{args.a} -> {args.b}: {changes.headline()}"))
        for line in changes.lines(limit=args.limit):
            print("  " + line)
    return 1 if changes else 0


# -- merge ----------------------------------------------------------------

def cmd_merge(args):
    sources = [(p, read_cache(p)) for p in args.inputs]
    for path, entries in sources:
        materialize(entries, path)  # bad input is reported before conflicts
    merged, conflicts = merge.merge(sources, args.policy)
    if merge.report("merge", conflicts, args.policy):
        return 1
    write_cache(merged, args.output, inputs=args.inputs)
    print(f"merge: wrote {len(merged)} entries to {args.output}"
          + (f" ({len(conflicts)} conflict(s) resolved by {args.policy})"
             if conflicts else ""), file=sys.stderr)
    return 0


# -- verify / prune ---------------------------------------------------------

def tree_kernels(modules):
    """{kernel name: fingerprint} of the tuned kernels in these modules:
    this project's autotuners, and kernels decorated with Triton's own
    triton.autotune, which the drop-in tunes under the same name and
    fingerprint."""
    return {name: tuner.fingerprint
            for name, tuner in tree_autotuners(modules).items()}


def tree_autotuners(modules):
    """{kernel name: autotuner} of the tuned kernels in these modules (see
    tree_kernels)."""
    from autotune.runtime.autotuner import Autotuner
    from autotune.runtime.triton_patch import (from_triton_autotuner,
                                               is_triton_autotuner)
    # The current directory too, as `python -m` would: the installed
    # `autotune_cache` command starts with its own bin directory there.
    for directory in (workspace_import_root(), os.getcwd()):
        if directory and directory not in sys.path:
            sys.path.append(directory)
    known = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        # The module's own code raised: anything, KeyboardInterrupt and
        # SystemExit included, is one line, not a traceback or a silent
        # exit.
        except (Exception, KeyboardInterrupt, SystemExit) as e:
            detail = f": {e}" if str(e) else ""
            raise ToolError(printable(
                f"--kernel_module={name}: cannot import: "
                f"{type(e).__name__}{detail}"[:1000])) from None
        for value in vars(module).values():
            if is_triton_autotuner(value):
                try:
                    value = from_triton_autotuner(value)
                except AutotuneError as e:
                    raise ToolError(f"--kernel_module={name}: {e}")
            if isinstance(value, Autotuner):
                known[value.name] = value
    return known


# What marks the root of a Bazel workspace (REPO.bazel from Bazel 7 on).
WORKSPACE_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel",
                     "REPO.bazel")


def find_workspace(start):
    """The Bazel workspace root that contains `start`, or None."""
    here = os.path.abspath(start)
    while True:
        if any(os.path.isfile(os.path.join(here, marker))
               for marker in WORKSPACE_MARKERS):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def workspace_import_root():
    """Where --kernel_module names are imported from: the workspace `bazel
    run` was called in, else the Bazel workspace containing the current
    directory (so `mykernels.gelu` works from any subdirectory)."""
    return os.environ.get("BUILD_WORKSPACE_DIRECTORY") or \
        find_workspace(os.getcwd())


def stale_reason(entry, known):
    fp = known.get(entry.key.kernel)
    if fp is None:
        return "no kernel of this name in the tree"
    if fp != entry.key.fingerprint:
        return f"kernel changed (fingerprint {entry.key.fingerprint}, " \
               f"tree has {fp})"
    return None


def offer_findings(entry, tuner):
    """(why the tree's decoration no longer offers the entry's winner, or
    None; how many configs it offers that the entry never measured). The
    list is read unpruned: a winner outside it is offered for no call;
    configs never measured are counted only for a list nothing prunes
    (a pruned-out config was never meant to be measured)."""
    if tuner.space is not None:
        offer = offers.Offer(space=tuner.space)
    else:
        offer = offers.Offer(lambda: [Config.from_triton(c)
                                      for c in tuner.configs])
    # The runtime's answer for this entry (freshness.verdict), as a load
    # asks it: the versions are verify's own line.
    found = freshness.verdict(entry.key, (entry, "file"), offer=offer)
    if not found.usable:
        return found.words, 0
    if tuner.space is not None or tuner.early_config_prune or \
            tuner.perf_model:
        return None, 0
    return None, len(found.unmeasured)


# What verify cannot tell without the kernels: said in its verdict.
NOT_CHECKED = ("; kernel fingerprints and offered configs not checked (no "
               "--kernel_module: entries of an edited kernel are not found "
               "stale)")


def verify_verdict(stale, outdated, other, unmeasured=0,
                   kernels_checked=True, drifted=0):
    """verify's last line: what it found and the command that fixes it,
    and what it did not check."""
    found = [f"{n} {what}" for n, what in ((stale, "stale"),
                                           (outdated, "of an old key version"),
                                           (other, "unreadable"))
             if n]
    note = (f" ({unmeasured} offered config(s) never measured: an update "
            "measures them)" if unmeasured else "")
    if drifted:
        note += (f" ({drifted} tuned under another Triton, torch or CUDA "
                 "version: a load run counts them as version drift, "
                 "--autotune_version_match=strict refuses them)")
    if not kernels_checked:
        note += NOT_CHECKED
    if not found:
        return "verify: ok" + note
    fix = ("regenerate with `bazel run @rules_autotune//tools:regenerate` "
           "(or `pytest --autotune-update`)")
    if stale:
        fix += ", or drop them with `autotune_cache prune IN -o OUT " \
               "--stale --kernel_module M`"
    return f"{', '.join(found)}: {fix}{note}"


def cmd_verify(args):
    tuners = tree_autotuners(args.kernel_module) if args.kernel_module \
        else None
    modules = tuple(args.kernel_module)
    full_names = {name: f"{t.base_fn.__module__}:{t.base_fn.__qualname__}"
                  for name, t in (tuners or {}).items()}
    known = None if tuners is None else {
        name: tuner.fingerprint for name, tuner in tuners.items()}
    findings = 0
    bad = 0
    stale = outdated = unmeasured = 0
    versions = collections.Counter()
    drift_count = 0
    running_versions = _installed_versions()
    for path in args.paths:
        try:
            # A bad value in a remote namespace is a finding, like a stale
            # entry: the others are still read.
            skipped = []
            entries = read_cache(path, parse_all=True, warn=skipped.append)
            for line in skipped:
                findings += 1
                print(f"{path}: {line}")
            materialize(entries, path, everything=True)
        except (ToolError, CacheFileError) as e:
            print(f"autotune_cache: error: {e}", file=sys.stderr)
            bad += 1
            continue
        for entry in entries:
            problems = []
            if entry.key.key_version != KEY_VERSION:
                outdated += 1
                problems.append(f"key version {entry.key.key_version}, "
                                f"current is {KEY_VERSION}")
            # The runtime's rule (autotune/runtime/freshness.py): the first
            # of Triton, torch, CUDA whose major.minor differs.
            drifted = freshness.version_drift(
                freshness.tuned_versions(entry), running_versions)
            if drifted:
                versions[drifted] += 1
            if known is not None:
                reason = stale_reason(entry, known)
                never = 0
                if reason is None:
                    reason, never = offer_findings(
                        entry, tuners[entry.key.kernel])
                if reason:
                    stale += 1
                    problems.append("stale: " + reason)
                elif never:
                    unmeasured += never
                    print(printable(
                        f"{path}: {entry.key.kernel} [{entry.key.signature}]"
                        f" on {entry.key.device}: {never} offered config(s) "
                        "never measured"))
            for request in entry.compile_requests:
                # With --kernel_module, a request naming code elsewhere
                # is a finding (`compile` refuses it).
                reason = compile_requests.mismatch(
                    request, entry, modules if args.kernel_module else None,
                    full_names)
                if reason:
                    problems.append("compile request does not describe the "
                                    f"winner: {reason}")
            for problem in problems:
                findings += 1
                print(printable(f"{path}: {entry.key.kernel} "
                                f"[{entry.key.signature}] on "
                                f"{entry.key.device}: {problem}"))
        print(f"{path}: {len(entries)} entries, format version "
              f"{codec.FORMAT_VERSION}, no duplicate keys")
        if versions:
            drift_count += sum(versions.values())
            print(printable(f"{path}: " + ", ".join(
                f"{n} entries tuned with {label} {then}, running {now}"
                for (label, then, now), n in sorted(versions.items()))
                + ": `regenerate --retune` (`pytest --autotune-update=all`) "
                "refreshes them (--autotune_version_match=strict treats "
                "them as stale)"))
        versions.clear()
    if bad:
        return 2
    print(verify_verdict(stale, outdated, findings - stale - outdated,
                         unmeasured, kernels_checked=known is not None,
                         drifted=drift_count))
    return 1 if findings else 0


def _installed_versions():
    """The running versions as the runtime records them
    (Provenance fields), from the installed packages' metadata: Triton and
    torch without importing them; CUDA's needs torch, and is only read when
    torch is imported already."""
    out = {"triton_version": _installed_triton()}
    try:
        from importlib.metadata import version
        out["torch_version"] = version("torch")
    except Exception:  # no metadata: not compared
        out["torch_version"] = None
    torch = sys.modules.get("torch")
    out["cuda_version"] = getattr(getattr(torch, "version", None), "cuda",
                                  None)
    return out


def _installed_triton():
    try:
        from importlib.metadata import version
        return version("triton")
    except Exception:  # no metadata: nothing to compare with
        return None


# -- rekey ------------------------------------------------------------------

def rekey_entries(entries, tuners, assume_unchanged=()):
    """Entries with their fingerprints moved to the current scheme where
    that is known to be safe; returns (entries, [(verdict, entry, why)]).

    An entry is re-keyed when its stored fingerprint is what the previous
    scheme gives for the current source (the code it was tuned for), or
    when its kernel is in assume_unchanged (the user's word that an edit
    changed no behaviour). No entry is dropped: one that cannot move, or
    whose new key another entry already has, stays as it was."""
    taken = {e.key for e in entries}
    out, report = [], []
    for entry in entries:
        key = entry.key
        tuner = tuners.get(key.kernel)
        verdict, why, new_key = "left", None, None
        if tuner is None:
            why = "no kernel of this name in --kernel_module"
        elif key.key_version != KEY_VERSION:
            why = (f"key version {key.key_version}, current is "
                   f"{KEY_VERSION}")
        elif key.fingerprint == tuner.fingerprint:
            why = "already current"
        elif key.kernel in assume_unchanged:
            new_key, why = key._replace(fingerprint=tuner.fingerprint), (
                f"{key.fingerprint} -> {tuner.fingerprint}, asserted "
                "unchanged by --assume-unchanged")
        elif key.fingerprint == tuner.source_text_fingerprint:
            new_key, why = key._replace(fingerprint=tuner.fingerprint), (
                f"{key.fingerprint} -> {tuner.fingerprint}, same source, "
                "previous fingerprint scheme")
        else:
            why = (f"stale: fingerprint {key.fingerprint} is neither the "
                   f"current {tuner.fingerprint} nor the previous scheme's "
                   f"{tuner.source_text_fingerprint} of this source: the "
                   "kernel changed since it was tuned (re-tune it, or "
                   "--assume-unchanged if the edit changed no behaviour)")
        if new_key is not None and new_key in taken:
            new_key, why = None, (f"an entry with fingerprint "
                                  f"{tuner.fingerprint} exists already")
        if new_key is not None:
            taken.add(new_key)
            entry = entry.replace(key=new_key)
            verdict = "rekeyed"
        out.append(entry)
        report.append((verdict, entry, why))
    return out, report


def cmd_rekey(args):
    if not args.kernel_module:
        raise ToolError("rekey needs --kernel_module to know the tree's "
                        "kernels")
    tuners = tree_autotuners(args.kernel_module)
    unknown = sorted(set(args.assume_unchanged) - set(tuners))
    if unknown:
        raise ToolError(f"--assume-unchanged={unknown[0]}: no kernel of "
                        "this name in --kernel_module (known: "
                        f"{', '.join(sorted(tuners)) or 'none'})")
    plans = []
    for path in args.paths:  # every file is read before any is written
        if path == "-" and not args.dry_run:
            # Read from standard input, rewritten "in place" it would be a
            # new file named "-".
            raise ToolError("-: standard input cannot be rewritten in place; "
                            "rekey rewrites its files: save the cache to a "
                            "file first (or look with --dry-run); nothing "
                            "written")
        if os.path.isdir(path) or "://" in path:
            raise ToolError(f"{path}: rekey rewrites results files; convert "
                            "a directory or a remote namespace to a file "
                            "first")
        if not args.dry_run and os.path.exists(path) and \
                not codec.is_regular_file(path):
            # A FIFO or a process substitution (/dev/fd/N) cannot be
            # rewritten: what rekey wrote would go to the pipe, or replace
            # the FIFO, instead of to a cache file.
            raise ToolError(f"{printable(path)}: a pipe or other special "
                            "file, not a regular file; rekey rewrites its "
                            "files in place: save the cache to a file first "
                            "(or look with --dry-run); nothing written")
        entries = read_cache(path)
        materialize(entries, path)
        plans.append((path, entries) + rekey_entries(
            entries, tuners, set(args.assume_unchanged)))
    for path, old, new, verdicts in plans:
        moved = 0
        for verdict, entry, why in verdicts:
            moved += verdict == "rekeyed"
            if verdict == "rekeyed" or args.verbose or \
                    why != "already current":
                print(printable(
                    f"{path}: {verdict}: {entry.key.kernel} "
                    f"[{entry.key.signature}] on {entry.key.device}: {why}"))
        if moved and not args.dry_run:
            try:  # atomic: the old file stays whole until the new is in
                codec.dump_results(new, path)
            except OSError as e:
                raise ToolError(f"{path}: {e.strerror or e}")
        print(f"rekey: {path}: {moved} re-keyed, {len(old) - moved} left"
              + (" (dry run, nothing written)" if args.dry_run and moved
                 else "" if moved else "; file unchanged"))
    return 0


def _cutoff(text, now):
    """The timestamp before which entries are older than `text` days."""
    try:
        days = float(text.rstrip("d"))
    except ValueError:
        days = math.nan
    if not (math.isfinite(days) and days >= 0):
        raise ToolError(f"--older_than={text!r}: expected a number of days "
                        ">= 0, like 30 or 30d")
    try:
        return (now - datetime.timedelta(days=days)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:
        raise ToolError(f"--older_than={text!r}: reaches back before the "
                        "year 1") from None


def tree_stale_reason(entry, tuners):
    """Why the tree (`tuners`, tree_autotuners) makes `entry` stale: its
    kernel is gone or changed, or its winner is no longer offered; None
    when it is current. verify and prune --stale judge alike."""
    reason = stale_reason(entry, {name: tuner.fingerprint
                                  for name, tuner in tuners.items()})
    if reason is None:
        reason = offer_findings(entry, tuners[entry.key.kernel])[0]
    return reason


def cmd_prune(args):
    entries = read_cache(args.input)
    if args.stale and not args.kernel_module:
        raise ToolError("--stale needs --kernel_module to know the tree's "
                        "kernels")
    tuners = tree_autotuners(args.kernel_module) if args.stale else None
    cutoff = None
    if args.older_than:
        cutoff = _cutoff(args.older_than,
                         datetime.datetime.now(datetime.timezone.utc))
    keep, drop = [], []
    for entry in entries:
        reason = None
        if args.device and entry.key.device in args.device:
            reason = "device " + entry.key.device
        elif args.keep_device and entry.key.device not in args.keep_device:
            reason = "other device " + entry.key.device
        elif args.key_version is not None and \
                entry.key.key_version != args.key_version:
            reason = f"key version {entry.key.key_version}"
        elif tuners is not None and tree_stale_reason(entry, tuners):
            reason = "stale: " + tree_stale_reason(entry, tuners)
        elif cutoff and entry.provenance.timestamp and \
                entry.provenance.timestamp < cutoff:
            reason = "tuned " + entry.provenance.timestamp
        (drop if reason else keep).append((entry, reason))
    for entry, reason in drop:
        print(printable(f"{'would drop' if args.dry_run else 'drop'}: "
                        f"{entry.key.kernel} [{entry.key.signature}] on "
                        f"{entry.key.device}: {reason}"))
    if args.dry_run:
        print(f"prune: {len(drop)} of {len(entries)} entries would go",
              file=sys.stderr)
        return 0
    if not args.output:
        raise ToolError("prune needs -o OUTPUT (or --dry-run)")
    kept = [e for e, _ in keep]
    materialize(kept, args.input)
    write_cache(kept, args.output, inputs=[args.input])
    print(f"prune: kept {len(kept)}, dropped {len(drop)}; wrote "
          f"{args.output}", file=sys.stderr)
    return 0


def cmd_convert(args):
    entries = read_cache(args.input)
    materialize(entries, args.input)
    write_cache(entries, args.output, inputs=[args.input])
    print(f"convert: wrote {len(entries)} entries to {args.output}",
          file=sys.stderr)
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="autotune_cache", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("show", aliases=["stats"],
                       help="entries by device, kernel, Triton version")
    p.add_argument("paths", nargs="+")
    p.add_argument("--json", action="store_true")
    p.add_argument("--entries", action="store_true", help="list every entry")
    p.add_argument("--candidates", action="store_true",
                   help="per fusion, every candidate with its time, ratio "
                   "to the winner, spread and failure, and why the winner "
                   "won")
    p.add_argument("--coverage", action="store_true",
                   help="per device: how many of the cache's fusions it "
                   "has entries for, which are missing or (with "
                   "--kernel_module) stale, and when it was last tuned")
    p.add_argument("--kernel_module", action="append", default=[],
                   help="with --coverage: the tree's kernels, to count "
                   "stale entries")
    p.add_argument("--compile_requests", "--compile-requests",
                   dest="compile_requests", action="store_true",
                   help="per entry, the recorded launches `compile` builds")
    p.add_argument("--kernel", help="with --candidates or "
                   "--compile_requests: only this kernel")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("diff", help="added, removed and changed entries; "
                       "exit 1 when the inputs differ")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=200,
                   help="lines of detail in human output")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("merge", help="union of caches; conflicts need a "
                       "policy")
    p.add_argument("inputs", nargs="+")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--policy", choices=POLICIES, default="fail")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("prune", help="drop entries by device, key version, "
                       "staleness or age")
    p.add_argument("input")
    p.add_argument("-o", "--output")
    p.add_argument("--device", action="append", help="drop this device")
    p.add_argument("--keep_device", action="append",
                   help="drop every other device")
    p.add_argument("--key_version", type=int,
                   help="drop entries of any other key version")
    p.add_argument("--stale", action="store_true",
                   help="drop the entries verify reports stale: kernel "
                   "fingerprint not in the tree, or a winner the tree's "
                   "decoration no longer offers (needs --kernel_module)")
    p.add_argument("--kernel_module", action="append", default=[])
    p.add_argument("--older_than", help="drop entries tuned more than N "
                   "days ago (30 or 30d)")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run",
                   action="store_true")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("verify", help="schema, versions, duplicates, file "
                       "names; with --kernel_module, stale fingerprints")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="results files (text or binary), per-fusion cache "
                   "directories or remote namespaces "
                   "(redis://HOST:PORT/DB?prefix=NAME) to check")
    p.add_argument("--kernel_module", action="append", default=[],
                   metavar="MODULE",
                   help="a Python module (dotted name, for example "
                   "mykernels.softmax) whose tuned kernels are the tree's: "
                   "entries whose kernel fingerprint is not theirs are "
                   "reported stale; may be repeated. Imported from the "
                   "current directory and the Bazel workspace around it")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("rekey", help="move entries to the current "
                       "fingerprint scheme, in place (needs --kernel_module)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--kernel_module", action="append", default=[])
    p.add_argument("--assume-unchanged", "--assume_unchanged",
                   dest="assume_unchanged", action="append", default=[],
                   metavar="KERNEL",
                   help="carry every entry of KERNEL to its current "
                   "fingerprint: your word that the edit changed no "
                   "behaviour")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run",
                   action="store_true")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also list entries already current")
    p.set_defaults(func=cmd_rekey)

    p = sub.add_parser("convert", help="text <-> binary <-> per-fusion "
                       "directory (OUTPUT ending in / or an existing "
                       "directory)")
    p.add_argument("input")
    p.add_argument("output")
    p.set_defaults(func=cmd_convert)

    report.add_subcommand(sub)
    compile_cache.add_subcommand(sub)
    doctor.add_subcommand(sub)
    merge_driver.add_subcommand(sub, POLICIES)
    remote_tool.add_subcommands(sub, POLICIES)
    for command in {id(p): p for p in sub.choices.values()}.values():
        command.add_argument(
            "--max_cache_bytes", type=_byte_count,
            default=codec.MAX_CACHE_BYTES, metavar="N",
            help="the largest cache read, in bytes (default: %(default)s); "
            "a larger one is an error naming its size")
    return parser


def _byte_count(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a number of bytes >= 1")
    return value


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    cache_io.max_cache_bytes = args.max_cache_bytes
    try:
        # The cyclic collector would rescan every loaded entry again and
        # again; a command makes no cycles worth collecting before it ends.
        with codec.no_gc():
            return args.func(args)
    except (ToolError, CacheFileError, RemoteToolError) as e:
        print(f"autotune_cache: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
