"""Parallel tuning throughput: candidates per second with 1 and 2 workers.

    python bench/bench_parallel.py [--candidates 32] [--miss_path_shapes 3]

Each worker is a process evaluating real Triton matmul candidates (on the
CPU: Triton's interpreter, one thread per worker). Workers are started and
warmed up (imports, first launch) before the clock starts, so the figure is
steady-state throughput; start-up time is printed separately. Target: 2
workers >= 1.7x the candidates per second of 1 worker.

Then the miss path as users meet it: the matmul kernel's decorator tunes
a few new shapes with --autotune_workers=1 and 2 (a fresh session each;
worker start-up and the in-process reference candidate included), and the
figure is the session's candidate benchmarks over its tuning seconds.
"""
import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.kernels import matmul  # noqa: E402
from autotune.runtime.parallel import ParallelEvaluator  # noqa: E402


def throughput(workers, configs, warmup):
    factory = functools.partial(matmul.candidate_objective)
    start = time.perf_counter()
    with ParallelEvaluator(factory, devices=[f"cpu{i}" for i in
                                             range(workers)]) as ev:
        ev.evaluate(warmup)
        ready = time.perf_counter() - start
        start = time.perf_counter()
        results = ev.evaluate(configs)
        seconds = time.perf_counter() - start
    assert all(r.failure == "NONE" for r in results), results
    return len(configs) / seconds, ready


def miss_path_rate(workers, shapes):
    import torch

    import autotune
    torch.manual_seed(0)
    sess = autotune.configure(autotune_workers=workers)
    for i in range(shapes):
        m = 40 + 8 * i
        a, b = torch.randn(m, 64), torch.randn(64, 48)
        matmul.matmul_bias_act(a, b, torch.randn(48))
    stats = sess.stats
    rate = stats.candidate_benchmarks / stats.tuning_seconds
    sess.finish()
    return rate, stats.candidate_benchmarks, stats.tuning_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--miss_path_shapes", type=int, default=3)
    args = parser.parse_args()
    space = matmul.search_space().configs()
    configs = (space * ((args.candidates // len(space)) + 1))[
        :args.candidates]
    warmup = space[:2] * 2
    rates = {}
    for workers in (1, 2):
        rate, ready = throughput(workers, configs, warmup[:2 * workers])
        rates[workers] = rate
        print(f"{workers} worker(s): {rate:6.2f} candidates/s "
              f"(start-up and warm-up {ready:.1f} s)")
    print(f"speed-up with 2 workers: {rates[2] / rates[1]:.2f}x "
          f"(target >= 1.7x)")
    if args.miss_path_shapes:
        print(f"\nmiss path (decorator, {args.miss_path_shapes} new shapes "
              "of the matmul kernel):")
        miss = {}
        for workers in (1, 2):
            rate, count, seconds = miss_path_rate(workers,
                                                  args.miss_path_shapes)
            miss[workers] = rate
            print(f"--autotune_workers={workers}: {rate:6.2f} candidates/s "
                  f"({count} candidates in {seconds:.1f} s)")
        print(f"speed-up with 2 workers: {miss[2] / miss[1]:.2f}x")


if __name__ == "__main__":
    main()
