"""Model-guided evolutionary search over a Space.

A genetic algorithm (tournament selection, uniform crossover, mutation,
elitism) whose offspring are screened by a cheap surrogate before any of
them is measured: a ridge regression of log run time on one-hot values,
scaled values of the ordered parameters and their pairwise products, and
one-hot pairs of values of every two parameters (interactions, such as a
tile shape that is fast only when the other tile size is small), refitted
on every measurement so far. Each generation measures the
offspring the model ranks best, a few random ones (exploration), and the
untried neighbours of the leaders (local refinement). Measurements are the
expensive part (a compile and a benchmark on a GPU), so a few milliseconds
of numpy per generation are well spent.

Parameter types come from the values: numeric ones are ordinal (mutation
steps to nearby values; neighbours are the adjacent values), two-valued
ones are switches, anything else is categorical (every other value is as
near). Leaders, one per basin, keep the population from collapsing: the
best of each combination of the switches, and configs far (a distance
defined for every type) from every faster leader. When the best has not
improved for a few generations, the model's best moves of two ordinal
parameters at once from it are tried too (sizes that trade off against
each other form ridges a one-parameter step cannot follow).

The end of the budget is held back: the best config the search found
itself gets a sweep of every value of every parameter, and so does any
better config the sweep finds, so what is returned is a local optimum
unless the budget is too small for a sweep. What the sweeps leave of the
reserve goes to the model's best joint moves of two parameters from the
swept best (those of the most interacting pairs first: a basin whose
bottom is one such move from a faster one is left that way); no budget is
held back for them, so they never shorten the evolutionary phase. The
reserve is sized by the neighbourhood but never more than 60 % of the
budget, so the evolutionary phase keeps a real share of small budgets
(at 50 evaluations, a few of the model's picks after the random first
generation: more would cost the descent that heavy-tailed tables need).
Seeds (neighbour shapes, other devices, the incumbent) are measured
first but take no part in selection, in the model or in the generations;
a seed measured faster than anything the search found gets a few tries
of its neighbours beside the refinement of the search's own best (a
better neighbour becomes the search's own best), and the faster end wins.

Properties: deterministic for a seed; never measures a config twice; failed
configs (compile error, out of resources, wrong result) are remembered, fed
to the model as slow, and never win; stops at the evaluation budget or the
time budget, whichever comes first.
"""
import math
import random
import time

import numpy as np

from autotune.errors import SearchError
from autotune.search.space import SpaceError




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

    @classmethod
    def of_candidate(cls, config, candidate, timing=None):
        """The measurement a tuner Candidate reports for `config`."""
        return cls(config, candidate.run_time_us if candidate.ok else None,
                   candidate.failure, candidate.failure_detail, timing)


class SearchResult:
    def __init__(self, measurements, seconds, stopped_by,
                 refine_started=None):
        self.measurements = measurements
        self.seconds = seconds
        self.stopped_by = stopped_by
        # How many evaluations had been made when the held-back refinement
        # began (None: it never did).
        self.refine_started = refine_started
        ok = [m for m in measurements if m.ok]
        self.best = min(ok, key=lambda m: (m.time, m.config.sort_key)) \
            if ok else None


FIXED, BINARY, ORDINAL, CATEGORICAL = "fixed", "binary", "ordinal", "categorical"

MAX_INTERACTION_CELLS = 100
# Ridge penalties: interactions are shrunk harder than main effects, so a
# pair's cell moves the prediction only when the data insist on it.
MAIN_PENALTY, INTERACTION_PENALTY = 1.0, 3.0


def _parameter_kind(values):
    if len(values) < 2:
        return FIXED
    if len(values) == 2:
        return BINARY
    if all(isinstance(v, (int, float)) and not isinstance(v, bool)
           for v in values):
        return ORDINAL
    return CATEGORICAL


class _Encoding:
    """Configs as index vectors, and the surrogate's feature matrix.

    Numeric parameters are ordinal (their values sorted, so a step of one
    index is a step to the next larger value); any other parameter with
    more than two values is categorical (no order: every other value is
    equally near)."""

    def __init__(self, space):
        self.names = [n for n, _ in space.dimensions]
        self.kinds = [_parameter_kind(list(v)) for _, v in space.dimensions]
        self.values = [sorted(v) if kind == ORDINAL else list(v)
                       for kind, (_, v) in zip(self.kinds, space.dimensions)]
        self.index = [{v: i for i, v in enumerate(vals)}
                      for vals in self.values]
        self.varying = [d for d, kind in enumerate(self.kinds)
                        if kind != FIXED]
        # Interactions of every two parameters, as one-hot pairs of values;
        # a pair with more combinations than this is left out, which bounds
        # the model's size for parameters with many values.
        self.pairs = [(a, b) for i, a in enumerate(self.varying)
                      for b in self.varying[i + 1:]
                      if len(self.values[a]) * len(self.values[b])
                      <= MAX_INTERACTION_CELLS]
        numeric = sum(kind != CATEGORICAL for kind in
                      (self.kinds[d] for d in self.varying))
        self.main_width = (1 + sum(len(self.values[d]) for d in self.varying)
                           + numeric + numeric * (numeric - 1) // 2)
        # Ordinal values on [0, 1] by their logarithm when all are positive
        # (sizes: 16 to 32 is as big a step as 128 to 256), else by index.
        self.scaled = {}
        for d in self.varying:
            vals = self.values[d]
            if self.kinds[d] == ORDINAL and min(vals) > 0:
                logs = np.log(np.asarray(vals, dtype=float))
                self.scaled[d] = (logs - logs[0]) / (logs[-1] - logs[0])
            else:
                self.scaled[d] = np.arange(len(vals)) / (len(vals) - 1)

    def encode(self, config):
        values = space_values(config)
        return tuple(self.index[d][values[name]]
                     for d, name in enumerate(self.names))

    def features(self, genomes):
        g = np.asarray(genomes, dtype=np.int64)
        cols = [np.ones((len(g), 1))]
        numeric = []
        for d in self.varying:
            vals = self.values[d]
            onehot = np.zeros((len(g), len(vals)))
            onehot[np.arange(len(g)), g[:, d]] = 1.0
            cols.append(onehot)
            if self.kinds[d] != CATEGORICAL:
                numeric.append(self.scaled[d][g[:, d]])
        if numeric:
            num = np.stack(numeric, axis=1)
            cols.append(num)
            pairs = [num[:, i:i + 1] * num[:, i + 1:]
                     for i in range(num.shape[1] - 1)]
            if pairs:
                cols.append(np.concatenate(pairs, axis=1))
        for a, b in self.pairs:
            width = len(self.values[b])
            cells = np.zeros((len(g), len(self.values[a]) * width))
            cells[np.arange(len(g)), g[:, a] * width + g[:, b]] = 1.0
            cols.append(cells)
        return np.concatenate(cols, axis=1)

    def distance(self, a, b):
        """How far apart two configs are, whatever the parameter types: a
        differing categorical or two-valued parameter counts one, an
        ordinal one counts by how many steps apart (one step: half)."""
        total = 0.0
        for d in self.varying:
            if a[d] != b[d]:
                if self.kinds[d] == ORDINAL:
                    total += min(1.0, abs(a[d] - b[d]) / 2.0)
                else:
                    total += 1.0
        return total


def space_values(config):
    values = dict(config.kwargs)
    values["num_warps"] = config.num_warps
    values["num_stages"] = config.num_stages
    return values


class EvolutionarySearch:
    def __init__(self, space, budget=100, time_budget_s=None, seed=0,
                 seeds=(), population=16, batch=6, explore=0.25,
                 global_pool=300, niche_reach=3.0, local_per_niche=4,
                 max_leaders=3, refine_margin=1.25, refine_share=0.6,
                 far_leaders_as_parents=False, pair_moves=2,
                 refine_pair_moves=None, refine_joint_share=0.3,
                 seed_tries=6, clock=None):
        if budget is None or budget <= 0:
            raise SearchError(f"evaluation budget must be positive, got "
                              f"{budget!r}")
        if time_budget_s is not None and time_budget_s <= 0:
            raise SearchError(f"time budget must be positive, got "
                              f"{time_budget_s!r}")
        self.space = space
        self.budget = budget
        self.time_budget_s = time_budget_s
        # Seconds for time_budget_s: ranks of one job pass a clock they
        # agree on, so that all stop after the same measurement.
        self.clock = clock or time.perf_counter
        self.rng = random.Random(seed)
        self.population = population
        self.batch = batch
        self.explore = explore
        self.global_pool = global_pool
        self.niche_reach = niche_reach
        self.local_per_niche = local_per_niche
        self.max_leaders = max_leaders
        self.refine_margin = refine_margin
        self.refine_share = refine_share
        self.far_leaders_as_parents = far_leaders_as_parents
        self.pair_moves = pair_moves
        # Joint moves of two parameters tried from each best while refining
        # (model order): a basin whose bottom is one such move from a faster
        # one is left that way.
        self.refine_pair_moves = max(4, budget // 10) \
            if refine_pair_moves is None else refine_pair_moves
        # Their share of each refinement step once the sweeps are done (the
        # rest: the other leaders' neighbours, while any are left).
        self.refine_joint_share = refine_joint_share
        self.seed_tries = seed_tries
        self.enc = _Encoding(space)
        self.binary_dims = [d for d, kind in enumerate(self.enc.kinds)
                            if kind == BINARY]
        # Leaders of different basins are at least this far apart.
        self.niche_radius = max(2.0, len(self.enc.varying) / 3.0)
        try:
            valid = space.configs()
        except SpaceError as e:
            raise SearchError(str(e)) from e
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
        # Seeds are at most half a population: the rest is unseeded.
        self.seeds = self.seeds[:max(1, population // 2)]

    # -- genetic operators ------------------------------------------------
    def _mutate(self, genome, rate):
        out = list(genome)
        for d in self.enc.varying:
            if self.rng.random() >= rate:
                continue
            n = len(self.enc.values[d])
            kind = self.enc.kinds[d]
            if kind == ORDINAL and self.rng.random() < 0.7:
                step = self.rng.choice((-2, -1, 1, 2))
                out[d] = min(n - 1, max(0, out[d] + step))
            else:
                # Two-valued: flip; categorical: any other value.
                other = self.rng.randrange(n - 1)
                out[d] = other if other < out[d] else other + 1
        return tuple(out)

    def _crossover(self, a, b):
        return tuple(x if self.rng.random() < 0.5 else y for x, y in zip(a, b))

    def _tournament(self, ranked, k=3):
        picks = [self.rng.randrange(len(ranked)) for _ in range(k)]
        return ranked[min(picks)]

    def _neighbours(self, genome, full=False):
        """Valid configs one parameter away: the adjacent values of an
        ordinal parameter (every other value with full: a coordinate
        sweep), every other value of the rest."""
        out = []
        for d in self.enc.varying:
            n = len(self.enc.values[d])
            if full or self.enc.kinds[d] != ORDINAL:
                steps = range(n)
            else:
                steps = (genome[d] - 1, genome[d] + 1)
            for j in steps:
                if 0 <= j < n and j != genome[d]:
                    g = list(genome)
                    g[d] = j
                    g = tuple(g)
                    if g in self.valid:
                        out.append(g)
        return out

    def _pair_moves(self, genome, every_kind=False):
        """Valid configs two ordinal parameters away (any values of both;
        with every_kind, two parameters of any type). Sizes often trade off
        against each other (a ridge such as a fixed block size in threads),
        where a one-parameter sweep is stuck."""
        out = []
        dims = [d for d in self.enc.varying
                if every_kind or self.enc.kinds[d] == ORDINAL]
        for i, a in enumerate(dims):
            for b in dims[i + 1:]:
                for x in range(len(self.enc.values[a])):
                    if x == genome[a]:
                        continue
                    for y in range(len(self.enc.values[b])):
                        if y == genome[b]:
                            continue
                        g = list(genome)
                        g[a], g[b] = x, y
                        g = tuple(g)
                        if g in self.valid:
                            out.append(g)
        return out

    def _joint_moves(self, genome, weights, planes=3):
        """Valid configs two parameters (any types) away, in the order to
        try them: every move in the planes of the `planes` pairs of
        parameters the model finds most interacting (a basin whose bottom
        is one joint move from a faster one is made by such a pair: each
        size alone worse, both together better), in model order, then the
        rest in model order. The model alone ranks joint moves poorly: it
        is fitted mostly on the basin being refined."""
        moves = self._pair_moves(genome, every_kind=True)
        if weights is None:
            return moves
        strength = {}
        offset = self.enc.main_width
        for a, b in self.enc.pairs:
            na, nb = len(self.enc.values[a]), len(self.enc.values[b])
            cells = weights[offset:offset + na * nb].reshape(na, nb)
            offset += na * nb
            # The spread of the pair's cells: how far from additive the
            # model finds the two (a mean would favour pairs of few cells).
            strength[(a, b)] = float(cells.max() - cells.min())
        strongest = sorted(strength, key=lambda p: -strength[p])[:planes]
        first = self._rank(weights, [
            g for g in moves if any(all(
                g[d] == genome[d] for d in self.enc.varying
                if d not in pair) for pair in strongest)])
        chosen = set(first)
        return first + self._rank(weights, [g for g in moves
                                             if g not in chosen])

    def _leaders(self, ranked, binary_only=False):
        """The best config of each basin, fastest first: the best of every
        combination of the two-valued parameters, and (for any parameter
        type) each config that is far from every faster leader."""
        leaders = []
        seen_binary = set()
        far = []
        for g in ranked:
            key = tuple(g[d] for d in self.binary_dims)
            take = False
            if key not in seen_binary:
                seen_binary.add(key)
                take = True
            if not binary_only and len(far) < self.max_leaders and all(
                    self.enc.distance(g, f) >= self.niche_radius
                    for f in far):
                far.append(g)
                take = True
            if take:
                leaders.append(g)
        return leaders

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
        penalty = np.full(x.shape[1], INTERACTION_PENALTY)
        penalty[:self.enc.main_width] = MAIN_PENALTY
        # The intercept is the targets' mean and is not shrunk; the other
        # weights fit the deviations from it.
        mean = y.mean()
        x, y, penalty = x[:, 1:], y - mean, penalty[1:]
        try:
            if x.shape[1] > len(y):
                # More features than measurements: the same ridge solution
                # from the (measurements x measurements) system.
                scaled = x / penalty
                a = np.linalg.solve(scaled @ x.T + np.eye(len(y)), y)
                w = scaled.T @ a
            else:
                w = np.linalg.solve(x.T @ x + np.diag(penalty), x.T @ y)
        except np.linalg.LinAlgError:
            return None
        return np.concatenate([[mean], w])

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
        clock_start = self.clock()
        measured = {}
        order = []
        budget = min(self.budget, len(self.valid))

        def out_of_time():
            return (self.time_budget_s is not None
                    and self.clock() - clock_start >= self.time_budget_s)

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

        def by_time(genomes):
            return sorted((g for g in genomes if measured[g].ok),
                          key=lambda g: (measured[g].time, g))

        seeds = list(self.seeds)
        seed_set = set(seeds)
        # The same random order with or without seeds: a seeded search
        # explores as the unseeded one would.
        pool = list(self.valid_list)
        self.rng.shuffle(pool)
        pool = [g for g in pool if g not in seed_set]
        going = evaluate(seeds + pool[:self.population])
        # Seeds (another device's or shape's favourites, the incumbent) take
        # no part in selection, in the model or in the generations: the
        # search runs as it would unseeded, so a seed that beats random
        # configs but sits in a poor basin here cannot pull it there
        # (letting seeds join once the search had found a config about as
        # fast did: the search then settled in the seed's basin). A seed
        # wins only by being measured faster than anything the search
        # found itself; then it is refined beside the search's own best
        # (_refine_targets, _refine), and the faster end wins.
        refining = False
        refine_started = None
        pair_tried = {}
        stall = 0
        chunk = max(1, self.batch // 2)
        while going:
            visible = {g: m for g, m in measured.items()
                       if g not in seed_set}
            ranked = by_time(visible)
            if not ranked:
                going = evaluate([g for g in pool if g not in measured]
                                 [:self.batch])
                continue
            weights = self._fit(visible)
            targets = self._refine_targets(ranked, by_time(measured))
            # Each target's one-parameter sweep, for the reserve and for
            # refining.
            sweeps = [self._neighbours(t, full=True) for t in targets]
            # A generation may measure only what the reserve leaves: one
            # generation (the model's picks plus every leader's neighbours)
            # can be half of a small budget, and would otherwise run into
            # the reserve and leave no sweep.
            room = budget - len(order) - self._reserve(sweeps, measured,
                                                       budget)
            if not refining and room <= 0:
                refining = True
                refine_started = len(order)
            if refining:
                chosen = self._refine(targets, sweeps, ranked, measured,
                                      weights, chunk, pair_tried)
                if not chosen:  # every basin swept: search on
                    chosen = self._generation(ranked, measured, weights,
                                              stall)
                going = evaluate(chosen)
                continue
            best_before = measured[ranked[0]].time
            going = evaluate(self._generation(ranked, measured, weights,
                                              stall)[:room])
            best_now = min(measured[g].time for g in measured
                           if measured[g].ok and g not in seed_set)
            stall = 0 if best_now < best_before else stall + 1
        stopped_by = "budget" if len(order) >= budget else "time"
        return SearchResult(order, time.perf_counter() - start, stopped_by,
                            refine_started)

    def _refine_targets(self, ranked, everything):
        """What refinement descends from: the best config the search found
        itself (ranked holds no seed), and the best seed if it is faster
        still (it won by being measured faster)."""
        own = ranked[0]
        return [own] if everything[0] == own else [own, everything[0]]

    def _reserve(self, sweeps, measured, budget):
        """Evaluations held back for refining: the unmeasured part of each
        target's sweep, a share of a sweep more for better configs the sweep
        finds; but never more than refine_share of the budget, so the
        evolutionary phase keeps its part of any budget (a neighbourhood
        of 45 configs would otherwise take nearly all of a budget of 100,
        leaving coordinate descent from an early best). Nothing is held
        back for joint moves: they get what the one-parameter sweeps leave
        (an earlier start costs the evolutionary phase more than the joint
        moves gain where no trap needs them)."""
        reserve = max(sum(g not in measured for g in sweep) + math.ceil(
            self.refine_margin * len(sweep)) for sweep in sweeps)
        return min(reserve, math.ceil(self.refine_share * budget))

    def _refine(self, targets, sweeps, ranked, measured, weights, chunk,
                pair_tried):
        """Configs to measure while refining: the targets' untried
        one-parameter neighbours (model order, a few at a time, so that a
        better one found is swept in turn; the search's own best takes two
        of three places while a faster seed is swept too); once every
        target is a local optimum, the model's best joint moves of two
        parameters from the targets side by side with the untried
        neighbours of the other basins' leaders. Joint moves alone would
        take what is left from the leaders: a poor local optimum is more
        often left by another basin's better leader than by one joint
        move, a trap only by the move. sweeps: each target's one-parameter
        neighbours."""
        untried = [self._rank(weights, [g for g in sweep if g not in measured])
                   for sweep in sweeps]
        own, seed = untried[0], untried[1] if len(untried) > 1 else []
        if len(sweeps) > 1 and len(sweeps[1]) - len(seed) >= self.seed_tries:
            # A faster seed gets a few tries (model order): a better
            # neighbour becomes the search's own best and is refined in
            # full; a seed at the bottom of a poor basin costs no more.
            seed = []
        if own or seed:
            # The search's own best takes all but one place of each step
            # while a faster seed is tried too: each is descended from,
            # and the faster end wins.
            chosen = own[:chunk - 1 if seed else chunk]
            return chosen + [g for g in seed if g not in chosen][
                :chunk - len(chosen)]
        joint = []
        for target in targets:
            left = self.refine_pair_moves - pair_tried.get(target, 0)
            if left > 0:
                joint = [g for g in self._joint_moves(target, weights)
                         if g not in measured][:left]
                if joint:
                    break
                pair_tried[target] = self.refine_pair_moves
        near = []
        for leader in self._leaders(ranked)[1:]:
            near = [g for g in self._neighbours(leader) if g not in measured]
            if near:
                near = self._rank(weights, near)
                break
        share = math.ceil(chunk * self.refine_joint_share)
        n_joint = min(len(joint), max(chunk - len(near), share))
        chosen = joint[:n_joint]
        chosen += [g for g in near if g not in chosen][:chunk - len(chosen)]
        if chosen and joint:
            pair_tried[target] = pair_tried.get(target, 0) + n_joint
        return chosen

    def _generation(self, ranked, measured, weights, stall):
        elite = ranked[:max(2, self.population // 2)]
        # Niche elitism: the leader of every basin stays a parent, so the
        # population does not collapse into one basin while another holds
        # the optimum.
        leaders = self._leaders(ranked)
        parents = leaders if self.far_leaders_as_parents else \
            self._leaders(ranked, binary_only=True)
        elite += [g for g in parents if g not in elite]
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
        fresh = sorted(g for g in offspring
                       if g in self.valid and g not in measured)
        if not fresh:
            fresh = [g for g in self.valid_list if g not in measured]
            self.rng.shuffle(fresh)
        ranked_pool = self._rank(weights, fresh)
        n_explore = max(1, int(self.batch * self.explore))
        chosen = ranked_pool[:self.batch - n_explore]
        rest = ranked_pool[self.batch - n_explore:]
        chosen += self.rng.sample(rest, min(n_explore, len(rest)))
        # Untried neighbours of the best, and of the leader of each basin
        # within reach of it: local refinement in every basin.
        best_time = measured[ranked[0]].time
        for leader in [ranked[0]] + [
                g for g in leaders if g != ranked[0]
                and measured[g].time < self.niche_reach * best_time]:
            near = [g for g in self._neighbours(leader)
                    if g not in measured and g not in chosen]
            chosen += self._rank(weights, near)[:self.local_per_niche]
        if stall >= 2 and self.pair_moves:
            # Stalled: the model's best moves along ridges of the best.
            moves = [g for g in self._pair_moves(ranked[0])
                     if g not in measured and g not in chosen]
            chosen += self._rank(weights, moves)[:self.pair_moves]
        return chosen

