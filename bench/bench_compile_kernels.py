"""CPU seconds to compile the example suite's winners for GPU targets:
what `gpu_autotuned_test(compile_for = [...])` moves off the GPU runner.

    python bench/bench_compile_kernels.py [--cache testdata/fused_kernels.textproto]
        [--targets sm_90] [--jobs 2]

Runs `autotune_cache compile` over the cache's recorded compile requests,
once with one job and once with --jobs, each into a fresh directory, and
prints the wall time, the summed compile seconds, and the per-binary
seconds by kernel.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_once(cache, targets, jobs):
    out = os.path.join(tempfile.mkdtemp(prefix="compiled-"), "kernels")
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name in ("TRITON_CACHE_DIR", "TRITON_HOME", "AUTOTUNE_FLAGS"):
        env.pop(name, None)
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", cache, "--target", targets, "-o", out, "--jobs",
         str(jobs), "--triton_env", "TRITON_DEFAULT_FP_FUSION=1"],
        capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(run.stdout + run.stderr)
    with open(os.path.join(out, "autotune-compiled.json")) as f:
        manifest = json.load(f)
    # The manifest holds no timings (the tree is reproducible): the
    # summed compile seconds come from compile's closing line.
    m = re.search(r"; ([\d.]+) s compiling\)", run.stdout)
    manifest["compile_seconds"] = float(m.group(1)) if m else float("nan")
    per_kernel = {}
    for line in run.stderr.splitlines():
        m = re.search(r"\] (\S+) (\S+) .*: ([\d.]+) s$", line)
        if m:
            per_kernel.setdefault(m.group(2), []).append(float(m.group(3)))
    return wall, manifest, per_kernel


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join(
        ROOT, "testdata", "fused_kernels.textproto"))
    parser.add_argument("--targets", default="sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    print(f"cache {os.path.relpath(args.cache, ROOT)}, targets "
          f"{args.targets}, {os.cpu_count()} CPUs")
    for jobs in (1, args.jobs):
        wall, manifest, per_kernel = compile_once(args.cache, args.targets,
                                                  jobs)
        print(f"  --jobs {jobs}: {manifest['built']} binaries in "
              f"{wall:.1f} s wall (process start included), "
              f"{manifest['compile_seconds']:.1f} s compiling")
        for kernel, seconds in sorted(per_kernel.items()):
            print(f"    {kernel}: " + ", ".join(f"{s:.1f}" for s in seconds)
                  + " s per binary")


if __name__ == "__main__":
    main()
