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
import json
import math
import os
import sys

from autotune import codec
from autotune.cache import merge
from autotune.cache import io as cache_io
from autotune.cache.io import materialize, read_cache, write_cache
from autotune.cli import compile_cache, doctor, merge_driver, remote_tool, report
from autotune.cli.cache_show import cmd_show
from autotune.cli.kernel_tree import (offer_findings, stale_reason,
                                      tree_autotuners, tree_stale_reason)
from autotune.binaries import compile_requests
from autotune.report import summary
from autotune.records import KEY_VERSION
from autotune.runtime import freshness
from autotune.errors import CacheFileError, RemoteToolError, ToolError
from autotune.log import printable

POLICIES = merge.POLICIES


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
