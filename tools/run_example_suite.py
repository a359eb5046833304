"""The main job: the example GPU-autotuned test suite, end to end.

    python tools/run_example_suite.py [--in_place] [--bazel BAZEL]

In a temporary copy of the workspace (so the checked-in caches stay as they
are; --in_place runs in this workspace and rewrites them):

1. build: `bazel build //...`, timed on its own line, so that neither
   mode's figure holds the build (the compile action included);
2. dump mode: regenerate --retune //examples/...: every dump target runs
   unsharded, re-measuring every fusion (a real tune, the checked-in
   configs as incumbents), and its dump replaces the checked-in cache
   (tools/regenerate.py);
3. load mode: `bazel test` of the same tests' load targets (each dump
   target's gpu_autotuned_test, sharded as it is), timed on its own, every
   fusion a hit;
4. the rest of `bazel test //...` (the Starlark tests, the validate
   targets and the like), timed on a line of its own, outside the
   comparison;
5. prints, for each mode: how many targets it ran, wall time, candidate
   benchmarks and tuning seconds saved, read from each test's report.

The report page regenerate writes in the temporary workspace is copied
out first (kept_report_page_path) and its line names the copy.

Without a GPU everything runs on Triton's interpreter.

Run by a python3 that lacks the packages (Debian 12's, say) when .ci/run
has made its virtual environment, it runs itself again under .ci/venv.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CI_VENV_BIN = os.path.join(ROOT, ".ci", "venv", "bin")
NEEDED = ("torch", "triton", "google.protobuf", "absl")


def _missing_packages():
    missing = []
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # the parent package of a dotted name
            found = False
        if not found:
            missing.append(name)
    return missing


def use_ci_venv(argv):
    """Re-executes under .ci/venv's Python when this one lacks the packages
    and that environment exists; under it, puts its bin first on PATH, as
    the bazel tests start the python3 (and python) found there."""
    venv_python = os.path.join(CI_VENV_BIN, "python3")
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(
        os.path.dirname(CI_VENV_BIN))
    if not in_venv and _missing_packages() and os.path.exists(venv_python):
        os.execv(venv_python, [venv_python, os.path.abspath(__file__),
                               *argv])
    if in_venv and os.environ.get("PATH", "").split(os.pathsep)[0] != \
            CI_VENV_BIN:
        os.environ["PATH"] = os.pathsep.join(
            [CI_VENV_BIN, os.environ.get("PATH", "")])


if __name__ == "__main__":
    use_ci_venv(sys.argv[1:])

sys.path.insert(0, ROOT)

from autotune.cli.regenerate_bazel import (  # noqa: E402
    find_dump_targets,
    test_outputs, testlogs_dir)
from autotune.contract import DUMP_SUFFIX  # noqa: E402
from autotune.host.lock_files import LOCK_DIR_ENV  # noqa: E402
REPORT = "autotune_report.json"


def copy_workspace(dst, src=ROOT):
    """Copies the files git tracks (and untracked, unignored ones), or the
    whole tree minus build outputs when git is unavailable."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=src,
            capture_output=True, check=True).stdout.decode().split("\0")
        files = [f for f in listed if f and os.path.isfile(
            os.path.join(src, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for base, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith(("bazel-", "."))
                       and d not in ("node_modules", "__pycache__")]
            files += [os.path.relpath(os.path.join(base, n), src)
                      for n in names]
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))
    configure_offline(dst)
    return dst


def configure_offline(workspace):
    subprocess.run(["bash", os.path.join(workspace, "tools", "bazel_offline",
                                         "configure.sh")],
                   check=True, capture_output=True)


TEST_COMMANDS = ("test", "coverage")


def lock_dir_args(args, env=None):
    """`args` with the caller's AUTOTUNE_LOCK_DIR passed to the tests a
    `bazel test` starts (and made writable in their sandbox): the tests
    take their device locks and slots where the caller does, not in the
    host-wide directory, unless the arguments name one already."""
    env = os.environ if env is None else env
    directory = env.get(LOCK_DIR_ENV)
    if not directory or not args or args[0] not in TEST_COMMANDS or any(
            a.startswith(f"--test_env={LOCK_DIR_ENV}") for a in args):
        return list(args)
    return [args[0], f"--test_env={LOCK_DIR_ENV}={directory}",
            f"--sandbox_writable_path={directory}"] + list(args[1:])


def bazel(workspace, args, bazel_bin=None, check=False):
    bazel_bin = bazel_bin or os.environ.get("BAZEL", "bazel")
    return subprocess.run([bazel_bin] + lock_dir_args(args), cwd=workspace,
                          text=True, capture_output=True, check=check)


def test_log(workspace, target, shard=None):
    path = os.path.join(testlogs_dir(workspace, target, shard), "test.log")
    with open(path, errors="replace") as f:
        return f.read()


def reports(workspace, target):
    """Autotune reports of every shard of a test target."""
    logs = testlogs_dir(workspace, target)
    shards = sorted(d for d in os.listdir(logs) if d.startswith("shard_")) \
        if os.path.isdir(logs) else []
    out = []
    for shard in shards or [None]:
        data = test_outputs(workspace, target, shard).get(REPORT)
        if data:
            out.append(json.loads(data))
    return out


def totals(report_list):
    keys = ("hits", "tuned", "misses", "candidate_benchmarks",
            "tuning_seconds", "saved_seconds")
    return {k: round(sum(r[k] for r in report_list), 3) for k in keys}


def dump_and_load_targets(workspace, bazel_bin):
    """{dump target: its load target} of the examples: each
    gpu_autotuned_test's dump target (the query regenerate runs) and the
    test that loads what it dumps (its name without the dump suffix)."""
    dumps = find_dump_targets([bazel_bin], ["//examples/..."], workspace, [])
    return {t: t[:-len(DUMP_SUFFIX)] for t in sorted(dumps)
            if t.endswith(DUMP_SUFFIX)}


class TestRun:
    """One `bazel test` command, timed: its wall time, the test targets it
    ran (from its build events) and its exit code."""

    def __init__(self, wall, returncode, tests, built, output):
        self.wall, self.returncode = wall, returncode
        self.tests = tests      # {label: passed?} of the tests it ran
        self.built = built      # labels of the targets it built
        self.output = output    # its stdout and stderr, for a failure


def timed_test(workspace, bazel_bin, targets):
    """Runs `bazel test` on targets (a pattern, or labels), timed on its
    own, and reads which tests ran from its build events."""
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.json")
        start = time.perf_counter()
        run = bazel(workspace, ["test", "--cache_test_results=no",
                                f"--build_event_json_file={events}", "--"]
                    + list(targets), bazel_bin)
        wall = time.perf_counter() - start
        tests, built = {}, set()
        if os.path.exists(events):
            with open(events) as f:
                for line in f:
                    event = json.loads(line)
                    ids = event.get("id", {})
                    if "testSummary" in ids:
                        tests[ids["testSummary"]["label"]] = event.get(
                            "testSummary", {}).get("overallStatus") == \
                            "PASSED"
                    elif "targetCompleted" in ids:
                        built.add(ids["targetCompleted"]["label"])
    return TestRun(wall, run.returncode, tests, built,
                   run.stdout[-3000:] + run.stderr[-4000:])


def bazel_test_seconds(output):
    """The `bazel test` command's own time in regenerate's output (Bazel's
    `Elapsed time` line: its last one, the test command's), or None."""
    found = re.findall(r"INFO: Elapsed time: ([\d.]+) ?s", output)
    return float(found[-1]) if found else None


def _labels(targets):
    return ", ".join(t.rpartition(":")[2] for t in sorted(targets))


def headline(dump, load, rest):
    """The main job's last lines: the same tests in dump and in load mode,
    each mode's figure for just those targets; then, on a line of its own,
    what else `bazel test //...` ran.

    dump: {"targets": [dump target], "wall": s, "test_wall": s or None,
    "totals": totals()}; load: a TestRun of the dump targets' load targets
    with "totals"; rest: a TestRun of the other targets of //...."""
    d, l = dump["totals"], load["totals"]
    n_dump, n_load = len(dump["targets"]), len(load["run"].tests)
    of_which = (f", of which bazel test {dump['test_wall']:.1f} s"
                if dump.get("test_wall") is not None else "")
    lines = [
        f"dump mode  (regenerate --retune, {n_dump} dump target(s), "
        f"unsharded: {_labels(dump['targets'])}): {dump['wall']:6.1f} s "
        f"wall{of_which}; {d['candidate_benchmarks']:.0f} candidate "
        f"benchmarks, {d['tuned']:.0f} fusions tuned in "
        f"{d['tuning_seconds']:.2f} s",
        f"load mode  (bazel test, the same tests' {n_load} load target(s):"
        f" {_labels(load['run'].tests)}): {load['run'].wall:6.1f} s wall; "
        f"{l['candidate_benchmarks']:.0f} candidate benchmarks, "
        f"{l['hits']:.0f} hits, {l['saved_seconds']:.2f} s of tuning saved",
    ]
    r = rest["run"]
    lines.append(
        f"rest of //... (bazel test, not in the comparison): "
        f"{r.wall:6.1f} s wall; {len(r.tests)} other test target(s) "
        f"(Starlark tests, validate targets and the like), "
        f"{len(r.built - set(r.tests))} other target(s) built")
    return lines


def kept_report_page_path():
    """Where the main job keeps the regenerate report page of a run in a
    temporary workspace (deleted when the job ends): one file per user in
    the system temp directory, each run's replacing the one before."""
    return os.path.join(tempfile.gettempdir(),
                        f"rules_autotune_example_suite_{os.getuid()}.html")


def keep_report_page(output, workspace, kept=None):
    """Copies the report page regenerate wrote in a temporary workspace to
    a kept place (kept_report_page_path) and returns regenerate's output
    with its `report page` line naming that copy instead; the output as it
    was when it printed no page."""
    prefix = "regenerate: report page "
    lines = output.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.startswith(prefix):
            continue
        page = line[len(prefix):].strip()
        if not os.path.realpath(page).startswith(
                os.path.realpath(workspace) + os.sep) and \
                not page.startswith(workspace + os.sep):
            continue
        kept = kept or kept_report_page_path()
        shutil.copyfile(page, kept)
        lines[i] = (f"{prefix}{kept} (copied out of the temporary "
                    "workspace, which is deleted when the job ends)\n")
    return "".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in_place", action="store_true")
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    args = parser.parse_args(argv)
    tmp = None
    if args.in_place:
        workspace = ROOT
        configure_offline(workspace)
    else:
        tmp = tempfile.mkdtemp(prefix="rules_autotune_example_")
        workspace = copy_workspace(tmp)
    try:
        pairs = dump_and_load_targets(workspace, args.bazel)
        # Everything either mode runs is built first, on its own line, so
        # neither mode's figure holds the build (the compile action
        # included).
        start = time.perf_counter()
        build = bazel(workspace, ["build", "//..."], args.bazel)
        build_wall = time.perf_counter() - start
        if build.returncode != 0:
            print(build.stderr[-4000:], file=sys.stderr)
            print("example suite: bazel build //... FAILED", file=sys.stderr)
            return 1
        start = time.perf_counter()
        regen = subprocess.run(
            [sys.executable, os.path.join(workspace, "tools", "regenerate.py"),
             "--bazel", args.bazel, "--retune", "//examples/..."],
            cwd=workspace,
            text=True, capture_output=True)
        dump_wall = time.perf_counter() - start
        if tmp is not None:
            regen.stdout = keep_report_page(regen.stdout, workspace)
        print(regen.stdout, end="")
        if regen.returncode != 0:
            print(regen.stderr[-4000:], file=sys.stderr)
            print("example suite: regenerate FAILED", file=sys.stderr)
            return 1
        dump = {"targets": list(pairs), "wall": dump_wall,
                "test_wall": bazel_test_seconds(regen.stderr),
                "totals": totals([r for t in pairs
                                  for r in reports(workspace, t)])}
        load_run = timed_test(workspace, args.bazel, pairs.values())
        rest_run = timed_test(workspace, args.bazel, ["//..."] + [
            "-" + t for t in pairs.values()])
        for name, run in (("load run", load_run), ("rest of //...",
                                                   rest_run)):
            if run.returncode != 0:
                print(run.output, file=sys.stderr)
                print(f"example suite: {name} FAILED", file=sys.stderr)
                return 1
        load = {"run": load_run, "totals": totals(
            [r for t in pairs.values() for r in reports(workspace, t)])}
        print(f"build      (bazel build //..., before either mode): "
              f"{build_wall:6.1f} s wall")
        for line in headline(dump, load, {"run": rest_run}):
            print(line)
        return 0 if load["totals"]["candidate_benchmarks"] == 0 else 1
    finally:
        if tmp is not None:
            bazel(tmp, ["shutdown"], args.bazel)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
