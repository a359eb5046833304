"""Search strategies on recorded GPU timing tables (simulation).

    python bench/bench_search.py [--seeds 20] [--data DIR] [--synthetic]

Side by side, on the same tables, budgets and seeds:
- this project's model-guided evolutionary search;
- Kernel Tuner's random_sample, genetic_algorithm and greedy_ils in
  simulation_mode (PyPI kernel_tuner), with the four T1 constraints as
  restrictions.

Every tool is held to the same accounting: the first `budget` distinct
configs it asked for, failed ones included (Kernel Tuner's repeated visits
of a cached config are not counted twice).

Prints the median, mean and worst best-found time over the seeds, as a
multiple of each table's true optimum, and the share of runs whose returned
config is a local optimum (no config one parameter away in the space is
faster); each table's landscape (how many configs lie near the optimum, its
local optima and the share of steepest descents that end in each);
with --local_budgets, this search's local-optimum rate at smaller budgets
beside that of plain hill climbing (TimingTable.hill_climb), which spends
every evaluation climbing and so shows what a budget allows; then the
cross-GPU table: this search seeded from another GPU's
table (its best config of each basin of the two-valued parameters) against
the same search unseeded. --synthetic adds the synthetic landscapes of
autotune.search.synthetic to the first table (built from seed 0;
--synthetic_seeds 1,2,3 builds other instances of the same kinds, tables
no setting of the search was chosen on).
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

from autotune.cache import neighbours as reuse  # noqa: E402
from autotune.search import evolutionary, simulate, synthetic  # noqa: E402



def _find_data(start):
    """shared/data/benchmark_hub in the nearest directory above `start`."""
    here = start
    while True:
        candidate = os.path.join(here, "shared", "data", "benchmark_hub")
        if os.path.isdir(candidate) or os.path.dirname(here) == here:
            return candidate
        here = os.path.dirname(here)


DEFAULT_DATA = _find_data(os.path.dirname(ROOT))


KT_STRATEGIES = ("random_sample", "genetic_algorithm", "greedy_ils")


class Run:
    """One tool's outcome on one table for one seed."""

    def __init__(self, table, best_config, best_time):
        self.ratio = best_time / table.optimum()
        self.local_optimum = table.faster_neighbour(best_config) is None


def ours(table, seed, budget, seeds=()):
    def measure(config):
        t = table(config)
        if isinstance(t, float):
            return evolutionary.Measurement(config, t)
        return evolutionary.Measurement(config, None, t)
    search = evolutionary.EvolutionarySearch(table.space, budget=budget,
                                             seed=seed, seeds=seeds)
    result = search.run(measure)
    assert len(result.measurements) == min(budget, len(table.space))
    assert len({m.config for m in result.measurements}) == \
        len(result.measurements)
    return Run(table, result.best.config, result.best.time)


def hill_climb(table, seed, budget):
    key, _ = table.hill_climb(budget, seed)
    return Run(table, table.config_of(key), table.times[key])


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
            data["kernel_name"], "__global__ void kernel() {}",
            data["problem_size"], [], data["tune_params"],
            restrictions=restrictions or None, strategy=strategy,
            strategy_options={"max_fevals": budget}, cache=kt_cache,
            simulation_mode=True, verbose=False, quiet=True)
    # Same accounting as ours: the first `budget` distinct configs.
    seen, best = set(), None
    for r in results:
        key = tuple(r[k] for k in table.keys)
        if key in seen:
            continue
        if len(seen) >= budget:
            break
        seen.add(key)
        if isinstance(r["time"], float) and (best is None
                                             or r["time"] < best[0]):
            best = (r["time"], key)
    return Run(table, table.config_of(best[1]), best[0])


def summarize(runs):
    values = [r.ratio for r in runs]
    return (f"{statistics.median(values):6.4f} {statistics.mean(values):5.3f} "
            f"({max(values):5.3f})")


def local_rate(runs):
    return f"{100.0 * sum(r.local_optimum for r in runs) / len(runs):3.0f}%"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--cross_budget", type=int, default=100)
    parser.add_argument("--tools", default="ours," + ",".join(KT_STRATEGIES),
                        help="comma-separated: ours and Kernel Tuner "
                        "strategy names")
    parser.add_argument("--synthetic", action="store_true",
                        help="add the synthetic landscapes")
    parser.add_argument("--synthetic_seeds", default="0",
                        help="comma-separated seeds of the synthetic "
                        "landscapes (with --synthetic)")
    parser.add_argument("--no_recorded", action="store_true",
                        help="skip the recorded tables (and cross-GPU)")
    parser.add_argument("--no_cross", action="store_true")
    parser.add_argument("--local_budgets", default="",
                        help="comma-separated budgets at which to report "
                        "this search's local-optimum rate on every table")
    args = parser.parse_args()
    tools = args.tools.split(",")
    tables, restrictions = {}, {}
    if not args.no_recorded:
        tables = simulate.load_benchmark_hub(args.data)
        t1 = simulate.load_t1_constraints(
            os.path.join(args.data, "convolution_T1.json"))
        restrictions = {gpu: t1 for gpu in tables}
    seeds = range(args.seeds)
    start = time.time()
    print(f"best found / optimum after {args.budget} evaluations: median, "
          f"mean (worst) over {args.seeds} seeds; local-optimum rate")
    print(f"{'table':<22} {'space':>6} " + " ".join(
        f"{('this search' if t == 'ours' else 'KT ' + t):>27}"
        for t in tools))
    all_runs = {t: [] for t in tools}
    with tempfile.TemporaryDirectory() as tmp:
        if args.synthetic:
            for seed in [int(x) for x in args.synthetic_seeds.split(",")]:
                for name, make in synthetic.LANDSCAPES.items():
                    label = name if seed == 0 else f"{name}-{seed}"
                    path = synthetic.write(
                        os.path.join(tmp, f"{name}-{seed}.json.gz"),
                        make(seed))
                    tables[label] = simulate.TimingTable(path)
                    restrictions[label] = []
        for gpu, table in tables.items():
            kt_cache = os.path.join(tmp, f"{gpu}.json")
            with gzip.open(table.path, "rb") as src, \
                    open(kt_cache, "wb") as dst:
                shutil.copyfileobj(src, dst)
            cells = []
            for tool in tools:
                if tool == "ours":
                    runs = [ours(table, s, args.budget) for s in seeds]
                else:
                    runs = [kernel_tuner_run(kt_cache, table,
                                             restrictions[gpu], tool, s,
                                             args.budget) for s in seeds]
                all_runs[tool] += runs
                cells.append(f"{summarize(runs)} {local_rate(runs)}")
            print(f"{gpu:<22} {len(table.space):>6} " + " ".join(
                f"{c:>27}" for c in cells))
        print(f"{'local optimum, all':<29} " + " ".join(
            f"{local_rate(all_runs[t]):>27}" for t in tools))
        print("\nthe tables' landscapes (python -m autotune.search.simulate "
              "TABLE --landscape):")
        for name, table in tables.items():
            print(f"  {name}: {table.landscape().summary()}")
        for budget in [int(b) for b in args.local_budgets.split(",") if b]:
            runs = {name: [ours(table, s, budget) for s in seeds]
                    for name, table in tables.items()}
            pooled = [r for rs in runs.values() for r in rs]
            print(f"this search at {budget} evaluations: local optimum in "
                  f"{local_rate(pooled).strip()} of runs (" + ", ".join(
                      f"{n} {local_rate(rs).strip()}"
                      for n, rs in runs.items()) + ")")
            climbs = {name: [hill_climb(table, s, budget) for s in seeds]
                      for name, table in tables.items()}
            print(f"  reference, hill climbing from one random config "
                  f"with every evaluation spent climbing: local optimum in "
                  f"{local_rate([r for rs in climbs.values() for r in rs]).strip()}"
                  " (" + ", ".join(
                      f"{n} {local_rate(rs).strip()}, mean "
                      f"{statistics.mean(r.ratio for r in rs):.3f}"
                      for n, rs in climbs.items()) + ")")
    if args.no_recorded or args.no_cross:
        print(f"\n({time.time() - start:.0f} s)")
        return
    tables = {g: t for g, t in tables.items() if g in restrictions
              and restrictions[g]}
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
    print(f"local optimum at {args.cross_budget} evaluations: seeded "
          f"{local_rate(pooled_seeded).strip()}, unseeded "
          f"{local_rate(pooled_unseeded).strip()}")
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
