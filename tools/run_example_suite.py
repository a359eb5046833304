"""The main job: the example GPU-autotuned test suite, end to end.

    python tools/run_example_suite.py [--in_place] [--bazel BAZEL]

In a temporary copy of the workspace (so the checked-in caches stay as they
are; --in_place runs in this workspace and rewrites them):

1. regenerate --retune: every dump target runs unsharded, re-measuring
   every fusion (a real tune, the checked-in configs as incumbents), and
   its dump replaces the checked-in cache (tools/regenerate.py);
2. load: `bazel test //...`, the example suite sharded, every fusion a hit;
3. prints, for the dump run and the load run: wall time, candidate
   benchmarks and tuning seconds saved, read from each test's report.

Without a GPU everything runs on Triton's interpreter.

Run by a python3 that lacks the packages (Debian 12's, say) when .ci/run
has made its virtual environment, it runs itself again under .ci/venv.
"""
import argparse
import importlib.util
import json
import os
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

from autotune.cli.regenerate import test_outputs, testlogs_dir  # noqa: E402
from autotune.measure.lock_files import LOCK_DIR_ENV  # noqa: E402
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
    suite = "//examples:fused_kernels_test"
    try:
        start = time.perf_counter()
        regen = subprocess.run(
            [sys.executable, os.path.join(workspace, "tools", "regenerate.py"),
             "--bazel", args.bazel, "--retune", "//examples/..."],
            cwd=workspace,
            text=True, capture_output=True)
        dump_wall = time.perf_counter() - start
        print(regen.stdout, end="")
        if regen.returncode != 0:
            print(regen.stderr[-4000:], file=sys.stderr)
            print("example suite: regenerate FAILED", file=sys.stderr)
            return 1
        dump = totals(reports(workspace, suite + "_autotune_dump"))
        start = time.perf_counter()
        load_run = bazel(workspace, ["test", "//...", "--cache_test_results=no"],
                         args.bazel)
        load_wall = time.perf_counter() - start
        print(load_run.stdout[-3000:], end="")
        if load_run.returncode != 0:
            print(load_run.stderr[-4000:], file=sys.stderr)
            print("example suite: load run FAILED", file=sys.stderr)
            return 1
        load = totals(reports(workspace, suite))
        print(f"dump mode  (regenerate --retune: every fusion re-measured, "
              f"unsharded): {dump_wall:6.1f} s wall; "
              f"{dump['candidate_benchmarks']:.0f} candidate benchmarks, "
              f"{dump['tuned']:.0f} fusions tuned in "
              f"{dump['tuning_seconds']:.2f} s")
        print(f"load mode  (bazel test //..., suite in 3 shards): "
              f"{load_wall:6.1f} s wall; {load['candidate_benchmarks']:.0f} "
              f"candidate benchmarks, {load['hits']:.0f} hits, "
              f"{load['saved_seconds']:.2f} s of tuning saved")
        return 0 if load["candidate_benchmarks"] == 0 else 1
    finally:
        if tmp is not None:
            bazel(tmp, ["shutdown"], args.bazel)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
