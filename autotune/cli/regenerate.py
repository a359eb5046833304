"""Regenerates checked-in autotune caches in one command.

    bazel run @rules_autotune//tools:regenerate [-- PATTERN ... [--bazel_arg=ARG]
                                                [--bazel_test_arg=ARG]]
    python3 RULES_AUTOTUNE/tools/regenerate.py [PATTERN ...]   (from anywhere
                                                          in the workspace)

1. Finds the dump targets (tag `autotune_dump`, made by gpu_autotuned_test)
   with `bazel query`, within PATTERN (default //...), plus every other dump
   target that writes to one of their caches (a cache several targets share
   is only rewritten from all of their dumps). Query gets the --bazel_arg
   values, less a --config that no rc line defines for query (a team's
   `build:rbe` and `test:gpuci` lines): that one goes to `bazel test`
   only, with a note. --bazel_test_arg values go to `bazel test` only
   (--test_tag_filters, --remote_executor, ...). A PATTERN naming one target
   may name the gpu_autotuned_test itself (`:kernels_test`): it stands for
   its dump target (`:kernels_test_autotune_dump`).
2. Runs them with `bazel test --test_sharding_strategy=disabled`: a dump
   must see every fusion, so it never runs sharded. By default a dump tunes
   only the fusions missing or stale in its cache: a fusion whose entry
   matches is a hit, dumped as it is and never measured. With --retune
   (passed to the targets as --test_env=AUTOTUNE_RETUNE=1) every fusion
   is re-measured, the checked-in configs as incumbents: for a new GPU,
   driver or Triton version. Each runs under
   tools/gpu_slot.py (--run_under; not when --bazel_arg or
   --bazel_test_arg gives one): one dump target per device at a time, on
   every device. A dump target the test filters leave out
   (--test_tag_filters=gpu-h100 for one pool's dumps) is built, not run,
   and skipped: its cache is left as it is, or, when other targets that
   write to it ran, updated from their dumps without removing entries.
   Under `bazel run`, the nested bazel commands get the startup options
   the `bazel` that started regenerate was given on its command line
   (--output_user_root, --output_base, ...: read from its server's
   command line), so they talk to the same server and nothing restarts
   it; one it cannot read back (--host_jvm_args) is named in a note, to
   be given with --bazel_startup_arg, which adds startup options.
3. Merges the dumps of each cache (tag `autotune_cache=PATH`) into the file,
   by the rule every update of a cache file follows
   (autotune/cache/update.py), pruned on the dumps' devices:
   - an entry whose key and best config did not change is kept exactly as
     it was (its times, candidates and timestamp too), so an unchanged tree
     leaves the file byte-identical;
   - entries of devices the dumps did not run on are kept;
   - entries of the dumps' device that no dump produced any more (a kernel
     that changed, a shape no test uses) are removed;
   - two targets that dump different best configs for one fusion are a
     conflict, printed with both target names and decided by the one merge
     rule (autotune/cache/merge.py, policy "measured"): the config already
     checked in stays unless the other is faster by the selection rule's
     incumbent margin; with neither checked in, the smaller config stays
     unless the other is faster by its margin.
   The file is written atomically (codec.atomic_write: a new file gets the
   user's umask, an existing one keeps its mode, a symbolic link is
   written through, and a file whose bytes would not change is left
   alone); missing directories are created.
   While the dumps run, a cache that does not exist yet is an empty file,
   so that a dump target naming it by a label in another package can be
   analysed; it is removed again if its dumps fail.

A dump target that fails leaves its cache untouched (and every cache it
shares with others); the command names it and exits 1. Exit 2: bad usage,
or bazel itself could not run.
"""

import argparse
import hashlib
import os
import sys
import tempfile

from autotune.errors import RegenerateError, ToolError
from autotune import codec
from autotune.codec import CacheFileError
from autotune.cache import update as cache_update
from autotune.cli.kernel_tree import WORKSPACE_MARKERS, find_workspace
from autotune.cli.regenerate_bazel import (
    QueryArgs, calling_startup_options, collect_dump, find_target_devices,
    local_device_key, run_dump_targets, select_targets, split_by_device,
    testlogs_dir)
from autotune.contract import REGENERATE_COMMAND as COMMAND
from autotune.report import page, summary


class Merged:
    """The result of merging dumps into a cache file's entries."""

    def __init__(self, entries, removed, conflicts):
        self.entries = entries
        self.removed = removed        # [Entry] no dump produced any more
        self.conflicts = conflicts    # [str], one line each


def merge_dumps(old_entries, dumps, prune=True):
    """old_entries: the checked-in entries ([] when there is no file).
    dumps: [(target, entries, device or None)]. The file is updated by the
    one rule (autotune/cache/update.py), pruned on the dumps' devices (not
    when prune is False: a target that writes to the file did not run):
    see the module docstring."""
    devices = set()
    for _, entries, device in dumps:
        if device:
            devices.add(device)
        devices.update(e.key.device for e in entries)
    if not prune:
        devices = set()
    updated = cache_update.update(
        old_entries, [(target, entries) for target, entries, _ in dumps],
        prune_devices=devices)
    return Merged(updated.entries, updated.removed,
                  [c.line() for c in updated.conflicts])


def regenerate_cache(cache, dumps, workspace, not_run=()):
    """Merges dumps into one cache file and prints what changed. not_run:
    targets that write to it too but did not run (the test filters left
    them out): no entry is removed then."""
    path = os.path.join(workspace, cache)
    old = []
    if os.path.exists(path):
        try:
            old = codec.load_results(path)
        except CacheFileError as e:
            print(f"regenerate: note: replacing unreadable {e}")
    merged = merge_dumps(old, dumps, prune=not not_run)
    for line in merged.conflicts:
        print("regenerate: " + line)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    written = codec.dump_results(merged.entries, path)
    # By fusion: an edited kernel's fusions are re-tuned, not added and
    # removed; a changed winner is compared with the old one measured in
    # this run when it was.
    changes = summary.CacheChanges(old, merged.entries)
    sources = ", ".join(t for t, _, _ in dumps)
    print(f"regenerate: {cache}: {len(merged.entries)} entries; "
          f"{changes.headline()}"
          + ("" if written else "; file unchanged")
          + (f" (from {sources})" if len(dumps) > 1 else ""))
    for line in changes.lines(limit=20):
        print("  " + line)
    # Entries of an edited kernel's old fingerprint were replaced (counted
    # as re-tuned or changed): only fusions gone altogether are removed.
    gone = {changes.old[f].key for f in changes.removed}
    removed = [e for e in merged.removed if e.key in gone]
    if removed:
        print(f"  ({len(removed)} removed: no dump produced them on "
              "this device any more)")
    if not_run:
        print(f"  (no entry removed: {', '.join(sorted(not_run))}, which "
              "writes to it too, did not run)")
    return old, merged.entries


REPORT_PAGE_NAME = "autotune_regenerate_report.html"


def report_page_path(workspace=None):
    """Where the run's report page goes: next to the dump targets' outputs
    in the workspace's bazel-testlogs, else one file per workspace in the
    system temp directory; either way the latest run's page replaces the
    one before (a run leaves no new file behind)."""
    logs = os.path.join(workspace, "bazel-testlogs") if workspace else None
    if logs and os.path.isdir(logs):
        return os.path.join(logs, REPORT_PAGE_NAME)
    tag = hashlib.sha256(os.path.abspath(workspace or os.getcwd()).encode()
                         ).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(),
                        f"autotune_regenerate_{os.getuid()}_{tag}.html")


def write_report_page(pages, workspace=None):
    """One report page for the whole run: every regenerated cache, compared
    with what the files held before. pages: [(cache, old, new)]. Returns
    its path (report_page_path), or None (no matplotlib: a one-line note
    instead)."""
    try:
        page.require_matplotlib()
    except ToolError:
        print(f"regenerate: no report page: {page.INSTALL_HINT}")
        return None
    text = page.build_page([(cache, new) for cache, _, new in pages],
                           base=[e for _, old, _ in pages for e in old],
                           base_name="the caches before this run",
                           title="Regenerated autotune caches: " + ", ".join(
                               cache for cache, _, _ in pages))
    path = report_page_path(workspace)
    codec.atomic_write(path, text.encode())
    print(f"regenerate: report page {path}")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 all caches regenerated; 1 a dump target "
               "failed (its cache untouched); 2 bad usage or bazel error.")
    parser.add_argument("patterns", nargs="*", default=["//..."])
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    parser.add_argument("--workspace",
                        help="workspace root (default: the workspace "
                        "`bazel run` was called in, or the one containing "
                        "the current directory)")
    parser.add_argument("--bazel_arg", action="append", default=[],
                        help="extra argument for bazel query and test "
                        "(a --config that no rc line defines for query "
                        "goes to bazel test only)")
    parser.add_argument("--bazel_test_arg", action="append", default=[],
                        help="extra argument for bazel test only "
                        "(--test_tag_filters=gpu-h100, --config=NAME of "
                        "build:/test: lines, --remote_executor=...)")
    parser.add_argument("--bazel_startup_arg", action="append", default=[],
                        help="startup option for every bazel command "
                        "(before the command); under `bazel run` those "
                        "of the calling bazel's command line are passed "
                        "already")
    parser.add_argument("--gpu_type", metavar="DEVICE",
                        help="say which dump targets need a machine whose "
                        "device key contains DEVICE (a gpu_type's device, "
                        "e.g. A100), and run nothing")
    parser.add_argument("--retune", action="store_true",
                        help="re-measure every fusion, the checked-in "
                        "configs as incumbents (a new GPU, driver or Triton "
                        "version); default: tune only fusions missing or "
                        "stale in the cache")
    argv = _options_after_dashes(parser, sys.argv[1:] if argv is None
                                 else list(argv))
    args = parser.parse_args(argv)
    # Under `bazel run`, the current directory is the runfiles tree; Bazel
    # says where it was called from.
    here = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    workspace = args.workspace or os.environ.get(
        "BUILD_WORKSPACE_DIRECTORY") or find_workspace(here)
    if not workspace:
        print(f"regenerate: error: {here} is not inside a Bazel workspace "
              f"(no {', '.join(WORKSPACE_MARKERS)} above it); run `{COMMAND}`"
              " from your workspace, or pass --workspace", file=sys.stderr)
        return 2
    workspace = os.path.abspath(workspace)
    # Relative patterns (`...`, `:t`) mean what they mean where the user
    # stands; paths are resolved against the workspace root.
    cwd = here if os.path.abspath(here).startswith(
        workspace + os.sep) else workspace
    calling, note = calling_startup_options(workspace)
    if note and not args.bazel_startup_arg:
        print(note, file=sys.stderr)
    bazel = [args.bazel] + calling + args.bazel_startup_arg
    placeholders = []
    try:
        query_args = QueryArgs(args.bazel_arg)  # notes said once
        targets = select_targets(bazel, args.patterns, cwd, query_args)
        if not targets:
            print("regenerate: no dump targets (tag autotune_dump) in "
                  + " ".join(args.patterns) + ": name gpu_autotuned_test "
                  "targets, their packages, or a pattern such as //...",
                  file=sys.stderr)
            return 2
        devices = find_target_devices(bazel, targets, cwd, query_args) \
            if targets else {}
        if args.gpu_type:
            return _print_gpu_type_plan(targets, devices, args.gpu_type)
        if devices:
            local = local_device_key()
            targets, left = split_by_device(targets, devices, local)
            if left:
                print("regenerate: left to machines with another GPU ("
                      f"this one is {local}): " + ", ".join(
                          f"{t} (needs a {d})" for t, d in sorted(
                              left.items())) + "; run regenerate there; "
                      "each merges its entries into the same cache file",
                      file=sys.stderr)
            if not targets:
                print("regenerate: no dump target runs on this machine",
                      file=sys.stderr)
                return 0
        print(f"regenerate: running {len(targets)} dump target(s) unsharded; "
              + ("--retune: re-measuring every fusion, checked-in configs as "
                 "incumbents" if args.retune else
                 "tuning only fusions missing or stale in the cache "
                 "(--retune re-measures every one)"), file=sys.stderr)
        placeholders.extend(create_placeholders(targets, workspace))
        results = run_dump_targets(bazel, targets, cwd,
                                   args.bazel_arg + args.bazel_test_arg,
                                   retune=args.retune)
    except RegenerateError as e:
        remove_placeholders(placeholders)
        print(f"regenerate: error: {e}", file=sys.stderr)
        return 2
    except BaseException:
        remove_placeholders(placeholders)
        raise
    regenerated = set()
    try:
        return write_results(targets, results, workspace, regenerated)
    finally:
        remove_placeholders([p for p in placeholders
                             if p not in regenerated])


def _print_gpu_type_plan(targets, devices, device):
    """--gpu_type DEVICE: the dump targets that need such a machine."""
    needed = sorted(t for t, d in devices.items()
                    if d.lower() == device.lower())
    if not needed:
        known = sorted(set(devices.values()))
        print(f"regenerate: no dump target needs a {device} (gpu_type "
              f"devices here: {', '.join(known) or 'none'})",
              file=sys.stderr)
        return 2
    caches = sorted({targets[t] for t in needed if targets.get(t)})
    print(f"regenerate: on a machine with a {device}, regenerate runs "
          f"{len(needed)} dump target(s): {', '.join(needed)}; they write "
          f"{', '.join(caches) or 'no cache'} (other devices' entries "
          "kept)", file=sys.stderr)
    return 0


def _options_after_dashes(parser, argv):
    """`regenerate.py -- --retune`, the `--` copied from the `bazel run`
    form (where bazel takes it away): regenerate's own options after it
    are read as options, with a note, instead of as target patterns for
    bazel query; what else follows it stays a pattern."""
    if "--" not in argv:
        return argv
    cut = argv.index("--")
    before, after = argv[:cut], argv[cut + 1:]
    options, patterns = [], []
    rest = iter(after)
    for arg in rest:
        action = parser._option_string_actions.get(arg.split("=", 1)[0])
        if action is None or not arg.startswith("--"):
            patterns.append(arg)
            continue
        options.append(arg)
        if action.nargs != 0 and "=" not in arg:  # --workspace DIR
            value = next(rest, None)
            if value is not None:
                options.append(value)
    if options:
        print("regenerate: note: " + " ".join(options) + " after `--` read "
              "as regenerate's option(s); `--` belongs to the `bazel run "
              "@rules_autotune//tools:regenerate -- ...` form only",
              file=sys.stderr)
    return before + options + (["--"] + patterns if patterns else [])


def create_placeholders(targets, workspace):
    """Creates an empty results file for each cache that does not exist
    yet, so that a dump target naming it by a label in another package
    (whose glob finds it now) can be analysed; returns their paths. Each is
    replaced by the merged dumps, or removed again."""
    created = []
    for cache in sorted({c for c in targets.values() if c}):
        path = os.path.join(workspace, cache)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            codec.dump_results([], path)
            created.append(path)
    return created


def remove_placeholders(placeholders):
    """Removes placeholders whose cache was not regenerated."""
    for path in placeholders:
        try:
            os.unlink(path)
        except OSError:
            pass


def write_results(targets, results, workspace, regenerated):
    """Merges each cache's dumps into it; adds the paths written to
    regenerated. Returns the exit code."""
    failed = []
    by_cache = {}
    not_run = {}  # cache -> targets the test filters left out
    pages = []
    for target in sorted(targets):
        cache = targets[target]
        passed, logs = results[target]
        logs = logs or testlogs_dir(workspace, target)
        if passed is None:
            print(f"regenerate: skipped {target}: built, not run (the test "
                  "filters left it out)")
            not_run.setdefault(cache, set()).add(target)
            continue
        if not passed:
            failed.append(target)
            print(f"regenerate: FAILED {target}: "
                  f"{cache or 'its cache'} left untouched (see "
                  f"{os.path.join(logs, 'test.log')})")
            if cache is not None:
                by_cache[cache] = None
            continue
        if cache is None:
            print(f"regenerate: {target} has no autotune_cache; skipped")
            continue
        if cache in by_cache and by_cache[cache] is None:
            continue  # another target of this cache failed
        try:
            entries, device = collect_dump(target, workspace, logs)
        except (RegenerateError, CacheFileError) as e:
            failed.append(target)
            print(f"regenerate: FAILED {target}: {e}; {cache} left untouched")
            by_cache[cache] = None
            continue
        by_cache.setdefault(cache, []).append((target, entries, device))
    for cache, dumps in sorted(by_cache.items(), key=lambda kv: str(kv[0])):
        if cache is None:
            continue
        if dumps is None:
            print(f"regenerate: {cache} left untouched: a dump target that "
                  "writes to it failed")
            continue
        try:
            old, new = regenerate_cache(cache, dumps, workspace,
                                        not_run.get(cache, ()))
            pages.append((cache, old, new))
            regenerated.add(os.path.join(workspace, cache))
        except (CacheFileError, OSError) as e:
            failed.append(cache)
            print(f"regenerate: FAILED writing {cache}: {e}")
    for cache in sorted(c for c in not_run if c and c not in by_cache):
        print(f"regenerate: {cache} left untouched: none of the dump "
              "targets that write to it ran")
    if pages:
        write_report_page(pages, workspace)
    if not_run and sum(len(t) for t in not_run.values()) == len(targets):
        print(f"regenerate: error: the test filters left out every dump "
              f"target ({len(targets)}); nothing was regenerated",
              file=sys.stderr)
        return 2
    if failed:
        print(f"regenerate: {len(failed)} failure(s): " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
