"""Model-guided evolutionary search over a Space.

A genetic algorithm (tournament selection, uniform crossover, mutation that
prefers neighbouring values, elitism) whose offspring are screened by a
cheap surrogate before any of them is measured: a ridge regression of log
run time on one-hot values, normalized values and their pairwise products,
refitted on every measurement so far. Each generation measures the
offspring the model ranks best, a few random ones (exploration), and the
untried neighbours of the best config (local refinement). Measurements are
the expensive part (a compile and a benchmark on a GPU), so a few
milliseconds of numpy per generation are well spent.

Properties: deterministic for a seed; never measures a config twice; failed
configs (compile error, out of resources, wrong result) are remembered, fed
to the model as slow, and never win; stops at the evaluation budget or the
time budget, whichever comes first. Seeds (neighbour shapes, other devices)
are measured first.
"""
import math
import random
import time

import numpy as np

from autotune.records import Candidate
from autotune.search.space import SpaceError


class SearchError(Exception):
    pass


class Measurement:
    __slots__ = ("config", "time", "failure", "detail", "timing")

    def __init__(self, config, time_value=None, failure="NONE", detail="",
                 timing=None):
        self.config = config
        self.time = time_value
        self.failure = failure
        self.detail = detail
        self.timing = timing

    @property
    def ok(self):
        return self.failure == "NONE" and self.time is not None


class SearchResult:
    def __init__(self, measurements, seconds, stopped_by):
        self.measurements = measurements
        self.seconds = seconds
        self.stopped_by = stopped_by
        ok = [m for m in measurements if m.ok]
        self.best = min(ok, key=lambda m: (m.time, m.config.sort_key)) \
            if ok else None


class _Encoding:
    """Configs as index vectors, and the surrogate's feature matrix."""

    def __init__(self, space):
        self.names = [n for n, _ in space.dimensions]
        self.values = [list(v) for _, v in space.dimensions]
        self.index = [{v: i for i, v in enumerate(vals)}
                      for vals in self.values]

    def encode(self, config):
        values = space_values(config)
        return tuple(self.index[d][values[name]]
                     for d, name in enumerate(self.names))

    def features(self, genomes):
        g = np.asarray(genomes, dtype=np.int64)
        cols = [np.ones((len(g), 1))]
        numeric = []
        for d, vals in enumerate(self.values):
            if len(vals) < 2:
                continue
            onehot = np.zeros((len(g), len(vals)))
            onehot[np.arange(len(g)), g[:, d]] = 1.0
            cols.append(onehot)
            numeric.append(g[:, d] / (len(vals) - 1))
        if numeric:
            num = np.stack(numeric, axis=1)
            cols.append(num)
            pairs = [num[:, i:i + 1] * num[:, i + 1:]
                     for i in range(num.shape[1] - 1)]
            if pairs:
                cols.append(np.concatenate(pairs, axis=1))
        return np.concatenate(cols, axis=1)


def space_values(config):
    values = dict(config.kwargs)
    values["num_warps"] = config.num_warps
    values["num_stages"] = config.num_stages
    return values


class EvolutionarySearch:
    def __init__(self, space, budget=100, time_budget_s=None, seed=0,
                 seeds=(), population=16, batch=8, explore=0.25,
                 global_pool=300, niche_reach=3.0, local_per_niche=4,
                 polish=0.2):
        if budget is None or budget <= 0:
            raise SearchError(f"evaluation budget must be positive, got "
                              f"{budget!r}")
        if time_budget_s is not None and time_budget_s <= 0:
            raise SearchError(f"time budget must be positive, got "
                              f"{time_budget_s!r}")
        self.space = space
        self.budget = budget
        self.time_budget_s = time_budget_s
        self.rng = random.Random(seed)
        self.population = population
        self.batch = batch
        self.explore = explore
        self.global_pool = global_pool
        self.niche_reach = niche_reach
        self.local_per_niche = local_per_niche
        self.polish = polish
        self.enc = _Encoding(space)
        self.niche_dims = [d for d, vals in enumerate(self.enc.values)
                           if 1 < len(vals) <= 2]
        try:
            valid = space.configs()
        except SpaceError as e:
            raise SearchError(str(e))
        self.valid = {self.enc.encode(c): c for c in valid}
        self.valid_list = list(self.valid)
        self.seeds = []
        for config in seeds:
            try:
                genome = self.enc.encode(config)
            except KeyError:
                continue  # a seed from another space: not applicable here
            if genome in self.valid and genome not in self.seeds:
                self.seeds.append(genome)

    # -- genetic operators ------------------------------------------------
    def _mutate(self, genome, rate):
        out = list(genome)
        for d, vals in enumerate(self.enc.values):
            if len(vals) > 1 and self.rng.random() < rate:
                if self.rng.random() < 0.7:
                    step = self.rng.choice((-2, -1, 1, 2))
                    out[d] = min(len(vals) - 1, max(0, out[d] + step))
                else:
                    out[d] = self.rng.randrange(len(vals))
        return tuple(out)

    def _crossover(self, a, b):
        return tuple(x if self.rng.random() < 0.5 else y for x, y in zip(a, b))

    def _tournament(self, ranked, k=3):
        picks = [self.rng.randrange(len(ranked)) for _ in range(k)]
        return ranked[min(picks)]

    def _niche(self, genome):
        return tuple(genome[d] for d in self.niche_dims)

    def _neighbours(self, genome, full=False):
        """Configs one parameter away: the adjacent values, or with full
        every other value of each parameter (a coordinate sweep)."""
        out = []
        for d, vals in enumerate(self.enc.values):
            steps = range(len(vals)) if full else (genome[d] - 1,
                                                    genome[d] + 1)
            for j in steps:
                if 0 <= j < len(vals) and j != genome[d]:
                    n = list(genome)
                    n[d] = j
                    out.append(tuple(n))
        return out

    # -- surrogate --------------------------------------------------------
    def _fit(self, measured):
        genomes = list(measured)
        ok_times = [m.time for m in measured.values() if m.ok]
        if len(ok_times) < 8:
            return None
        worst = math.log(max(ok_times)) + 1.0
        y = np.array([math.log(m.time) if m.ok else worst
                      for m in measured.values()])
        x = self.enc.features(genomes)
        lam = 1.0
        a = x.T @ x + lam * np.eye(x.shape[1])
        a[0, 0] -= lam  # do not shrink the intercept
        try:
            return np.linalg.solve(a, x.T @ y)
        except np.linalg.LinAlgError:
            return None

    def _rank(self, weights, pool):
        if weights is None or not pool:
            return list(pool)
        pred = self.enc.features(pool) @ weights
        order = np.argsort(pred, kind="stable")
        return [pool[i] for i in order]

    # -- driver -----------------------------------------------------------
    def run(self, measure=None, measure_many=None):
        """measure(config) -> Measurement, or measure_many(configs) ->
        [Measurement] for batches (parallel workers); returns a
        SearchResult."""
        if measure is None and measure_many is None:
            raise SearchError("run() needs measure or measure_many")
        start = time.perf_counter()
        measured = {}
        order = []
        budget = min(self.budget, len(self.valid))

        def out_of_time():
            return (self.time_budget_s is not None
                    and time.perf_counter() - start >= self.time_budget_s)

        def evaluate(genomes):
            todo = []
            for genome in genomes:
                if genome in self.valid and genome not in measured \
                        and genome not in todo:
                    todo.append(genome)
            todo = todo[:budget - len(order)]
            if measure_many is not None and todo and not out_of_time():
                # One batch: the workers measure it in parallel.
                results = measure_many([self.valid[g] for g in todo])
                for genome, m in zip(todo, results):
                    measured[genome] = m
                    order.append(m)
            else:
                for genome in todo:
                    if out_of_time():
                        break
                    m = measure(self.valid[genome])
                    measured[genome] = m
                    order.append(m)
            return len(order) < budget and not out_of_time()

        initial = list(self.seeds)
        pool = [g for g in self.valid_list if g not in set(initial)]
        self.rng.shuffle(pool)
        # Seeds come on top of a random population, not instead of it: a
        # neighbour's optimum may sit in a basin that is poor here.
        initial += pool[:self.population]
        going = evaluate(initial)
        stall = 0
        while going:
            ranked = sorted((g for g in measured if measured[g].ok),
                            key=lambda g: (measured[g].time, g))
            if not ranked:
                going = evaluate([g for g in pool if g not in measured]
                                 [:self.batch])
                continue
            elite = ranked[:max(2, self.population // 2)]
            # Niche elitism: the best of every combination of the few-valued
            # parameters stays a parent, so the population does not collapse
            # into one basin while another holds the optimum.
            niches = {}
            for g in ranked:
                niches.setdefault(self._niche(g), g)
            elite += [g for g in niches.values() if g not in elite]
            rate = 0.3 if stall < 3 else 0.6
            offspring = set()
            for _ in range(200):
                child = self._crossover(self._tournament(elite),
                                        self._tournament(elite))
                offspring.add(self._mutate(child, rate / 2))
                offspring.add(self._mutate(self._tournament(elite), rate))
            offspring.update(self._neighbours(ranked[0]))
            # Distant candidates too: the model may see a better region than
            # the one the population sits in (escapes local optima).
            for _ in range(self.global_pool if stall >= 2 else 0):
                offspring.add(self.valid_list[
                    self.rng.randrange(len(self.valid_list))])
            fresh = [g for g in offspring
                     if g in self.valid and g not in measured]
            fresh.sort()
            if not fresh:
                fresh = [g for g in self.valid_list if g not in measured]
                self.rng.shuffle(fresh)
            weights = self._fit(measured)
            ranked_pool = self._rank(weights, fresh)
            n_explore = max(1, int(self.batch * self.explore))
            chosen = ranked_pool[:self.batch - n_explore]
            rest = ranked_pool[self.batch - n_explore:]
            chosen += self.rng.sample(rest, min(n_explore, len(rest)))
            # Untried neighbours of the best, and of the best of each niche
            # within reach of it: local refinement in every basin.
            best_time = measured[ranked[0]].time
            # Last part of the budget: sweep whole parameters around the
            # leaders (the model picks which values) instead of +-1 steps.
            polish = len(order) >= (1.0 - self.polish) * budget
            for leader in [ranked[0]] + [
                    g for g in niches.values() if g != ranked[0]
                    and measured[g].time < self.niche_reach * best_time]:
                near = [g for g in self._neighbours(leader, full=polish)
                        if g in self.valid and g not in measured
                        and g not in chosen]
                # In the polish phase the overall best gets a complete
                # coordinate sweep: near-optimal configs often differ from
                # it in one parameter the model cannot rank well.
                limit = len(near) if (polish and leader == ranked[0]) \
                    else self.local_per_niche
                chosen += self._rank(weights, near)[:limit]
            best_before = measured[ranked[0]].time
            going = evaluate(chosen)
            best_now = min(m.time for m in measured.values() if m.ok)
            stall = 0 if best_now < best_before else stall + 1
        stopped_by = "budget" if len(order) >= budget else "time"
        return SearchResult(order, time.perf_counter() - start, stopped_by)


def tune_with_search(evaluator, space, budget=None, seed=0, seeds=(),
                     time_budget_s=None, pool=None):
    """Tunes one fusion with the evolutionary search; the evaluator is the
    tuner's CandidateEvaluator, and a parallel.CandidatePool, when given,
    measures each batch in its workers. Returns a tuner.TuneResult."""
    from autotune import tuner
    budget = budget or max(16, min(len(space), 64))
    search = EvolutionarySearch(space, budget=budget, seed=seed, seeds=seeds,
                                time_budget_s=time_budget_s)

    def as_measurement(config, candidate, timing):
        return Measurement(config, candidate.run_time_us if candidate.ok
                           else None, candidate.failure,
                           candidate.failure_detail, timing)

    def measure(config):
        return as_measurement(config, *evaluator(config))

    def measure_many(configs):
        return [as_measurement(c, *answer)
                for c, answer in zip(configs, pool.measure_many(configs))]
    if pool is None:
        result = search.run(measure)
    else:
        result = search.run(measure_many=measure_many)
    evaluator.finish()
    candidates = [Candidate(m.config, m.time or 0.0, m.failure, m.detail)
                  for m in result.measurements]
    if result.best is None:
        raise tuner.TuningError(f"no config ran correctly ({len(candidates)} "
                                "tried)")
    best = next(c for c in candidates if c.config == result.best.config)
    spread = result.best.timing.spread if result.best.timing else 0.0
    return tuner.TuneResult(candidates, best, spread, result.seconds,
                            "evolutionary")
