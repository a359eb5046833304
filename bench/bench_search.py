"""Search strategies on recorded GPU timing tables (simulation).

    python bench/bench_search.py [--seeds 20] [--data DIR] [--synthetic]
        [--tables A100,MI250X] [--budget 200] [--budgets 50,100,200]
        [--cross_budgets 50,100,200] [--tools ours,greedy_ils]

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
faster), with a two-sided Mann-Whitney U test of this search against each
Kernel Tuner strategy (p-value, and which is ahead); each table's landscape
(how many configs lie near the optimum, its local optima and the share of
steepest descents that end in each); this search at each of --budgets:
best found, local-optimum rate, share of runs that reach the optimum, and
the evaluation at which the held-back refinement started (median and
range); with --hill_climb, plain hill climbing (TimingTable.hill_climb) at
the same budgets, which spends every evaluation climbing and so shows what
a budget allows. Then the cross-device table: this search seeded from
another table (its best config of each basin of the two-valued parameters)
against the same search unseeded, per ordered pair and budget, with the
U test's p-value; a pair where seeded is significantly worse (p < 0.05) is
marked WORSE and counted. --synthetic adds the synthetic landscapes of
autotune.search.synthetic to the first tables and its transfer pairs
(a source whose fastest basin is a poor one of the target) to the
cross-device table (built from seed 0; --synthetic_seeds 1,2,3 builds
other instances of the same kinds, tables no setting of the search was
chosen on).
"""
import argparse
import contextlib
import gzip
import io
import json
import math
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

    def __init__(self, table, best_config, best_time, refine_started=None):
        self.ratio = best_time / table.optimum()
        self.local_optimum = table.faster_neighbour(best_config) is None
        self.refine_started = refine_started


def mann_whitney(xs, ys):
    """Two-sided Mann-Whitney U test, normal approximation with tie and
    continuity corrections. Returns (p, rank-sum difference sign: -1 when
    xs tend to be smaller, +1 larger, 0 neither)."""
    n1, n2 = len(xs), len(ys)
    pooled = sorted([(v, 0) for v in xs] + [(v, 1) for v in ys])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2.0 + 1.0
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    rank_sum = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u = rank_sum - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    n = n1 + n2
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0, 0
    z = (abs(u - mean) - 0.5) / math.sqrt(variance)
    p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))
    return p, (u > mean) - (u < mean)


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
    return Run(table, result.best.config, result.best.time,
               getattr(result, "refine_started", None))


_OURS_CACHE = {}


def ours_cached(name, table, seed, budget, seeds=()):
    key = (name, seed, budget, tuple(seeds))
    if key not in _OURS_CACHE:
        _OURS_CACHE[key] = ours(table, seed, budget, seeds)
    return _OURS_CACHE[key]


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


def optimum_rate(runs):
    return f"{100.0 * sum(r.ratio <= 1.0 for r in runs) / len(runs):3.0f}%"


def refine_start(runs):
    starts = [r.refine_started for r in runs if r.refine_started is not None]
    if not starts:
        return "never"
    return (f"{statistics.median(starts):5.1f} [{min(starts)}-{max(starts)}]"
            + ("" if len(starts) == len(runs) else
               f" ({len(runs) - len(starts)} never)"))


def u_verdict(ours_runs, other_runs):
    """'p=... ahead/behind' of this search against another tool."""
    p, sign = mann_whitney([r.ratio for r in ours_runs],
                           [r.ratio for r in other_runs])
    side = {-1: "ahead", 1: "behind", 0: "tie"}[sign]
    return f"p={p:.2g} {side}" if p < 0.05 else f"p={p:.2g} (n.s.)"


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--tables", default="",
                        help="comma-separated table names to keep (default "
                        "all); cross-device pairs use the kept ones")
    parser.add_argument("--budget", type=int, default=200,
                        help="budget of the comparison with Kernel Tuner")
    parser.add_argument("--budgets", default="50,100,200",
                        help="budgets of this search's per-table figures "
                        "(local optimum, optimum reached, refinement start)")
    parser.add_argument("--cross_budgets", default="50,100,200")
    parser.add_argument("--tools", default="ours," + ",".join(KT_STRATEGIES),
                        help="comma-separated: ours and Kernel Tuner "
                        "strategy names")
    parser.add_argument("--synthetic", action="store_true",
                        help="add the synthetic landscapes and transfer "
                        "pairs")
    parser.add_argument("--synthetic_seeds", default="0",
                        help="comma-separated seeds of the synthetic "
                        "landscapes (with --synthetic)")
    parser.add_argument("--no_recorded", action="store_true",
                        help="skip the recorded tables")
    parser.add_argument("--no_cross", action="store_true")
    parser.add_argument("--hill_climb", action="store_true",
                        help="plain hill climbing at --budgets, a "
                        "reference for the local-optimum rate")
    args = parser.parse_args()
    tools = args.tools.split(",")
    keep = set(args.tables.split(",")) if args.tables else None
    tables, restrictions = {}, {}
    transfers = []  # (label, source table, target label, target table)
    if not args.no_recorded:
        tables = simulate.load_benchmark_hub(args.data)
        t1 = simulate.load_t1_constraints(
            os.path.join(args.data, "convolution_T1.json"))
        restrictions = {gpu: t1 for gpu in tables}
    seeds = range(args.seeds)
    start = time.time()
    tmp = tempfile.mkdtemp()
    try:
        if args.synthetic:
            for seed in ints(args.synthetic_seeds):
                suffix = "" if seed == 0 else f"-{seed}"
                for name, make in synthetic.LANDSCAPES.items():
                    path = synthetic.write(
                        os.path.join(tmp, f"{name}-{seed}.json.gz"),
                        make(seed))
                    tables[name + suffix] = simulate.TimingTable(path)
                    restrictions[name + suffix] = []
                for name, make in synthetic.TRANSFERS.items():
                    source, _ = make(seed)
                    path = synthetic.write(
                        os.path.join(tmp, f"{name}-source-{seed}.json.gz"),
                        source)
                    transfers.append((f"{name}{suffix}'", simulate.TimingTable(
                        path), name + suffix))
        if keep is not None:
            tables = {n: t for n, t in tables.items() if n in keep}
        report(args, tools, tables, restrictions, transfers, seeds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({time.time() - start:.0f} s)")


def report(args, tools, tables, restrictions, transfers, seeds, tmp):
    print(f"best found / optimum after {args.budget} evaluations: median, "
          f"mean (worst) over {args.seeds} seeds; local-optimum rate")
    print(f"{'table':<22} {'space':>6} " + " ".join(
        f"{('this search' if t == 'ours' else 'KT ' + t):>27}"
        for t in tools))
    all_runs = {t: [] for t in tools}
    tests = {}
    for gpu, table in tables.items():
        kt_cache = os.path.join(tmp, f"{gpu}.json")
        with gzip.open(table.path, "rb") as src, \
                open(kt_cache, "wb") as dst:
            shutil.copyfileobj(src, dst)
        cells, runs_of = [], {}
        for tool in tools:
            if tool == "ours":
                runs = [ours_cached(gpu, table, s, args.budget)
                        for s in seeds]
            else:
                runs = [kernel_tuner_run(kt_cache, table,
                                         restrictions[gpu], tool, s,
                                         args.budget) for s in seeds]
            runs_of[tool] = runs
            all_runs[tool] += runs
            cells.append(f"{summarize(runs)} {local_rate(runs)}")
        print(f"{gpu:<22} {len(table.space):>6} " + " ".join(
            f"{c:>27}" for c in cells))
        if "ours" in runs_of:
            tests[gpu] = ", ".join(
                f"{t} {u_verdict(runs_of['ours'], runs_of[t])}"
                for t in tools if t != "ours")
    print(f"{'local optimum, all':<29} " + " ".join(
        f"{local_rate(all_runs[t]):>27}" for t in tools if all_runs[t]))
    if any(tests.values()):
        print("\nthis search against each Kernel Tuner strategy at "
              f"{args.budget} evaluations (two-sided Mann-Whitney U on best "
              "found / optimum):")
        for gpu, text in tests.items():
            print(f"  {gpu:<22} {text}")
    print("\nthe tables' landscapes (python -m autotune.search.simulate "
          "TABLE --landscape):")
    for name, table in tables.items():
        print(f"  {name}: {table.landscape().summary()}")
    budgets = ints(args.budgets)
    if budgets:
        print("\nthis search by budget: median mean (worst), local-optimum "
              "rate, optimum reached, evaluation at which refinement "
              "started: median [range]")
        print(f"{'table':<22} {'budget':>6} {'best found':>22} {'local':>6} "
              f"{'optimum':>8}  refinement started")
        for name, table in tables.items():
            for budget in budgets:
                runs = [ours_cached(name, table, s, budget) for s in seeds]
                print(f"{name:<22} {budget:>6} {summarize(runs):>22} "
                      f"{local_rate(runs):>6} {optimum_rate(runs):>8}  "
                      f"{refine_start(runs)}")
                if args.hill_climb:
                    climbs = [hill_climb(table, s, budget) for s in seeds]
                    print(f"{'  hill climbing':<22} {budget:>6} "
                          f"{summarize(climbs):>22} {local_rate(climbs):>6} "
                          f"{optimum_rate(climbs):>8}")
    if args.no_cross:
        return
    pairs = []
    recorded = [g for g in tables if restrictions.get(g)]
    for src in recorded:
        for dst in recorded:
            if src != dst:
                pairs.append((f"{src} -> {dst}", tables[src], dst))
    pairs += [(f"{label} -> {dst}", src, dst) for label, src, dst
              in transfers if dst in tables]
    if not pairs:
        return
    print()
    print("cross-device seeding: best found / target optimum, median mean "
          "(worst); two-sided Mann-Whitney U of seeded against unseeded "
          "(WORSE: seeded significantly worse, better: significantly "
          "better, p < 0.05)")
    print(f"{'from -> to':<40} {'budget':>6} {'seeded':>22} "
          f"{'unseeded':>22} {'p':>8}")
    summary = {}
    for budget in ints(args.cross_budgets):
        pooled_seeded, pooled_unseeded = [], []
        worse = better = 0
        for label, src_table, dst in pairs:
            dst_table = tables[dst]
            two_valued = [n for n, v in src_table.params.items()
                          if len(v) == 2]
            seed_configs = reuse.diverse_top(src_table.ranked(), 6,
                                             two_valued)
            seeded = [ours_cached(dst, dst_table, s, budget, seed_configs)
                      for s in seeds]
            unseeded = [ours_cached(dst, dst_table, s, budget)
                        for s in seeds]
            pooled_seeded += seeded
            pooled_unseeded += unseeded
            p, sign = mann_whitney([r.ratio for r in seeded],
                                   [r.ratio for r in unseeded])
            mark = ""
            if p < 0.05 and sign > 0:
                mark, worse = "WORSE", worse + 1
            elif p < 0.05 and sign < 0:
                mark, better = "better", better + 1
            print(f"{label:<40} {budget:>6} {summarize(seeded):>22} "
                  f"{summarize(unseeded):>22} {p:>8.2g} {mark}")
        print(f"{'all ' + str(len(pairs)) + ' pairs':<40} {budget:>6} "
              f"{summarize(pooled_seeded):>22} "
              f"{summarize(pooled_unseeded):>22}   local optimum seeded "
              f"{local_rate(pooled_seeded).strip()}, unseeded "
              f"{local_rate(pooled_unseeded).strip()}")
        summary[budget] = (worse, better)
    print("pairs where seeded is significantly worse / better than "
          "unseeded: " + ", ".join(
              f"budget {b}: {w} / {bt} of {len(pairs)}"
              for b, (w, bt) in summary.items()))


if __name__ == "__main__":
    main()
