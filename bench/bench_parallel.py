"""Parallel tuning throughput: candidates per second with 1 and 2 workers.

    python bench/bench_parallel.py [--candidates 32]

Each worker is a process evaluating real Triton matmul candidates (on the
CPU: Triton's interpreter, one thread per worker). Workers are started and
warmed up (imports, first launch) before the clock starts, so the figure is
steady-state throughput; start-up time is printed separately. Target: 2
workers >= 1.7x the candidates per second of 1 worker.
"""
import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.kernels import matmul  # noqa: E402
from autotune.search.parallel import ParallelEvaluator  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=32)
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


if __name__ == "__main__":
    main()
