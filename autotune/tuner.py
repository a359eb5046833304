"""The tuner: runs candidates of one fusion and picks the winner.

For each candidate: restore the arguments the kernel writes to, launch,
compare the outputs with the reference, time on the backend. Failures are
classified (compile error, out of resources, wrong result, timeout, runtime
error) and can never win. The winner is the fastest correct candidate; ties
go to the smallest config, so the choice is deterministic.
"""
import datetime
import math
import time

from autotune import backends
from autotune.records import Candidate, Provenance, best_of


class TuningError(Exception):
    pass


def default_tolerance(dtype):
    name = str(dtype)
    if "float16" in name or "bfloat16" in name:
        return 2e-2, 2e-2
    if "float8" in name:
        return 1e-1, 1e-1
    return 1e-3, 1e-4


class CandidateEvaluator:
    """Measures single configs of one fusion.

    launch(config): runs the kernel with `config` on the live arguments.
    tensors: {name: tensor} of every tensor argument; restored from a
    snapshot before each run so that in-place kernels see the same inputs.
    outputs: names of the tensors to compare with the reference.
    reference: None (the first candidate that runs is the reference) or
    callable(**tensors) writing the expected values into the outputs.
    """

    def __init__(self, backend, launch, tensors, outputs=None, reference=None,
                 rtol=None, atol=None, timeout_s=60.0, restore=None,
                 on_benchmark=None):
        self.backend = backend
        self.launch = launch
        self.tensors = tensors
        self.outputs = list(outputs) if outputs else list(tensors)
        restore_names = list(restore) if restore is not None else list(tensors)
        self.snapshots = {n: tensors[n].clone() for n in restore_names}
        self.rtol, self.atol = rtol, atol
        self.timeout_s = timeout_s
        self.on_benchmark = on_benchmark
        self.expected = None
        self.reference_config = None
        if reference is not None:
            self._restore()
            reference(**tensors)
            self.expected = self._capture()

    def _restore(self):
        for name, snap in self.snapshots.items():
            self.tensors[name].copy_(snap)

    def _capture(self):
        return {n: self.tensors[n].clone() for n in self.outputs}

    def _compare(self, actual):
        import torch
        for name in self.outputs:
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

    def __call__(self, config):
        if self.on_benchmark is not None:
            self.on_benchmark()
        self._restore()
        start = time.perf_counter()
        try:
            self.launch(config)
            self.backend.synchronize()
        except Exception as e:  # a candidate may fail in any way; classify
            return Candidate(config, 0.0, backends.classify_failure(e),
                             _detail(e)), None
        first_run_s = time.perf_counter() - start
        if first_run_s > self.timeout_s:
            return Candidate(config, 0.0, "TIMEOUT",
                             f"first run took {first_run_s:.1f} s, limit "
                             f"{self.timeout_s:.1f} s"), None
        actual = self._capture()
        if self.expected is None:
            self.expected = actual
            self.reference_config = config
        else:
            mismatch = self._compare(actual)
            if mismatch:
                return Candidate(config, 0.0, "WRONG_RESULT", mismatch), None
        try:
            timing = self.backend.time(lambda: self.launch(config))
        except Exception as e:
            return Candidate(config, 0.0, backends.classify_failure(e),
                             _detail(e)), None
        return Candidate(config, timing.median_us), timing

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


def run_candidates(evaluator, configs, tuner_name="exhaustive"):
    """Evaluates every config once, in order; returns a TuneResult."""
    start = time.perf_counter()
    candidates = []
    spreads = {}
    seen = set()
    for config in configs:
        if config in seen:
            continue
        seen.add(config)
        candidate, timing = evaluator(config)
        candidates.append(candidate)
        if timing is not None:
            spreads[config] = timing.spread
    evaluator.finish()
    best = best_of(candidates)
    if best is None:
        kinds = ", ".join(sorted({c.failure for c in candidates}))
        raise TuningError(f"no config ran correctly ({len(candidates)} tried; "
                          f"failures: {kinds}); first: "
                          f"{candidates[0].failure_detail if candidates else ''}")
    return TuneResult(candidates, best, spreads.get(best.config, 0.0),
                      time.perf_counter() - start, tuner_name)


def provenance_for(backend, result):
    now = datetime.datetime.now(datetime.timezone.utc)
    return Provenance(timestamp=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      timing_spread=round(result.spread, 4),
                      tuner=result.tuner,
                      tuning_seconds=round(result.seconds, 3),
                      **backend.versions())
