"""Compile in parallel, measure serially: what --autotune_compile_jobs buys.

    python bench/bench_parallel_compile.py [--jobs 2] [--configs 32]

Compiles a matmul config space (the GPU space of autotune.kernels.matmul,
widened to --configs configs) for sm_90 with Triton's compiler on this CPU:
once serially in this process, once in --jobs spawned processes (the
compile check's pool, as the GPU backend's miss path runs it), each into a
fresh Triton cache directory. Then compiles one config in this process
after the pool: a hit in the on-disk cache the pool filled, timed, next to
a compile of the same config with an empty cache.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autotune.measure import compile_check  # noqa: E402


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


def compile_all(configs, signature, target, jobs):
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_cache.")
    start = time.perf_counter()
    results = compile_check.compile_ahead(
        "autotune.kernels.matmul", "matmul_bias_act_kernel", signature,
        configs, target, jobs)
    return time.perf_counter() - start, results


def parent_compile_s(config, signature, target):
    from autotune.kernels import matmul
    start = time.perf_counter()
    result = compile_check.compile_one(
        matmul.matmul_bias_act_kernel,
        {k: v for k, v in signature.items() if k not in config.kwargs},
        config.kwargs, config.num_warps, config.num_stages, 1, target)
    assert result.ok, result.reason
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--configs", type=int, default=32)
    args = parser.parse_args()
    compile_check._quiet_fp_fusion_notice()
    from autotune.kernels import matmul
    signature = matmul.COMPILE_SIGNATURES["matmul_bias_act_kernel"][0]
    target = compile_check.parse_targets("sm_90")[0]
    configs = space(args.configs)
    serial_s, serial = compile_all(configs, signature, target, 1)
    print(f"{len(configs)} configs for sm_90, serially in this process: "
          f"{serial_s:.1f} s ({sum(r['ok'] for r in serial)} ok)")
    pool_s, pooled = compile_all(configs, signature, target, args.jobs)
    print(f"{len(configs)} configs for sm_90, {args.jobs} spawned jobs: "
          f"{pool_s:.1f} s ({sum(r['ok'] for r in pooled)} ok); speed-up "
          f"{serial_s / pool_s:.2f}x")
    # The cache dir the pool filled is still TRITON_CACHE_DIR here.
    hit_s = parent_compile_s(configs[0], signature, target)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton_cache.")
    cold_s = parent_compile_s(configs[0], signature, target)
    print(f"compile of {configs[0].short()} in this process after the pool: "
          f"{hit_s * 1e3:.0f} ms (a cache hit); with an empty cache: "
          f"{cold_s * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
