"""The tuner (autotune/measure/tuner.py): every candidate launched on
its own restored arguments, checked against the reference, and a failure
classified (compile error, out of resources, wrong result, timeout) so it
can never win."""
import types
import warnings

import pytest
import torch
import triton
import triton.language as tl

from autotune.records import Config
import autotune

import tiny_kernels as tk


def test_outputs_are_restored_between_candidates(session_factory):
    session_factory()

    @autotune.autotune(configs=tk.GOOD, key=["n"])
    @triton.jit
    def accumulate(x, y, n, alpha, BLOCK: tl.constexpr,
                   BUG: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(y + offs, mask=m) + 1.0, mask=m)

    dev = autotune.device()
    y = torch.zeros(32, device=dev)
    accumulate[lambda meta: (triton.cdiv(32, meta["BLOCK"]),)](
        torch.zeros(32, device=dev), y, 32, 1.0)
    # Each candidate ran several times, but the real launch saw zeros.
    assert torch.equal(y, torch.ones(32, device=dev))


def test_reference_function_rejects_a_wrong_first_candidate(session_factory):
    sess = session_factory()

    def reference(x, y, n, alpha, **_):
        y.copy_(x * alpha + 1.0)
    tuned = tk.make_tuner([tk.WRONG] + tk.GOOD, reference=reference)
    x, y = tk.run(tuned, 20)
    assert torch.allclose(y, x * 2.0 + 1.0)
    entry = next(iter(sess.cache.memory.values()))
    assert entry.best != tk.WRONG


def test_failures_are_classified():
    from autotune.measure.backends import classify_failure
    from triton.runtime.errors import InterpreterError

    def wrapped(cause):
        try:
            try:
                raise cause
            except Exception as inner:
                raise InterpreterError(repr(inner)) from inner
        except InterpreterError as e:
            return e

    # Raised by the interpreter while the kernel's own code runs.
    assert classify_failure(wrapped(IndexError("bad offset"))) == \
        "RUNTIME_ERROR"
    assert classify_failure(RuntimeError("CUDA error: out of memory")) == \
        "OUT_OF_RESOURCES"
    # Triton's own class (a look-alike of the same name is not one).
    from triton.runtime.errors import OutOfResources
    assert classify_failure(OutOfResources(1 << 20, 232448,
                                           "shared memory")) == \
        "OUT_OF_RESOURCES"


def test_slow_first_run_is_a_timeout_and_never_wins(monkeypatch):
    from autotune.measure import backends
    from autotune.measure import tuner
    x = torch.arange(8.0)
    y = torch.zeros(8)
    # The tuner's clock advances only by what each launch says it took.
    clock = [0.0]
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(
        perf_counter=lambda: clock[0]))

    def launch(config):
        clock[0] += config.kwargs["SLEEP"]
        y.copy_(x * 2)

    slow, fast = Config({"SLEEP": 0.3}), Config({"SLEEP": 0.0})
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(repetitions=1), launch, {"y": y},
        reference=lambda y: y.copy_(x * 2), timeout_s=0.1)
    result = tuner.run_candidates(evaluator, [slow, fast])
    kinds = {c.config: c.failure for c in result.candidates}
    assert kinds == {slow: "TIMEOUT", fast: "NONE"}
    assert result.best.config == fast
    assert "limit 0.1 s" in result.candidates[0].failure_detail


def test_reference_that_returns_its_result_is_told_what_to_do(
        session_factory):
    session_factory()
    tuned = tk.make_tuner(tk.GOOD, reference=lambda x, alpha, **_: x * alpha
                          + 1.0)
    # y starts as zeros, not as tk.run's empty_like: reused memory could
    # already hold the right values, and then nothing would differ.
    x = torch.arange(40, dtype=torch.float32, device=autotune.device())
    y = torch.zeros_like(x)
    with pytest.warns(autotune.AutotuneWarning,
                      match="reference= returned a Tensor, which is ignored"):
        with pytest.raises(autotune.AutotuneError):
            tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](
                x, y, 40, 2.0)
    # Returning the output it wrote (y.copy_() returns y) is fine.
    tuned = tk.make_tuner(tk.GOOD, name="writes_and_returns",
                          reference=lambda x, y, alpha, **_:
                          y.copy_(x * alpha + 1.0))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*returned a Tensor.*")
        x, y = tk.run(tuned, 40)
    assert torch.allclose(y, x * 2.0 + 1.0)
