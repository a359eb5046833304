"""The tuner: runs candidates of one fusion and measures them.

For each candidate: restore the bytes a previous run changed, launch,
compare what the kernel wrote with the reference, time on the backend. Failures are
classified (compile error, out of resources, wrong result, timeout, runtime
error) and can never win. Which candidate wins, and why, is decided by
measure/selection.py (select_winner) from these measurements.
"""
import datetime
import math
import time

from autotune.binaries import triton_cache
from autotune.measure import backends, consensus
from autotune.measure.selection import (DEFAULT_CONTEST, TuneResult,
                                        backend_of, select_winner)
from autotune.errors import DeviceContextLostError, TritonCacheError, TuningError
from autotune.records import DEFAULT_RULE, Candidate, Provenance


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
                 time_fn=None, on_first_run=None):
        if _context_lost is not None:
            raise _context_lost
        self.backend = backend
        self.name = name
        # --autotune_compile_check: configs a target GPU cannot run, found
        # by compiling for it, are recorded as failed, never launched.
        self.compile_checker = compile_checker
        self.on_compile_rejected = on_compile_rejected
        # on_first_run(seconds): told how long a candidate's first run took
        # (a worker's watchdog sizes the rest of its time from it).
        self.on_first_run = on_first_run
        self.rejected = {}
        self._checked = set()
        self.launch = launch
        self.launch_checked = launch_checked or self._launch_then
        self.time_fn = time_fn or backend.time
        # A backend's own timing can be asked for short calls (a screen);
        # a caller's time_fn (Triton's do_bench arguments) is always full.
        self.scalable = time_fn is None and backend.scalable
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
        for name in sorted(set(actual) | set(self.expected)):
            if name not in self.expected:
                return (f"{name}: changed by this config; the reference "
                        "left it as it was")
            how = self.difference(name, self.expected[name], actual[name])
            if how is not None:
                return how
        return None

    def difference(self, name, want, got):
        """How the tensor `name` of one run (`got`) differs from `want`,
        with the dtype's tolerance (or rtol=/atol=); None when they agree."""
        import torch
        if want.shape != got.shape:
            return f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        if torch.equal(got, want):
            return None  # the usual answer, and cheaper than allclose
        rtol, atol = default_tolerance(want.dtype)
        rtol = self.rtol if self.rtol is not None else rtol
        atol = self.atol if self.atol is not None else atol
        if want.dtype.is_floating_point:
            ok = torch.allclose(got, want, rtol=rtol, atol=atol,
                                equal_nan=True)
        else:
            ok = torch.equal(got, want)
        if ok:
            return None
        err = (got.double() - want.double()).abs()
        err = err[~torch.isnan(err)]
        worst = err.max().item() if err.numel() else math.nan
        return f"{name}: max abs error {worst:.3g} (rtol {rtol}, " \
               f"atol {atol})"

    def outputs_of(self, config):
        """What one run of `config` on restored arguments writes ({name:
        tensor}, as the first pass captures it), with no check and no
        timing: the consensus review's second look."""
        self._restore()
        self._captured = None
        if self.user_setup is not None:
            self.user_setup()
        with backends.Watchdog(self.timeout_s, _overdue(self, config)):
            self.launch_checked(config, self._after_kernel)
            self.backend.synchronize()
        return self._captured if self._captured is not None \
            else self._capture()

    def failure_of(self, config, exc):
        """The failed Candidate of a run of `config` that raised `exc`
        (a lost context or an unwritable Triton cache stops tuning)."""
        if backends.corrupts_context(exc):
            _stop_for_lost_context(self.name, config, exc)
        _stop_for_unwritable_cache(exc)
        return Candidate(config, 0.0, backends.classify_failure(exc),
                         _detail(exc))

    def judged_by_consensus(self):
        """True when no reference= nor outputs= says what is right: the
        first config that ran stood in for a reference, and the configs
        are judged against each other (autotune.measure.consensus)."""
        return self.reference_config is not None and self.outputs is None

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
            with backends.Watchdog(self.timeout_s, _overdue(self, config)):
                self.launch_checked(config, self._after_kernel)
                self.backend.synchronize()
        except Exception as e:  # a candidate may fail in any way; classify
            if backends.corrupts_context(e):
                _stop_for_lost_context(self.name, config, e)
            _stop_for_unwritable_cache(e)
            return Candidate(config, 0.0, backends.classify_failure(e),
                             _detail(e)), None
        first_run_s = time.perf_counter() - start
        if self.on_first_run is not None:
            self.on_first_run(first_run_s)
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


def _overdue(evaluator, config):
    """What the in-process watchdog says of a first run past its limit."""
    return (f"autotune: {evaluator.name or 'kernel'} with config {config} "
            f"is still running after its time limit of "
            f"{evaluator.timeout_s:g} s (timeout_s): a hung kernel cannot be "
            "stopped inside the tuning process; tune in worker processes "
            "(--autotune_workers) to have it stopped and recorded as "
            "TIMEOUT")


def _detail(exc):
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:200]


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
        candidates, timings, review = judge_by_consensus(
            evaluator, candidates, timings)
    finally:
        if screens:
            evaluator.first_share = 1.0
    if not any(c.ok for c in candidates):
        evaluator.finish()
        raise no_config_ran(candidates)
    selection = select_winner(
        candidates, timings, evaluator.retime, incumbent, rule,
        evaluator.retime if screens else None, contest_rule,
        getattr(backend_of(evaluator), "ignored_config_fields", ()))
    evaluator.finish()
    best = selection.best
    spread = timings[best.config].spread if best.config in timings else 0.0
    result = TuneResult(selection.candidates, best, spread,
                        time.perf_counter() - start, tuner_name,
                        selection.reason)
    result.duels = selection.duels
    result.consensus = review
    return result


def judge_by_consensus(evaluator, candidates, timings):
    """(candidates, timings, consensus.Review or None): where no
    reference= nor outputs= says what is right and some config differed
    from the first one, the configs are judged against what most of them
    wrote (autotune.measure.consensus); a config found right is timed as
    the first pass times. Candidates measured in a worker pool are looked
    at again here, by the evaluator behind the pool."""
    inner = getattr(evaluator, "evaluator", evaluator)
    if not isinstance(inner, CandidateEvaluator) or \
            not inner.judged_by_consensus() or \
            not consensus.needs_review(candidates):
        return candidates, timings, None

    def time_candidate(config):
        try:
            timing = inner.retime(config, inner.first_share)
        except Exception as e:  # classified as the first pass does
            return inner.failure_of(config, e), None
        return Candidate(config, timing.median_us), timing
    review = consensus.review(inner, candidates, timings, time_candidate)
    return review.candidates, review.timings, review


def provenance_for(backend, result):
    now = datetime.datetime.now(datetime.timezone.utc)
    return Provenance(timestamp=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      timing_spread=round(result.spread, 4),
                      tuner=result.tuner,
                      tuning_seconds=round(result.seconds, 3),
                      **backend.versions())
