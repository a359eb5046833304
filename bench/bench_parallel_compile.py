"""Compile in parallel, measure serially: what --autotune_compile_jobs buys.

    python bench/bench_parallel_compile.py [--jobs 2] [--configs 32]

Compiles a matmul config space (the GPU space of autotune.kernels.matmul,
widened to --configs configs) for sm_90 with Triton's compiler on this CPU:
once serially in this process, once in --jobs spawned processes (the
compile-ahead pool as the GPU backend's miss path runs it, each request
captured from the kernel's own launch path at 4096^3 bf16 under a fake
sm_90 driver), each into a fresh Triton cache directory. Then warms one
config up through the launch path after the pool (a load of the binary
the pool wrote), timed, next to another config with an empty cache.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autotune.binaries import compile_check  # noqa: E402


def space(count):
    from autotune.kernels import matmul
    from autotune.records import Config
    configs = list(matmul.GPU_CONFIGS)
    # Widened with other stage counts of the same tiles.
    for c in matmul.GPU_CONFIGS:
        if len(configs) >= count:
            break
        stages = 3 if c.num_stages != 3 else 4
        configs.append(Config(dict(c.kwargs), num_warps=c.num_warps,
                              num_stages=stages))
    return configs[:count]


def _launch_arguments(size=4096):
    """The matmul's launch at size^3 in bf16 (ACTIVATION="relu"), as its
    kernel's launch path sees it; CPU tensors stand in for the GPU's."""
    import torch
    from autotune.kernels import matmul
    a = torch.empty(size, size, dtype=torch.bfloat16)
    c = torch.empty(size, size, dtype=torch.bfloat16)
    args = (a, a, a[0], c, size, size, size, a.stride(0), a.stride(1),
            a.stride(0), a.stride(1), c.stride(0), c.stride(1))
    return matmul.matmul_bias_act_kernel._bind(
        args, {"ACTIVATION": "relu", "INPUT_PRECISION": "ieee"})


def _sm90_driver():
    """Triton's launch path asks the active driver for the target: an
    sm_90 one, on this CPU."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class Sm90:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
    driver.set_active(Sm90())


def compile_all(configs, named, jobs):
    from autotune.kernels import matmul
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_cache.")
    start = time.perf_counter()
    plan = compile_check.plan_compile_ahead(
        matmul.matmul_bias_act_kernel.kernel, named, configs)
    results = compile_check.compile_planned(
        ("autotune.kernels.matmul", "matmul_bias_act_kernel"), plan, jobs)
    return time.perf_counter() - start, results


def launch_compile_s(config, named):
    """The launch path's compile of one config (a warmup): a load when
    the on-disk cache holds the binary."""
    from autotune.kernels import matmul
    start = time.perf_counter()
    matmul.matmul_bias_act_kernel.kernel.warmup(
        grid=(1,), **named, **config.all_kwargs())
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--configs", type=int, default=32)
    args = parser.parse_args()
    compile_check._quiet_fp_fusion_notice()
    _sm90_driver()
    named = _launch_arguments()
    configs = space(args.configs)
    serial_s, serial = compile_all(configs, named, 1)
    print(f"{len(configs)} configs for sm_90, serially in this process: "
          f"{serial_s:.1f} s ({sum(r['ok'] for r in serial)} ok)")
    pool_s, pooled = compile_all(configs, named, args.jobs)
    print(f"{len(configs)} configs for sm_90, {args.jobs} spawned jobs: "
          f"{pool_s:.1f} s ({sum(r['ok'] for r in pooled)} ok); speed-up "
          f"{serial_s / pool_s:.2f}x")
    # The cache dir the pool filled is still TRITON_CACHE_DIR here.
    hit_s = launch_compile_s(configs[0], named)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_cache.")
    cold_s = launch_compile_s(configs[1], named)
    print(f"launch of {configs[0].short()} after the pool: "
          f"{hit_s * 1e3:.0f} ms (its binary loaded from the pool's cache); "
          f"{configs[1].short()} with an empty cache: {cold_s * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
