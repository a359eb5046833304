"""CPU seconds to compile the example suite's winners for GPU targets:
what `gpu_autotuned_test(compile_for = [...])` moves off the GPU runner.

    python bench/bench_compile_kernels.py [--cache testdata/fused_kernels.textproto]
        [--targets sm_90] [--jobs 2]
    python bench/bench_compile_kernels.py --python .ci/venv-triton-3.5.0/bin/python3 \\
        --python .ci/venv/bin/python3 [--targets sm_90] [--jobs 2]

Without --python: runs `autotune_cache compile` over the cache's recorded
compile requests, once with one job and once with --jobs, each into a
fresh directory, and prints the wall time, the summed compile seconds, and
the per-binary seconds by kernel.

With --python (once per Triton version, e.g. each environment of CI's
version matrix, .ci/matrix): under each interpreter, the example suite is
run on Triton's interpreter loading the cache and dumping what it used (so
the compile requests are that Triton's own), then `autotune_cache compile`
builds them with --jobs; one table row per interpreter: its Triton, the
binaries built, the CPU seconds of the compile (its process and its
workers, user + system), the wall seconds (process start included), the
compile seconds the manifest sums over the binaries, and the output's size
in bytes and files.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "examples", "fused_kernels_test.py")


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name in ("TRITON_CACHE_DIR", "TRITON_HOME", "AUTOTUNE_FLAGS"):
        env.pop(name, None)
    return env


def _children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _compile(python, cache, targets, jobs, out):
    """(wall seconds, CPU seconds, the run) of one `autotune_cache compile`."""
    cpu = _children_cpu_seconds()
    start = time.perf_counter()
    run = subprocess.run(
        [python, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", cache, "--target", targets, "-o", out, "--jobs",
         str(jobs), "--triton_env", "TRITON_DEFAULT_FP_FUSION=1"]
        # compile imports only the modules named: the example's kernels.
        + [f"--kernel_module=autotune.kernels.{name}"
           for name in ("layernorm", "matmul", "softmax")],
        capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(run.stdout + run.stderr)
    return wall, _children_cpu_seconds() - cpu, run


def compile_once(cache, targets, jobs):
    out = os.path.join(tempfile.mkdtemp(prefix="compiled-"), "kernels")
    wall, _, run = _compile(sys.executable, cache, targets, jobs, out)
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


def tree_size(root):
    """(bytes, files) under root."""
    total = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            total += os.path.getsize(os.path.join(folder, name))
            files += 1
    return total, files


def per_version(python, cache, targets, jobs):
    """One row: the interpreter's Triton, its dump of the example suite
    compiled for targets."""
    version = subprocess.run(
        [python, "-c", "import triton; print(triton.__version__)"],
        capture_output=True, text=True, check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix=f"compiled-{version}-")
    try:
        dump = os.path.join(work, "suite.textproto")
        env = dict(_env(), AUTOTUNE_FLAGS=f"--load_autotune_results_from="
                   f"{cache} --dump_autotune_results_to={dump}")
        run = subprocess.run([python, SUITE], capture_output=True, text=True,
                             cwd=ROOT, env=env)
        if run.returncode != 0:
            sys.exit(f"{python}: the example suite failed:\n"
                     + run.stderr[-3000:])
        out = os.path.join(work, "kernels")
        wall, cpu, _ = _compile(python, dump, targets, jobs, out)
        with open(os.path.join(out, "autotune-compiled.json")) as f:
            manifest = json.load(f)
        size, files = tree_size(out)
        return {"triton": version, "built": manifest["built"],
                "cpu_s": cpu, "wall_s": wall,
                "compile_s": manifest["compile_seconds"],
                "bytes": size, "files": files}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join(
        ROOT, "testdata", "fused_kernels.textproto"))
    parser.add_argument("--targets", default="sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--python", action="append", default=[],
                        help="an interpreter whose Triton builds (repeat: "
                        "one table row each)")
    args = parser.parse_args()
    print(f"cache {os.path.relpath(args.cache, ROOT)}, targets "
          f"{args.targets}, {os.cpu_count()} CPUs")
    if args.python:
        print(f"  --jobs {args.jobs}; CPU s: the compile's process and its "
              "workers, user + system; output: the compiled directory")
        print("  | Triton | binaries | CPU s | wall s | compile s | "
              "output bytes | files |")
        print("  |---|---|---|---|---|---|---|")
        for python in args.python:
            row = per_version(python, args.cache, args.targets, args.jobs)
            print(f"  | {row['triton']} | {row['built']} | {row['cpu_s']:.1f}"
                  f" | {row['wall_s']:.1f} | {row['compile_s']:.1f} | "
                  f"{row['bytes']:,} | "
                  f"{row['files']} |", flush=True)
        return
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
