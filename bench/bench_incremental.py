"""What an update measures: incremental (the default) against a full
re-tune, for an unchanged tree, one new shape and one edited kernel.

    python3 bench/bench_incremental.py [--suite pytest|bazel|both]
                                       [--bazel BAZEL]

pytest: a copy of examples/pytest_project, `pytest --autotune-update`
(incremental) and `pytest --autotune-update=all` (every fusion re-measured,
which is what `--autotune-update` did before updates were incremental).
bazel: a copy of this workspace, `tools/regenerate.py //examples/...` and
`regenerate --retune` (the former default). Each row starts from the
checked-in cache; it prints candidate benchmarks, fusions tuned, tuning
seconds (from the autotune reports) and the command's wall time.

The edited kernel changes the syntax tree but not what the kernel computes
(two operands swapped), so the tests still pass and exactly that kernel's
fusions are stale.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

from run_example_suite import copy_workspace, reports  # noqa: E402
from autotune.cli.regenerate_bazel import find_dump_targets  # noqa: E402

PROJECT = os.path.join(ROOT, "examples", "pytest_project")


def replace(path, old, new, what):
    with open(path) as f:
        text = f.read()
    assert old in text, f"{what} changed; update the benchmark"
    with open(path, "w") as f:
        f.write(text.replace(old, new, 1))


PYTEST_CHANGES = {
    "unchanged": None,
    "new_shape": ("test_kernels.py", '"n", [100, 1000]',
                  '"n", [100, 1000, 4000]'),
    "kernel_edit": ("kernels.py", "    mask = offs < n\n",
                    "    mask = n > offs\n"),
}
BAZEL_CHANGES = {
    "unchanged": None,
    "new_shape": ("examples/fused_kernels_test.py",
                  "    def test_layernorm(self):\n",
                  "    def test_softmax_new_shape(self):\n"
                  "        x = self.randn(5, 40)\n"
                  "        torch.testing.assert_close(softmax.softmax(x), "
                  "softmax.reference(x))\n\n"
                  "    def test_layernorm(self):\n"),
    "kernel_edit": ("autotune/kernels/softmax.py",
                    "    mask = (rows[:, None] < n_rows) & "
                    "(cols[None, :] < n_cols)\n",
                    "    mask = (cols[None, :] < n_cols) & "
                    "(rows[:, None] < n_rows)\n"),
}


def row(suite, change, mode, totals, wall):
    print(f"{suite:7s} {change:12s} {mode:24s} "
          f"{totals['candidate_benchmarks']:5.0f} candidate benchmarks  "
          f"{totals['tuned']:3.0f} tuned  {totals['hits']:3.0f} hits  "
          f"{totals['tuning_seconds']:7.2f} s tuning  {wall:7.1f} s wall",
          flush=True)


def pytest_suite(tmp):
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([ROOT, "."]))
    env.pop("AUTOTUNE_FLAGS", None)
    for change, edit in PYTEST_CHANGES.items():
        for mode, flag in (("incremental", "--autotune-update"),
                           ("all (the former default)",
                            "--autotune-update=all")):
            project = os.path.join(tmp, f"pytest_{change}_{flag[-3:]}")
            shutil.copytree(PROJECT, project)
            if edit:
                replace(os.path.join(project, edit[0]), edit[1], edit[2],
                        change)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "pytest_autotune", flag, "--autotune-report=r.json"],
                cwd=project, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                print(done.stdout[-3000:], done.stderr[-3000:])
                raise SystemExit(1)
            with open(os.path.join(project, "r.json")) as f:
                row("pytest", change, mode, json.load(f), wall)


def bazel_suite(tmp, bazel):
    keys = ("hits", "tuned", "candidate_benchmarks", "tuning_seconds")
    for change, edit in BAZEL_CHANGES.items():
        for mode, extra in (("incremental", []),
                            ("--retune (the former default)", ["--retune"])):
            ws = copy_workspace(os.path.join(tmp, f"ws_{change}_{bool(extra)}"))
            try:
                if edit:
                    replace(os.path.join(ws, edit[0]), edit[1], edit[2],
                            change)
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "tools/regenerate.py", "--bazel", bazel]
                    + extra + ["//examples/..."], cwd=ws, capture_output=True,
                    text=True)
                wall = time.perf_counter() - start
                if done.returncode != 0:
                    print(done.stdout[-3000:], done.stderr[-3000:])
                    raise SystemExit(1)
                found = []
                for target in find_dump_targets(bazel, ["//examples/..."], ws,
                                                []):
                    found += reports(ws, target)
                totals = {k: sum(r[k] for r in found) for k in keys}
                row("bazel", change, mode, totals, wall)
            finally:
                subprocess.run([bazel, "shutdown"], cwd=ws,
                               capture_output=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("pytest", "bazel", "both"),
                        default="both")
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench_incremental_")
    try:
        if args.suite in ("pytest", "both"):
            pytest_suite(tmp)
        if args.suite in ("bazel", "both"):
            bazel_suite(tmp, args.bazel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
