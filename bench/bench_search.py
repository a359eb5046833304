"""Search strategies on recorded GPU timing tables (simulation).

    python bench/bench_search.py [--seeds 20] [--data DIR]

Side by side, on the same tables, budgets and seeds:
- this project's model-guided evolutionary search;
- Kernel Tuner's random_sample and genetic_algorithm in simulation_mode
  (PyPI kernel_tuner), with the four T1 constraints as restrictions.

Prints the median (and worst) best-found time over the seeds, as a multiple
of each GPU's true optimum, at 200 evaluations; then the cross-GPU table:
this search seeded from another GPU's table (its best config of each basin
of the two-valued parameters) against the same search unseeded, at 100
evaluations.
"""
import argparse
import contextlib
import gzip
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autotune.search import evolutionary, reuse, simulate  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data",
                            "benchmark_hub")


def ours(table, seed, budget, seeds=()):
    def measure(config):
        t = table(config)
        if isinstance(t, float):
            return evolutionary.Measurement(config, t)
        return evolutionary.Measurement(config, None, t)
    search = evolutionary.EvolutionarySearch(table.space, budget=budget,
                                             seed=seed, seeds=seeds)
    result = search.run(measure)
    assert len(result.measurements) == budget
    assert len({m.config for m in result.measurements}) == budget
    return result.best.time / table.optimum()


def kernel_tuner_run(kt_cache, table, restrictions, strategy, seed, budget):
    import numpy as np
    import kernel_tuner
    with open(kt_cache) as f:
        data = json.load(f)
    random.seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            data["kernel_name"], "__global__ void convolution_kernel() {}",
            data["problem_size"], [], data["tune_params"],
            restrictions=restrictions, strategy=strategy,
            strategy_options={"max_fevals": budget}, cache=kt_cache,
            simulation_mode=True, verbose=False, quiet=True)
    times = [r["time"] for r in results if isinstance(r["time"], float)]
    return min(times) / table.optimum()


def summarize(values):
    return (f"{statistics.median(values):6.4f} {statistics.mean(values):5.3f} "
            f"({max(values):5.3f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--cross_budget", type=int, default=100)
    args = parser.parse_args()
    tables = simulate.load_benchmark_hub(args.data)
    restrictions = simulate.load_t1_constraints(
        os.path.join(args.data, "convolution_T1.json"))
    seeds = range(args.seeds)
    start = time.time()
    print(f"best found / optimum after {args.budget} evaluations: median, "
          f"mean (worst) over {args.seeds} seeds")
    print(f"{'GPU':<8} {'space':>6} {'this search':>22} "
          f"{'KT random_sample':>22} {'KT genetic_algorithm':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for gpu, table in tables.items():
            kt_cache = os.path.join(tmp, f"{gpu}.json")
            with gzip.open(table.path, "rb") as src, \
                    open(kt_cache, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mine = [ours(table, s, args.budget) for s in seeds]
            rnd = [kernel_tuner_run(kt_cache, table, restrictions,
                                    "random_sample", s, args.budget)
                   for s in seeds]
            ga = [kernel_tuner_run(kt_cache, table, restrictions,
                                   "genetic_algorithm", s, args.budget)
                  for s in seeds]
            print(f"{gpu:<8} {len(table.space):>6} {summarize(mine):>22} "
                  f"{summarize(rnd):>22} {summarize(ga):>22}")
    print()
    print(f"cross-GPU, {args.cross_budget} evaluations: median, mean "
          "(worst) best found / target optimum")
    print(f"{'from -> to':<18} {'seeded':>22} {'unseeded':>22}")
    pooled_seeded, pooled_unseeded = [], []
    for src, src_table in tables.items():
        two_valued = [n for n, v in src_table.params.items() if len(v) == 2]
        seed_configs = reuse.diverse_top(src_table.ranked(), 6, two_valued)
        for dst, dst_table in tables.items():
            if src == dst:
                continue
            seeded = [ours(dst_table, s, args.cross_budget, seed_configs)
                      for s in seeds]
            unseeded = [ours(dst_table, s, args.cross_budget) for s in seeds]
            pooled_seeded += seeded
            pooled_unseeded += unseeded
            print(f"{src + ' -> ' + dst:<18} {summarize(seeded):>22} "
                  f"{summarize(unseeded):>22}")
    print(f"{'all six pairs':<18} {summarize(pooled_seeded):>22} "
          f"{summarize(pooled_unseeded):>22}")
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
