"""diff and merge of two 100,000-entry caches, binary and text.

    python bench/bench_cache_tool.py [--entries 100000]

The two files share half their keys; a tenth of the shared entries come
from another tuning run, most with a different best config (conflicts,
resolved with --policy=prefer-faster).
Each figure is the wall time of the tool's main() in this process,
median of --repeat runs. Targets: 3 s binary, 6 s text.
"""
import argparse
import contextlib
import gc
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from autotune.cli import cache_tool  # noqa: E402
from autotune import codec  # noqa: E402
from bench_runtime import machine_speed, matmul_entries  # noqa: E402


def make_pair(n):
    a = matmul_entries(n, seed=1)
    b = matmul_entries(n, seed=2)
    # Shift b's keys so that half overlap a's.
    b = [e.replace(key=e.key._replace(signature=e.key.signature.replace(
        "N=4096", "N=4096" if i % 2 else "N=8192"))) for i, e in enumerate(b)]
    # 90% of the shared keys agree with a; the rest keep b's own result
    # (a different best config: a conflict for merge, a change for diff).
    a_map = {e.key: e for e in a}
    out = []
    for i, e in enumerate(b):
        same = a_map.get(e.key)
        out.append(same if same is not None and i % 20 != 1 else e)
    return a, out


def run_tool(argv):
    with contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        return cache_tool.main(argv)


def cli_start(times=5):
    """Wall time of `python -m autotune.cli.cache_tool --help`: what every
    command pays before reading a file (interpreter and imports)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autotune.cli.cache_tool", "--help"],
                       cwd=root, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    print(f"{'cache tool start (--help, new process)':<50} "
          f"{statistics.median(samples):7.3f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    machine_speed()
    cli_start()
    a, b = make_pair(args.entries)
    with tempfile.TemporaryDirectory() as tmp:
        for ext, target in ((".pb", 3.0), (".textproto", 6.0)):
            pa, pb_ = os.path.join(tmp, "a" + ext), os.path.join(tmp, "b" + ext)
            codec.dump_results(a, pa)
            codec.dump_results(b, pb_)
            for name, argv, want in (
                    ("diff", ["diff", pa, pb_], 1),
                    ("merge", ["merge", pa, pb_, "-o",
                               os.path.join(tmp, "out" + ext),
                               "--policy=prefer-faster"], 0)):
                samples = []
                for _ in range(args.repeat):
                    gc.collect()
                    start = time.perf_counter()
                    code = run_tool(argv)
                    samples.append(time.perf_counter() - start)
                    assert code == want, (name, code)
                print(f"{name} of two {args.entries}-entry {ext} files"
                      f"{'':<8} {statistics.median(samples):7.3f} s "
                      f"(target <= {target} s) [min {min(samples):.3f}]")


if __name__ == "__main__":
    main()
