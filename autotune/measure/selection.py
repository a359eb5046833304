"""Choosing the winner among measured candidates, and saying why.

The tuner (measure/tuner.py) measures; this module decides. An incumbent
(the cached config of the fusion) is kept unless the first pass's fastest
beats it head to head by the incumbent margin (records.SelectionRule and
duel), so regenerated caches do not change. A fresh selection is a contest
(ContestRule): a short screen of every candidate, then rounds of
successive halving that spend the timing budget on the candidates the
timings cannot yet separate; the measured fastest wins, and the smaller
config only among configs the timings cannot tell apart.

Why a config won is a Reason. select_winner returns the one for its
decision; explain derives it from stored candidates (an entry of an
existing cache), and select_winner's own reason is explain over the
candidates it returns, so what a tune says at its end and what
`autotune_cache show --candidates`, the reports and the page say about
the stored entry later are the same words.
"""
import math
import statistics
import time
from typing import NamedTuple, Optional

from autotune.errors import DeviceContextLostError
from autotune.log import printable
from autotune.records import DEFAULT_RULE, Candidate


# Why a winner won (Reason.kind).
ONLY = "only"                      # the one candidate that ran correctly
FASTEST = "fastest"                # measured fastest
TIE = "tie"                        # tied with a faster one; smaller kept
INCUMBENT_KEPT = "incumbent_kept"  # the cached config held its place
INCUMBENT_BEATEN = "incumbent_beaten"  # shown faster than the cached one
NOT_MEASURED = "not_measured"      # nearest-shape copy or pruned to one
REASONS = (ONLY, FASTEST, TIE, INCUMBENT_KEPT, INCUMBENT_BEATEN,
           NOT_MEASURED)

# What a run knows of the fusion's incumbent (explain's `incumbent`):
# nothing (an entry read from a file), that there was none, or that it was
# kept or replaced.
UNKNOWN, NONE, KEPT, REPLACED = "unknown", "none", "kept", "replaced"


class Reason(NamedTuple):
    """Why the winner won. rival: the config the reason is about (the
    runner-up, the faster config kept out, or the beaten incumbent); gap:
    the rival's time relative to the winner's (-0.022: measured 2.2 %
    faster); margin: the fraction the deciding rule applied."""
    kind: str
    rival: object = None
    gap: Optional[float] = None
    margin: Optional[float] = None
    detail: str = ""
    rival_larger: bool = False
    tie_sigmas: Optional[float] = None
    # An entry read from a file: whether its run had an incumbent is not
    # known, so a slower winner kept ahead of a faster rival is told as
    # what either rule allows.
    known: bool = True
    # After a beaten incumbent: the contest's reason among the rest, when
    # it chose another config than the one that beat the incumbent.
    then: object = None
    # The winner's own timing spread (provenance.timing_spread: its
    # timings' interquartile range over their median), where known: a gap
    # it covers is no clear margin.
    spread: Optional[float] = None

    def text(self):
        """One line; config values are escaped (log.printable): it is
        printed, and a cache file may come from anyone."""
        rival = printable(self.rival.short()) if self.rival is not None \
            else None
        if self.kind in (ONLY, NOT_MEASURED):
            return self.detail
        if self.kind == FASTEST:
            if rival is None:
                return "fastest"
            if self.gap > self.margin and self.spread and \
                    self.gap <= self.spread:
                return (f"fastest; runner-up {rival} measured "
                        f"{self.gap:.1%} slower, within the winner's own "
                        f"timing spread ({self.spread:.1%}): not a clear "
                        "margin")
            if self.gap > self.margin:
                return (f"fastest by a clear margin: runner-up {rival} "
                        f"measured {self.gap:.1%} slower")
            if self.gap < 0:
                return (f"fastest by the contest's weighted timings: "
                        f"{rival}'s median is {-self.gap:.1%} lower")
            return (f"fastest; runner-up {rival} measured {self.gap:.1%} "
                    "slower, within the contest's "
                    f"{self.margin:.0%} equivalence, and "
                    + ("a larger config" if self.rival_larger else
                       "shown slower beyond the timings' noise"))
        if self.kind == TIE and not self.known:
            return (f"kept ahead of {rival}, which measured "
                    f"{-self.gap:.1%} faster but was not shown faster "
                    "beyond the timings' noise (a tie the contest breaks "
                    f"to the smaller config, within {self.margin:.0%} or "
                    f"{self.tie_sigmas} standard errors, or an incumbent "
                    f"within its {DEFAULT_RULE.incumbent_improvement:.0%} "
                    "head-to-head margin)")
        if self.kind == TIE:
            return (f"tie-break to the smaller config: {rival} measured "
                    f"{-self.gap:.1%} faster, which the timings could not "
                    f"tell apart (the contest ties configs within "
                    f"{self.margin:.0%}, or within "
                    f"{self.tie_sigmas} standard errors)")
        if self.kind == INCUMBENT_KEPT:
            if rival is None or self.gap >= 0:
                return "incumbent kept: still the fastest"
            return (f"incumbent kept within the margin: {rival} measured "
                    f"{-self.gap:.1%} faster but was not shown "
                    f"{self.margin:.0%} faster head to head")
        if self.kind == INCUMBENT_BEATEN:
            what = f"the incumbent {rival}" if rival is not None else \
                "the incumbent"
            how = (f"replaced {what}: {self.detail}" if self.detail else
                   f"replaced {what}: shown more than {self.margin:.0%} "
                   "slower head to head")
            return how + (f"; then {self.then.text()}" if self.then
                          else "")
        raise ValueError(f"unknown reason kind {self.kind!r}")



def explain(candidates, winner, incumbent=UNKNOWN, incumbent_config=None,
            tuner="", rule=DEFAULT_RULE, contest_rule=None, spread=None):
    """The Reason `winner` (a Config) won among `candidates` (Candidates
    with the times the selection saw). incumbent: UNKNOWN (an entry read
    from a file), NONE (none, or one that did not run correctly: the
    contest decided), KEPT or REPLACED (beaten head to head);
    incumbent_config: the replaced one, where known; tuner: the entry's provenance.tuner (nearest-shape
    and pruned entries were not measured); spread: the winner's own timing
    spread (provenance.timing_spread), which a clear margin must beat."""
    contest_rule = contest_rule or DEFAULT_CONTEST
    ok = [c for c in candidates if c.ok]
    if not ok:
        return Reason(NOT_MEASURED, detail={
            "nearest": "copied from the nearest tuned shape",
            "pruned": "the only config left after pruning"}.get(
                tuner, "no candidates stored"))
    if len(ok) == 1:
        return Reason(ONLY, detail="the only config that ran correctly")
    chosen = next((c for c in ok if c.config == winner), None)
    if chosen is None:
        return Reason(NOT_MEASURED, detail="the winner is not among the "
                      "stored candidates")
    others = sorted((c for c in ok if c.config != winner),
                    key=lambda c: (c.run_time_us, c.config.sort_key))
    rival = others[0]
    gap = rival.run_time_us / chosen.run_time_us - 1.0 \
        if chosen.run_time_us else 0.0
    if incumbent == KEPT:
        return Reason(INCUMBENT_KEPT, rival.config, gap,
                      rule.incumbent_improvement)
    if incumbent == REPLACED:
        return Reason(INCUMBENT_BEATEN, incumbent_config, None,
                      rule.incumbent_improvement, rival_larger=False)
    equivalent = contest_rule.equivalent
    if gap >= 0:
        reason = Reason(FASTEST, rival.config, gap, equivalent)
    elif winner.sort_key < rival.config.sort_key:
        reason = Reason(TIE, rival.config, gap, equivalent,
                        tie_sigmas=contest_rule.tie_sigmas,
                        known=incumbent != UNKNOWN)
    elif incumbent == UNKNOWN:
        # A larger config that measured slower wins only as the incumbent
        # when the stored times are the ones the selection saw.
        return Reason(INCUMBENT_KEPT, rival.config, gap,
                      rule.incumbent_improvement)
    else:
        # The contest ranks by weighted means of every timing, which can
        # order two configs within noise unlike their pooled medians.
        reason = Reason(FASTEST, rival.config, gap, equivalent)
    return reason._replace(
        rival_larger=rival.config.sort_key > winner.sort_key,
        spread=spread or None)


class TuneResult:
    """What tuning one fusion found: every Candidate, the best, its timing
    spread, seconds spent, the tuner's name, the duels run, and why the
    best won (a Reason; None where no selection ran, e.g. pruned to one:
    reason_of derives it)."""

    def __init__(self, candidates, best, spread, seconds, tuner,
                 reason=None):
        self.candidates = candidates
        self.best = best
        self.spread = spread
        self.seconds = seconds
        self.tuner = tuner
        self.duels = []
        self.reason = reason


def reason_of(result):
    """Why a TuneResult's best won: the selection's reason, or where no
    selection ran (a search's own pick, a stand-in result) explain over
    its candidates."""
    reason = getattr(result, "reason", None)
    if reason is not None:
        return reason
    return explain(result.candidates, result.best.config, NONE,
                   tuner=getattr(result, "tuner", ""))


# 97.5% quantiles of Student's t (two-sided 95% intervals), by degrees of
# freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
         2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101,
         2.093, 2.086)


def _t975(df):
    return _T975[df - 1] if df <= len(_T975) else 1.960


def relative_noise(timing):
    """Spread of one timing's repetitions relative to their median: the
    interquartile range when there are enough repetitions (a GPU timing's
    rare outliers should not count), else the full range."""
    if timing is None or not timing.median_us:
        return 0.0
    samples = timing.samples
    if len(samples) >= 8:
        q1, _, q3 = statistics.quantiles(samples, n=4)
        return (q3 - q1) / timing.median_us
    return (samples[-1] - samples[0]) / timing.median_us


class Duel(NamedTuple):
    holder: object      # Config kept unless beaten
    challenger: object  # Config
    challenger_won: bool
    rounds: int
    mean_ratio: float   # geometric mean of challenger time / holder time


def duel(retime, holder, challenger, rule=DEFAULT_RULE,
         min_improvement=None):
    """Head-to-head timings of two configs; returns (Duel, {config:
    [median_us, ...]}). retime(config) -> Timing. The challenger must be
    min_improvement (default: the rule's) faster."""
    if min_improvement is None:
        min_improvement = rule.min_improvement
    threshold = math.log(1.0 - min_improvement)
    log_ratios = []
    times = {holder: [], challenger: []}
    won = False
    for round_index in range(rule.max_rounds):
        order = (holder, challenger) if round_index % 2 == 0 else \
            (challenger, holder)
        for config in order:
            try:
                times[config].append(retime(config).median_us)
            except DeviceContextLostError:
                # Nothing can run on this device any more: no winner.
                raise
            except Exception:  # ran correctly before; failing now, it loses
                return Duel(holder, challenger, config == holder,
                            len(log_ratios), math.nan), times
        h, c = times[holder][-1], times[challenger][-1]
        log_ratios.append(math.log(max(c, 1e-9) / max(h, 1e-9)))
        n = len(log_ratios)
        if n < rule.min_rounds:
            continue
        mean = statistics.fmean(log_ratios)
        half_width = _t975(n - 1) * statistics.stdev(log_ratios) / math.sqrt(n)
        if mean + half_width < threshold:
            won = True
            break
        if mean - half_width > threshold or mean >= 0.0:
            # Shown not to be min_improvement faster, or not faster at all
            # on average: more rounds would hardly prove a gain.
            break
    mean = statistics.fmean(log_ratios)
    return Duel(holder, challenger, won, len(log_ratios),
                math.exp(mean)), times


class ContestRule(NamedTuple):
    """How a fresh selection (no incumbent kept) spends its timing budget.

    Where the backend can be asked for short calls (the gpu backend's own
    do_bench timing), the first pass is a screen: one call per candidate
    asking for screen_share of a full call's warm-up and repetition time.
    The budget of the whole miss is max(budget_floor, budget_per_config x
    candidates) full calls, at most budget_cap_per_config x candidates (one
    full call per candidate is what Triton's autotuner spends); where calls
    cannot be shortened, the first pass is full calls and the rounds get
    budget_floor full calls more.

    Rounds (successive halving): each round times every contender once,
    the order alternating between rounds, with calls sized so that what is
    left of the budget is split evenly over the halvings still to come
    (at least min_share, at most max_share of a full call); after each
    round the slower half by mean makes way (halving), and any contender
    slower than the best by more than drop_sigmas standard errors of the
    difference is dropped. Each timing counts by the share of a full call
    it asked for (a short call's median is noisier); the noise of one full
    call is measured from the repeated timings of the contenders, pooled,
    with the calls' own spread as a prior of prior_weight degrees of
    freedom (default_noise where no call measured a spread), and the sigma
    multiples widen by Student's t for few degrees of freedom. Rounds stop
    as soon as one contender is left, or every contender is shown (upper
    end of the 95 % interval) to be within `equivalent` of the best, or
    the budget is spent.

    The winner is the smallest config among the contenders shown to be
    within `equivalent` of the fastest or within tie_sigmas standard errors
    of it: the tie-break to the smaller config applies only where the
    timings cannot tell configs apart; otherwise the measured fastest
    wins. bench/bench_tuning_cost.py measures the cost, the share of tunes
    that pick the fastest and the agreement of fresh tunes against
    Triton's autotuner; the values here are the ones it was run with.
    """
    screen_share: float = 0.1
    min_share: float = 0.05
    max_share: float = 4.0
    halving: bool = True
    budget_per_config: float = 0.48
    budget_floor: float = 7.6
    budget_cap_per_config: float = 0.95
    drop_sigmas: float = 2.5
    tie_sigmas: float = 0.25
    equivalent: float = 0.02
    prior_weight: float = 8.0
    default_noise: float = 0.05


DEFAULT_CONTEST = ContestRule()


# 97.5 % normal quantile: the t quantiles above are scaled by it to widen
# the sigma multiples when the noise is estimated from few timings.
_Z975 = 1.959964


class _Contest:
    """Timings of the contenders of one fresh selection, in log time, each
    weighed by the share of a full call it asked for."""

    def __init__(self, first, spreads, contest):
        self.rule = contest
        self.logs = {c: [(math.log(max(t, 1e-9)), w)] for c, (t, w)
                     in first.items()}
        known = [s for s in spreads if s > 0.0]
        # The calls' own spread: interquartile range / median, about 1.35
        # standard deviations of a repetition, at least the noise of a
        # call's median.
        self.prior = (statistics.median(known) / 1.35 if known
                      else contest.default_noise)

    def add(self, config, timing):
        self.logs[config].append((math.log(max(timing.median_us, 1e-9)),
                                  getattr(timing, "share", 1.0)))

    def mean(self, config):
        pairs = self.logs[config]
        weight = sum(w for _, w in pairs)
        return sum(x * w for x, w in pairs) / weight, weight

    def noise(self, configs):
        """(standard deviation of one full call's log time, the t-quantile
        scale for its degrees of freedom)."""
        squares = 0.0
        df = 0
        for config in configs:
            pairs = self.logs[config]
            if len(pairs) < 2:
                continue
            mean, _ = self.mean(config)
            squares += sum(w * (x - mean) ** 2 for x, w in pairs)
            df += len(pairs) - 1
        prior_df = self.rule.prior_weight
        sigma = math.sqrt((squares + prior_df * self.prior ** 2)
                          / (df + prior_df))
        return sigma, _t975(max(1, int(df + prior_df))) / _Z975

    def standing(self, configs):
        """(fastest config, {config: (mean - fastest's mean, standard error
        of that difference)}, sigma scale)."""
        sigma, scale = self.noise(configs)
        means = {c: self.mean(c) for c in configs}
        best = min(configs, key=lambda c: (means[c][0], c.sort_key))
        m0, w0 = means[best]
        gaps = {c: (m - m0, sigma * math.sqrt(1.0 / w + 1.0 / w0))
                for c, (m, w) in means.items()}
        return best, gaps, scale

    def equivalent(self, gap, scale):
        """Whether a config is shown to be within rule.equivalent of the
        fastest: the upper end of the 95 % interval of the difference."""
        difference, error = gap
        return difference + _Z975 * scale * error <= \
            math.log1p(self.rule.equivalent)

    def winner(self, configs):
        best, gaps, scale = self.standing(configs)
        tied = [c for c in configs if self.equivalent(gaps[c], scale)
                or gaps[c][0] <= self.rule.tie_sigmas * scale * gaps[c][1]]
        return min(tied, key=lambda c: c.sort_key)


def contest(first, spreads, retime, retime_share=None,
            contest_rule=DEFAULT_CONTEST, budget=None):
    """A fresh selection among measured candidates (see ContestRule).

    first: {config: (first-pass median_us, share of a full call)};
    spreads: the first-pass calls' relative noise; retime(config) -> a full
    Timing; retime_share(config, share) -> Timing, where calls can be
    shorter or longer; budget: full calls for the rounds. Returns (winner,
    {config: [Timing of the rounds]})."""
    rule = contest_rule
    configs = list(first)
    if budget is None:
        budget = rule_budget(rule, first, retime_share is not None)
    board = _Contest(first, spreads, rule)
    alive = sorted(configs, key=lambda c: c.sort_key)
    extra = {c: [] for c in configs}
    spent = 0.0
    rounds = 0
    while len(alive) > 1:
        best, gaps, scale = board.standing(alive)
        alive = [c for c in alive if c == best or gaps[c][0]
                 <= rule.drop_sigmas * scale * gaps[c][1]]
        if len(alive) == 1 or all(board.equivalent(gaps[c], scale)
                                  for c in alive):
            break
        if rule.halving and rounds > 0 and len(alive) > 2:
            # Successive halving: the slower half by mean makes way.
            ranked = sorted(alive, key=lambda c: (gaps[c][0], c.sort_key))
            alive = sorted(ranked[:(len(ranked) + 1) // 2],
                           key=lambda c: c.sort_key)
        left = budget - spent
        # What is left is split evenly over the halvings still to come.
        this_round = left / max(1, math.ceil(math.log2(len(alive))))
        if retime_share is None:
            share, calls = 1.0, int(this_round // len(alive))
            if calls < 1:
                if left < 2.0:
                    break
                ranked = sorted(alive, key=lambda c: (gaps[c][0],
                                                      c.sort_key))
                alive = sorted(ranked[:max(2, int(left))],
                               key=lambda c: c.sort_key)
                calls = 1
        else:
            share = min(rule.max_share, this_round / len(alive))
            if share < rule.min_share:
                fits = int(this_round / rule.min_share)
                if fits < 2:
                    break
                ranked = sorted(alive, key=lambda c: (gaps[c][0],
                                                      c.sort_key))
                alive = sorted(ranked[:fits], key=lambda c: c.sort_key)
                share = rule.min_share
            calls = 1
        order = alive if rounds % 2 == 0 else alive[::-1]
        rounds += 1
        for config in list(order):
            for _ in range(calls):
                try:
                    timing = (retime(config) if retime_share is None
                              or share == 1.0
                              else retime_share(config, share))
                except DeviceContextLostError:
                    raise
                except Exception:  # ran correctly before; failing, it loses
                    alive.remove(config)
                    break
                spent += share
                board.add(config, timing)
                extra[config].append(timing)
        if len(alive) <= 2 and rounds > 1 and budget - spent < \
                rule.min_share * 2:
            break
    if not alive:
        return None, extra
    return board.winner(alive), extra


def rule_budget(rule, first, screened):
    """Full calls the rounds may take (see ContestRule)."""
    if not screened:
        return rule.budget_floor
    total = min(max(rule.budget_floor, rule.budget_per_config * len(first)),
                rule.budget_cap_per_config * len(first))
    return max(0.0, total - sum(w for _, w in first.values()))


class Selection(NamedTuple):
    best: Candidate
    candidates: list
    duels: list
    reason: Optional[Reason] = None


def _same_run(config, ignored):
    """What a config's run depends on, without the fields a backend ignores
    (see Backend.ignored_config_fields)."""
    if not ignored or getattr(config, "pre_hook", None) is not None:
        return config
    fields = ("num_warps", "num_stages", "num_ctas", "maxnreg",
              "ir_override")
    return (config.sort_key[0],
            tuple(None if f in ignored else getattr(config, f, None)
                  for f in fields))


def backend_of(evaluator):
    """The backend an evaluator (or a pool's replay of one) times on."""
    backend = getattr(evaluator, "backend", None)
    if backend is None:
        backend = getattr(getattr(evaluator, "evaluator", None), "backend",
                          None)
    return backend


def select_winner(candidates, timings, retime, incumbent=None,
                  rule=DEFAULT_RULE, retime_share=None,
                  contest_rule=DEFAULT_CONTEST, ignored=()):
    """Chooses the winner among measured candidates.

    candidates: Candidates of the first pass; timings: {config: Timing}
    where known (noise estimates, and the share of a full call each asked
    for); retime(config) -> Timing, a full call; retime_share(config,
    share) -> Timing, where calls can be shorter; incumbent: the cached
    config of this fusion, or None.

    An incumbent that ran correctly is kept unless the first pass's
    fastest beats it head to head by the rule's incumbent_improvement (see
    SelectionRule and duel): that keeps regenerated caches unchanged.
    Otherwise a contest among the rest decides (see ContestRule).
    Candidates timed again carry the median of all their timings. ignored:
    config fields the backend's runs do not depend on; configs that differ
    only in them enter the contest as one, the smallest of them, with all
    their first-pass timings."""
    ok = [c for c in candidates if c.ok]
    if not ok:
        return Selection(None, list(candidates), [])
    by_config = {c.config: c for c in ok}
    state = NONE
    fastest = min(ok, key=lambda c: (c.run_time_us, c.config.sort_key))

    def noise(config):
        return relative_noise(timings.get(config))

    samples = {}
    duels = []
    winner = None
    pool = [c for c in ok]
    # A fastest config that runs the same program as the incumbent (they
    # differ only in fields this backend ignores, e.g. num_warps on the
    # interpreter) cannot be faster: a duel between them could only be
    # won on noise, and would flip a cached winner for nothing.
    twin = incumbent is not None and incumbent in by_config and \
        _same_run(incumbent, ignored) == _same_run(fastest.config, ignored)
    if incumbent is not None and incumbent in by_config and not twin:
        result, times = duel(retime, incumbent, fastest.config, rule,
                             rule.incumbent_improvement)
        duels.append(result)
        for config, values in times.items():
            samples.setdefault(config, []).extend(values)
        if not result.challenger_won:
            winner, state = incumbent, KEPT
        else:
            pool = [c for c in ok if c.config != incumbent]
            state = REPLACED
    elif twin:
        winner, state = incumbent, KEPT
    if winner is None:
        groups = {}
        for cand in sorted(pool, key=lambda c: c.config.sort_key):
            timing = timings.get(cand.config)
            share = getattr(timing, "share", 1.0) if timing is not None \
                else 1.0
            groups.setdefault(_same_run(cand.config, ignored), []).append(
                (cand.config, math.log(max(cand.run_time_us, 1e-9)), share))
        first = {}
        for members in groups.values():
            weight = sum(w for _, _, w in members)
            first[members[0][0]] = (
                math.exp(sum(x * w for _, x, w in members) / weight), weight)
        spreads = [noise(c.config) for c in pool]
        winner, extra = contest(first, spreads, retime, retime_share,
                                contest_rule)
        for config, values in extra.items():
            if values:
                samples.setdefault(config, []).extend(
                    t.median_us for t in values)
        if winner is None:
            winner = fastest.config
    out = []
    for cand in candidates:
        if cand.config in samples:
            pooled = [cand.run_time_us] + samples[cand.config]
            cand = cand._replace(run_time_us=round(statistics.median(pooled),
                                                   3))
        out.append(cand)
    best = next(c for c in out if c.config == winner and c.ok)
    reason = explain(out, winner, state, incumbent, rule=rule,
                     contest_rule=contest_rule)
    if state == REPLACED:
        [held] = duels
        # The duel's own outcome: an incumbent that failed when timed again
        # lost without being shown slower; and the contest among the rest
        # may have chosen another config than the one that beat it.
        rest = [c for c in out if c.config != incumbent]
        reason = reason._replace(
            detail="it failed when timed again"
            if math.isnan(held.mean_ratio) else "",
            then=explain(rest, winner, NONE, rule=rule,
                         contest_rule=contest_rule)
            if winner != held.challenger else None)
    return Selection(best, out, duels, reason)


def reselect(evaluator, result, incumbent=None, rule=DEFAULT_RULE):
    """Applies select_winner to a TuneResult produced by a search, which
    records one time per candidate and no per-candidate noise."""
    if not any(c.ok for c in result.candidates):
        return result
    start = time.perf_counter()
    selection = select_winner(
        result.candidates, {}, evaluator.retime, incumbent, rule,
        ignored=getattr(backend_of(evaluator), "ignored_config_fields",
                        ()))
    evaluator.finish()
    spread = result.spread if selection.best.config == \
        result.best.config else 0.0
    reason = selection.reason
    if isinstance(reason, Reason):
        reason = reason._replace(spread=spread or None)
    out = TuneResult(selection.candidates, selection.best, spread,
                     result.seconds + time.perf_counter() - start,
                     result.tuner, reason)
    out.duels = selection.duels
    return out

