"""Regenerates checked-in autotune caches in one command.

    python tools/regenerate.py [PATTERN ...] [--bazel BAZEL] [-- BAZEL_ARGS]

1. Finds the dump targets (tag `autotune_dump`, made by gpu_autotuned_test)
   with `bazel query`, within PATTERN (default //...).
2. Runs them with `bazel test --test_sharding_strategy=disabled`: a dump
   must see every fusion, so it never runs sharded.
3. Collects each dump from bazel-testlogs (outputs.zip before Bazel 8,
   test.outputs/ from Bazel 8 on), checks that it parses, and writes it
   atomically over the cache the matching load target uses (tag
   `autotune_cache=PATH`), printing entries added, removed and changed.

A dump target that fails leaves its checked-in cache untouched; the command
names it and exits 1. Exit 2: bad usage, or bazel itself could not run.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autotune import results_io  # noqa: E402
from autotune.results_io import CacheFileError  # noqa: E402
from autotune import cache_tool  # noqa: E402

DUMP_TAG = "autotune_dump"
CACHE_TAG = "autotune_cache="
DUMP_FILE = "autotune_cache.textproto"


class RegenerateError(Exception):
    pass


def _bazel(bazel, args, cwd, capture=True):
    try:
        return subprocess.run([bazel] + args, cwd=cwd, text=True,
                              capture_output=capture)
    except FileNotFoundError:
        raise RegenerateError(f"cannot run {bazel!r}: not found (set --bazel "
                              "or BAZEL)")


def find_dump_targets(bazel, patterns, cwd, bazel_args):
    expr = " + ".join(f'attr("tags", "\\b{DUMP_TAG}\\b", {p})'
                      for p in patterns)
    result = _bazel(bazel, ["query"] + bazel_args + [expr, "--output=xml"],
                    cwd)
    if result.returncode != 0:
        raise RegenerateError(f"bazel query failed:\n{result.stderr.strip()}")
    return _parse_query_xml(result.stdout)


def _parse_query_xml(text):
    import xml.etree.ElementTree as ET
    targets = {}
    for rule in ET.fromstring(text).iter("rule"):
        name = rule.get("name")
        tags = []
        for lst in rule.iter("list"):
            if lst.get("name") == "tags":
                tags = [s.get("value") for s in lst.iter("string")]
        caches = [t[len(CACHE_TAG):] for t in tags if t.startswith(CACHE_TAG)]
        targets[name] = caches[0] if caches else None
    return targets


def testlogs_dir(cwd, target, shard=None):
    """bazel-testlogs folder of a test target (or of one of its shards)."""
    package, _, name = target.lstrip("@").partition("//")[2].partition(":")
    logs = os.path.join(cwd, "bazel-testlogs", package, name)
    return os.path.join(logs, shard) if shard is not None else logs


def test_outputs(cwd, target, shard=None):
    """{name: bytes} of a test's undeclared outputs: zipped into
    outputs.zip before Bazel 8, plain files in test.outputs/ from 8 on."""
    outputs = os.path.join(testlogs_dir(cwd, target, shard), "test.outputs")
    found = {}
    archive = os.path.join(outputs, "outputs.zip")
    if os.path.exists(archive):
        with zipfile.ZipFile(archive) as z:
            found.update({n: z.read(n) for n in z.namelist()})
    if os.path.isdir(outputs):
        for n in os.listdir(outputs):
            path = os.path.join(outputs, n)
            if os.path.isfile(path) and n != "outputs.zip":
                with open(path, "rb") as f:
                    found[n] = f.read()
    return found


def collect_dump(target, cwd):
    """Reads the dump of one target from bazel-testlogs (both layouts)."""
    data = test_outputs(cwd, target).get(DUMP_FILE)
    if data is None:
        raise RegenerateError(
            f"{target}: passed but wrote no {DUMP_FILE} (looked in "
            f"{os.path.join(testlogs_dir(cwd, target), 'test.outputs')})")
    return data


def run_dump_targets(bazel, targets, cwd, bazel_args):
    """Runs the targets; returns {target: passed?}."""
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.json")
        result = _bazel(
            bazel, ["test"] + bazel_args + [
                "--test_sharding_strategy=disabled", "--keep_going",
                "--cache_test_results=no", f"--build_event_json_file={events}"]
            + sorted(targets), cwd, capture=False)
        status = {}
        if os.path.exists(events):
            with open(events) as f:
                for line in f:
                    event = json.loads(line)
                    summary = event.get("id", {}).get("testSummary")
                    if summary:
                        status[summary["label"]] = event.get(
                            "testSummary", {}).get("overallStatus") == "PASSED"
    if result.returncode not in (0, 3, 4) and not status:
        raise RegenerateError(f"bazel test failed to run (exit "
                              f"{result.returncode})")
    return {t: status.get(t, status.get(_canonical(t), False))
            for t in targets}


def _canonical(label):
    return label[1:] if label.startswith("@//") else "@" + label


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 all caches regenerated; 1 a dump target "
               "failed (its cache untouched); 2 bad usage or bazel error.")
    parser.add_argument("patterns", nargs="*", default=["//..."])
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    parser.add_argument("--workspace", default=os.getcwd(),
                        help="workspace root (default: current directory)")
    parser.add_argument("--bazel_arg", action="append", default=[],
                        help="extra argument for bazel query and test")
    args = parser.parse_args(argv)
    cwd = os.path.abspath(args.workspace)
    try:
        targets = find_dump_targets(args.bazel, args.patterns, cwd,
                                    args.bazel_arg)
        if not targets:
            print("regenerate: no dump targets (tag autotune_dump) in "
                  + " ".join(args.patterns), file=sys.stderr)
            return 2
        print(f"regenerate: running {len(targets)} dump target(s) unsharded",
              file=sys.stderr)
        passed = run_dump_targets(args.bazel, targets, cwd, args.bazel_arg)
    except RegenerateError as e:
        print(f"regenerate: error: {e}", file=sys.stderr)
        return 2
    failed = []
    for target in sorted(targets):
        cache = targets[target]
        if not passed[target]:
            failed.append(target)
            print(f"regenerate: FAILED {target}: "
                  f"{cache or 'its cache'} left untouched (see "
                  f"{os.path.join(testlogs_dir(cwd, target), 'test.log')})")
            continue
        if cache is None:
            print(f"regenerate: {target} has no autotune_cache; skipped")
            continue
        try:
            data = collect_dump(target, cwd)
            entries = results_io.decode(data, DUMP_FILE)
            path = os.path.join(cwd, cache)
            old = []
            if os.path.exists(path):
                try:
                    old = results_io.load_results(path)
                except CacheFileError as e:
                    print(f"regenerate: note: replacing unreadable {e}")
            results_io.dump_results(entries, path)
        except (RegenerateError, CacheFileError) as e:
            failed.append(target)
            print(f"regenerate: FAILED {target}: {e}")
            continue
        diff = cache_tool.Diff(old, entries)
        added, removed, changed = diff.counts()
        print(f"regenerate: {cache}: {len(entries)} entries; {added} added, "
              f"{removed} removed, {changed} changed")
        for line in diff.lines(limit=20):
            print("  " + line)
    if failed:
        print(f"regenerate: {len(failed)} dump target(s) failed: "
              + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
