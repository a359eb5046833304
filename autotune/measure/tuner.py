"""The tuner: runs candidates of one fusion and picks the winner.

For each candidate: restore the bytes a previous run changed, launch,
compare what the kernel wrote with the reference, time on the backend. Failures are
classified (compile error, out of resources, wrong result, timeout, runtime
error) and can never win.

The winner: an incumbent (the cached config of the fusion) is kept unless
the fastest beats it head to head by the incumbent margin (see
SelectionRule and duel), so regenerated caches do not change. A fresh
selection is a contest (see ContestRule): a short screen of every
candidate, then rounds of successive halving that spend the timing budget
on the candidates the timings cannot yet separate, stopping as soon as
the decision is settled; the measured fastest wins, and the smaller
config only among configs the timings cannot tell apart.
"""
import datetime
import math
import statistics
import time
from typing import NamedTuple

from autotune.measure import backends, triton_cache
from autotune.errors import DeviceContextLostError, TritonCacheError, TuningError
from autotune.records import DEFAULT_RULE, Candidate, Provenance, SelectionRule  # noqa: F401  (SelectionRule: re-exported)




def no_config_ran(candidates):
    """The error for a fusion none of whose candidates ran correctly: the
    failure kinds and the first one's detail (often the whole story, as a
    misspelt config key: "missing 1 required positional argument")."""
    kinds = ", ".join(sorted({c.failure for c in candidates}))
    first = candidates[0].failure_detail if candidates else ""
    return TuningError(f"no config ran correctly ({len(candidates)} tried; "
                       f"failures: {kinds}); first: {first}")




# Set once a candidate has corrupted the context: every later tuning in the
# process stops with the same message.
_context_lost = None


def _stop_for_unwritable_cache(exc):
    """A compile that failed writing Triton's cache fails every config the
    same way: one environment error naming TRITON_CACHE_DIR, not a
    COMPILE_ERROR per candidate."""
    if triton_cache.is_unwritable_cache_error(exc):
        raise TritonCacheError(triton_cache.unwritable_message(
            triton_cache.cache_dir(), exc)) from exc


def _stop_for_lost_context(name, config, exc):
    global _context_lost
    detail = _detail(exc)
    _context_lost = DeviceContextLostError(
        f"autotune: {name or 'kernel'} with config {config} corrupted the "
        f"CUDA context ({detail}); nothing can run on this device in this "
        "process any more, so tuning stops. Fix the kernel for this config "
        "or remove the config.")
    raise _context_lost from exc


def default_tolerance(dtype):
    """(rtol, atol) for outputs of `dtype` computed elementwise or by short
    reductions; kernels with long dot products derive theirs with
    dot_tolerance()."""
    name = str(dtype)
    if "float16" in name or "bfloat16" in name:
        return 2e-2, 2e-2
    if "float8" in name:
        return 1e-1, 1e-1
    return 1e-3, 1e-4


# Unit roundoff of fp32, and of tf32 (10 explicit mantissa bits): fp32
# tl.dot rounds its inputs to tf32 on sm_80+ unless the kernel asks for
# input_precision="ieee" (or "tf32x3", which recovers fp32 accuracy).
FP32_UNIT_ROUNDOFF = 2.0 ** -24
TF32_UNIT_ROUNDOFF = 2.0 ** -11


def dot_tolerance(dtype, k, input_precision="ieee", scale=1.0):
    """(rtol, atol) for outputs that are dot products of length `k` of
    `dtype` inputs, accumulated in fp32, compared with an fp32 reference.

    `scale` is the product of the inputs' root-mean-square magnitudes.
    Rounding the inputs (tf32) errs by about u_in * sqrt(k) * scale on
    random-sign data, and a different accumulation order (another BLOCK_K)
    by about u_fp32 * k * scale; 16 times their sum leaves room for the
    largest of many outputs while a wrong result (a missed tile, a wrong
    epilogue) stays far outside."""
    rtol, atol = default_tolerance(dtype)
    tf32_inputs = ("float32" in str(dtype) and "bfloat" not in str(dtype)
                   and input_precision == "tf32")
    input_roundoff = TF32_UNIT_ROUNDOFF if tf32_inputs else 0.0
    root_k = math.sqrt(max(int(k), 1))
    bound = 16.0 * root_k * (input_roundoff + root_k * FP32_UNIT_ROUNDOFF)
    return max(rtol, 16.0 * input_roundoff), max(atol, bound * scale)


class ArgumentState:
    """Byte snapshots of the memory behind a call's tensor arguments.

    Restoring writes the bytes back through a uint8 view of each tensor's
    storage, under no_grad: the arguments' autograd version counters do not
    move (a tensor saved for backward stays usable), and leaves that require
    grad, stride-0 expanded views and inference tensors restore like any
    other tensor. Arguments that share memory (views of one buffer) share
    one snapshot of the bytes they span.
    """

    def __init__(self, tensors):
        import torch
        self._torch = torch
        self.spans = {}    # name -> (storage key, first byte, end byte)
        regions = {}       # storage key -> [storage, first byte, end byte]
        for name, tensor in tensors.items():
            span = _byte_span(tensor)
            if span is None:
                continue
            storage = tensor.untyped_storage()
            skey = (storage.device.type, storage.device.index,
                    storage.data_ptr())
            region = regions.get(skey)
            if region is None:
                regions[skey] = [storage, span[0], span[1]]
            else:
                region[1] = min(region[1], span[0])
                region[2] = max(region[2], span[1])
            self.spans[name] = (skey, span[0], span[1])
        self.regions = {}  # storage key -> (byte view, first byte, snapshot)
        with torch.no_grad():
            for skey, (storage, lo, hi) in regions.items():
                view = torch.empty(0, dtype=torch.uint8,
                                   device=storage.device).set_(storage)
                self.regions[skey] = (view, lo, view[lo:hi].clone())

    def changed(self):
        """Names of the arguments whose bytes differ from the snapshot."""
        out = []
        for name, (skey, lo, hi) in self.spans.items():
            view, base, snap = self.regions[skey]
            if not self._torch.equal(view[lo:hi],
                                     snap[lo - base:hi - base]):
                out.append(name)
        return out

    def restore(self):
        """Writes back the bytes of every region a run changed."""
        with self._torch.no_grad():
            for view, lo, snap in self.regions.values():
                live = view[lo:lo + snap.numel()]
                if not self._torch.equal(live, snap):
                    live.copy_(snap)


def _byte_span(tensor):
    """[first, end) byte offsets of a tensor in its storage, or None."""
    if not hasattr(tensor, "untyped_storage") or tensor.numel() == 0 or \
            tensor.device.type == "meta":
        return None
    extent = sum((size - 1) * stride
                 for size, stride in zip(tensor.shape, tensor.stride()))
    item = tensor.element_size()
    first = tensor.storage_offset() * item
    return first, first + (extent + 1) * item


class CandidateEvaluator:
    """Measures single configs of one fusion.

    launch(config): runs the kernel with `config` on the live arguments.
    launch_checked(config, after_kernel): the same, calling after_kernel()
    once the kernel has run and before any post-launch hook restores
    arguments (defaults to launch, then after_kernel).
    tensors: {name: tensor} of every tensor argument. Before each
    candidate, the bytes the previous one changed are restored (see
    ArgumentState), so in-place kernels see the same inputs.
    outputs: names of the tensors to compare with the reference; None:
    the tensors the reference or the candidate wrote (detected by their
    bytes), so inputs and untouched buffers are not compared.
    reference: None (the first candidate that runs is the reference) or
    callable(**tensors) writing the expected values into the outputs.
    restore: None (every tensor argument is watched and restored between
    candidates) or the names of the only tensors to snapshot, which are
    then restored before every timed repetition too.
    setup: called before every launch, outside the time (resets that
    Triton's reset_to_zero and restore_value ask for).
    time_fn: callable(run, setup) -> backends.Timing; defaults to
    backend.time.
    """

    def __init__(self, backend, launch, tensors, outputs=None, reference=None,
                 rtol=None, atol=None, timeout_s=60.0, restore=None,
                 on_benchmark=None, name=None, compile_checker=None,
                 on_compile_rejected=None, launch_checked=None, setup=None,
                 time_fn=None):
        if _context_lost is not None:
            raise _context_lost
        self.backend = backend
        self.name = name
        # --autotune_compile_check: configs a target GPU cannot run, found
        # by compiling for it, are recorded as failed, never launched.
        self.compile_checker = compile_checker
        self.on_compile_rejected = on_compile_rejected
        self.rejected = {}
        self._checked = set()
        self.launch = launch
        self.launch_checked = launch_checked or self._launch_then
        self.time_fn = time_fn or backend.time
        # A backend's own timing can be asked for short calls (a screen);
        # a caller's time_fn (Triton's do_bench arguments) is always full.
        self.scalable = time_fn is None and getattr(backend, "scalable",
                                                    False)
        # Share of a full timing call that the first pass (__call__) asks
        # for; run_candidates lowers it to screen.
        self.first_share = 1.0
        self.tensors = {n: t for n, t in tensors.items() if t is not None}
        self.outputs = None if outputs is None else \
            [n for n in outputs if self.tensors.get(n) is not None]
        watched = self.tensors if restore is None else \
            {n: self.tensors[n] for n in restore if n in self.tensors}
        self.state = ArgumentState(watched)
        # Named arguments are updated in place: restored before every timed
        # repetition too, outside the time.
        self.restore_between_runs = restore is not None
        self.user_setup = setup
        self.rtol, self.atol = rtol, atol
        self.timeout_s = timeout_s
        self.on_benchmark = on_benchmark
        self.expected = None
        self.reference_config = None
        self._captured = None
        if reference is not None:
            self.state.restore()
            tolerance = reference(**self.tensors)
            self.expected = self._capture()
            if isinstance(tolerance, tuple) and len(tolerance) == 2:
                # A reference may return the (rtol, atol) its outputs call
                # for (for example from dot_tolerance); explicit ones win.
                self.rtol = self.rtol if self.rtol is not None else \
                    tolerance[0]
                self.atol = self.atol if self.atol is not None else \
                    tolerance[1]

    def _launch_then(self, config, after_kernel):
        self.launch(config)
        after_kernel()

    def _setup(self):
        if self.restore_between_runs:
            self.state.restore()
        if self.user_setup is not None:
            self.user_setup()

    def _time(self, config, share):
        if self.scalable and share != 1.0:
            return self.backend.time(lambda: self.launch(config),
                                     self._timing_setup(), share=share)
        return self.time_fn(lambda: self.launch(config),
                            self._timing_setup())

    def _timing_setup(self):
        if self.restore_between_runs or self.user_setup is not None:
            return self._setup
        return None

    def _restore(self):
        self.state.restore()

    def _capture(self):
        if self.outputs is not None:
            names = self.outputs
        else:
            names = set(self.state.changed())
            if self.expected is not None:
                names |= set(self.expected)
            names = sorted(names)
        return {n: self.tensors[n].clone() for n in names}

    def _after_kernel(self):
        self.backend.synchronize()
        self._captured = self._capture()

    def _compare(self, actual):
        import torch
        for name in sorted(set(actual) | set(self.expected)):
            if name not in self.expected:
                return (f"{name}: changed by this config; the reference "
                        "left it as it was")
            want, got = self.expected[name], actual[name]
            if want.shape != got.shape:
                return f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
            rtol, atol = default_tolerance(want.dtype)
            rtol = self.rtol if self.rtol is not None else rtol
            atol = self.atol if self.atol is not None else atol
            if want.dtype.is_floating_point:
                ok = torch.allclose(got, want, rtol=rtol, atol=atol,
                                    equal_nan=True)
            else:
                ok = torch.equal(got, want)
            if not ok:
                err = (got.double() - want.double()).abs()
                err = err[~torch.isnan(err)]
                worst = err.max().item() if err.numel() else math.nan
                return f"{name}: max abs error {worst:.3g} (rtol {rtol}, " \
                       f"atol {atol})"
        return None

    def precheck(self, configs):
        """Compiles the configs not checked yet for the target GPUs (all at
        once: the checker compiles in parallel)."""
        todo = [c for c in configs if c not in self._checked]
        if self.compile_checker is None or not todo:
            return
        found = self.compile_checker.check(todo)
        self._checked.update(todo)
        self.rejected.update(found)
        if found and self.on_compile_rejected is not None:
            self.on_compile_rejected(len(found))

    def __call__(self, config):
        if self.compile_checker is not None:
            self.precheck([config])
            if config in self.rejected:
                kind, reason = self.rejected[config]
                return Candidate(config, 0.0, kind, reason[:200]), None
        if self.on_benchmark is not None:
            self.on_benchmark()
        self._restore()
        self._captured = None
        if self.user_setup is not None:
            self.user_setup()
        start = time.perf_counter()
        try:
            self.launch_checked(config, self._after_kernel)
            self.backend.synchronize()
        except Exception as e:  # a candidate may fail in any way; classify
            if backends.corrupts_context(e):
                _stop_for_lost_context(self.name, config, e)
            _stop_for_unwritable_cache(e)
            return Candidate(config, 0.0, backends.classify_failure(e),
                             _detail(e)), None
        first_run_s = time.perf_counter() - start
        if first_run_s > self.timeout_s:
            return Candidate(config, 0.0, "TIMEOUT",
                             f"first run took {first_run_s:.1f} s, limit "
                             f"{self.timeout_s:.1f} s"), None
        actual = self._captured if self._captured is not None \
            else self._capture()
        if self.expected is None:
            self.expected = actual
            # Named in the autotuner's warning that no reference was given.
            self.reference_config = config
        else:
            mismatch = self._compare(actual)
            if mismatch:
                return Candidate(config, 0.0, "WRONG_RESULT", mismatch), None
        try:
            timing = self._time(config, self.first_share)
        except Exception as e:
            if backends.corrupts_context(e):
                _stop_for_lost_context(self.name, config, e)
            return Candidate(config, 0.0, backends.classify_failure(e),
                             _detail(e)), None
        return Candidate(config, timing.median_us), timing

    def retime(self, config, share=1.0):
        """Times a config that already ran correctly once more (no output
        check); returns the backend's Timing. share: of a full call, where
        the backend can be asked for less (self.scalable)."""
        self._restore()
        try:
            return self._time(config, share)
        except Exception as e:
            if backends.corrupts_context(e):
                _stop_for_lost_context(self.name, config, e)
            raise

    def finish(self):
        """Restores the arguments, so the real launch sees the inputs."""
        self._restore()


def _detail(exc):
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:200]


class TuneResult:
    def __init__(self, candidates, best, spread, seconds, tuner):
        self.candidates = candidates
        self.best = best
        self.spread = spread
        self.seconds = seconds
        self.tuner = tuner
        self.duels = []



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


def _backend_of(evaluator):
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
    fastest = min(ok, key=lambda c: (c.run_time_us, c.config.sort_key))

    def noise(config):
        return relative_noise(timings.get(config))

    samples = {}
    duels = []
    winner = None
    pool = [c for c in ok]
    if incumbent is not None and incumbent in by_config \
            and incumbent != fastest.config:
        result, times = duel(retime, incumbent, fastest.config, rule,
                             rule.incumbent_improvement)
        duels.append(result)
        for config, values in times.items():
            samples.setdefault(config, []).extend(values)
        if not result.challenger_won:
            winner = incumbent
        else:
            pool = [c for c in ok if c.config != incumbent]
    elif incumbent is not None and incumbent == fastest.config:
        winner = incumbent
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
    return Selection(best, out, duels)


def run_candidates(evaluator, configs, tuner_name="exhaustive",
                   incumbent=None, rule=DEFAULT_RULE, progress=None,
                   contest_rule=DEFAULT_CONTEST):
    """Evaluates every config once, in order, then chooses the winner
    (select_winner); returns a TuneResult. progress.measured(candidate,
    timing), when given, hears of every candidate as it is measured. Where
    the evaluator's backend can be asked for short calls, the first pass
    is a screen of contest_rule.screen_share of a full call."""
    start = time.perf_counter()
    candidates = []
    timings = {}
    seen = set()
    configs = list(configs)
    screens = isinstance(evaluator, CandidateEvaluator) and \
        evaluator.scalable
    if screens:
        evaluator.first_share = contest_rule.screen_share
    try:
        evaluator.precheck(configs)
        for config in configs:
            if config in seen:
                continue
            seen.add(config)
            candidate, timing = evaluator(config)
            candidates.append(candidate)
            if progress is not None:
                progress.measured(candidate, timing)
            if timing is not None:
                timings[config] = timing
    finally:
        if screens:
            evaluator.first_share = 1.0
    if not any(c.ok for c in candidates):
        evaluator.finish()
        raise no_config_ran(candidates)
    selection = select_winner(
        candidates, timings, evaluator.retime, incumbent, rule,
        evaluator.retime if screens else None, contest_rule,
        getattr(_backend_of(evaluator), "ignored_config_fields", ()))
    evaluator.finish()
    best = selection.best
    spread = timings[best.config].spread if best.config in timings else 0.0
    result = TuneResult(selection.candidates, best, spread,
                        time.perf_counter() - start, tuner_name)
    result.duels = selection.duels
    return result


def reselect(evaluator, result, incumbent=None, rule=DEFAULT_RULE):
    """Applies select_winner to a TuneResult produced by a search, which
    records one time per candidate and no per-candidate noise."""
    if not any(c.ok for c in result.candidates):
        return result
    start = time.perf_counter()
    selection = select_winner(
        result.candidates, {}, evaluator.retime, incumbent, rule,
        ignored=getattr(_backend_of(evaluator), "ignored_config_fields",
                        ()))
    evaluator.finish()
    out = TuneResult(selection.candidates, selection.best,
                     result.spread if selection.best.config ==
                     result.best.config else 0.0,
                     result.seconds + time.perf_counter() - start,
                     result.tuner)
    out.duels = selection.duels
    return out


def provenance_for(backend, result):
    now = datetime.datetime.now(datetime.timezone.utc)
    return Provenance(timestamp=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      timing_spread=round(result.spread, 4),
                      tuner=result.tuner,
                      tuning_seconds=round(result.seconds, 3),
                      **backend.versions())
