"""The GPU path, checked on the CPU: Triton's own exception types, TF32-aware
tolerances, a corrupted CUDA context, worker pinning, backend selection,
restoring in-place arguments between timed repetitions."""
import functools
import os

import pytest
import torch

import autotune
from autotune import flags as autotune_flags
from autotune.measure import backends
from autotune.measure import selection, tuner
from autotune.measure.fake_backend import (FakeBackend,
                                            gpu_backend_without_a_gpu)
from autotune.records import Config
from autotune.search import evolutionary as ev
from autotune.runtime.parallel import ParallelEvaluator


# -- failure classification with Triton's real exception types -------------

def _gpu_compile_error():
    """A real CompilationError: an fp16 tl.dot with K=8 (the hardware
    minimum is 16), compiled for sm_90 with Triton's own compiler."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    def small_dot(a, c, K: tl.constexpr):
        r = tl.arange(0, 16)
        k = tl.arange(0, K)
        x = tl.load(a + r[:, None] * K + k[None, :])
        y = tl.load(a + k[:, None] * 16 + r[None, :])
        tl.store(c + r[:, None] * 16 + r[None, :], tl.dot(x, y))

    source = ASTSource(JITFunction(small_dot),
                       {"a": "*fp16", "c": "*fp32", "K": "constexpr"},
                       constexprs={"K": 8})
    try:
        triton.compile(source, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4})
    except Exception as e:  # noqa: BLE001 -- the test inspects it
        return e
    raise AssertionError("K=8 fp16 dot compiled for sm_90")


def test_real_triton_and_torch_errors_are_classified():
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources, PTXASError
    error = _gpu_compile_error()
    assert isinstance(error, CompilationError)
    assert backends.classify_failure(error) == "COMPILE_ERROR"
    assert backends.classify_failure(PTXASError("ptxas fatal")) == \
        "COMPILE_ERROR"
    assert backends.classify_failure(
        OutOfResources(300000, 232448, "shared memory")) == "OUT_OF_RESOURCES"
    assert backends.classify_failure(
        torch.OutOfMemoryError("CUDA out of memory")) == "OUT_OF_RESOURCES"
    assert backends.classify_failure(ValueError("x")) == "RUNTIME_ERROR"

    class CompilationErrorLookalike(Exception):
        pass
    # Classified by type, not by name.
    assert backends.classify_failure(CompilationErrorLookalike()) == \
        "RUNTIME_ERROR"


# -- a candidate that corrupts the CUDA context ------------------------------

def _illegal_address():
    # What torch raises at the synchronize after a kernel's bad access.
    return torch.AcceleratorError(
        "CUDA error: an illegal memory access was encountered")


def test_corrupted_context_stops_tuning_with_one_message(monkeypatch):
    monkeypatch.setattr(tuner, "_context_lost", None)
    y = torch.zeros(4)
    bad = Config({"BLOCK": 64})

    def launch(config):
        if config == bad:
            raise _illegal_address()
        y.fill_(1.0)

    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(repetitions=1), launch, {"y": y},
        name="copy_kernel")
    with pytest.raises(tuner.DeviceContextLostError) as raised:
        tuner.run_candidates(evaluator,
                             [Config({"BLOCK": 16}), bad, Config({"BLOCK": 32})])
    message = str(raised.value)
    assert "copy_kernel" in message and "BLOCK" in message and "64" in message
    assert "illegal memory access" in message and "\n" not in message
    # Every later tuning in the process stops with the same message.
    with pytest.raises(tuner.DeviceContextLostError) as again:
        tuner.CandidateEvaluator(backends.InterpreterBackend(), launch,
                                 {"y": y})
    assert again.value is raised.value


def test_ordinary_runtime_errors_do_not_stop_tuning(monkeypatch):
    monkeypatch.setattr(tuner, "_context_lost", None)
    y = torch.zeros(4)

    def launch(config):
        if config.kwargs["BLOCK"] == 64:
            raise RuntimeError("Triton Error [CUDA]: invalid argument")
        y.fill_(1.0)
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(repetitions=1), launch, {"y": y})
    result = tuner.run_candidates(evaluator, [Config({"BLOCK": 64}),
                                              Config({"BLOCK": 16})])
    assert [c.failure for c in result.candidates] == ["RUNTIME_ERROR", "NONE"]


# -- in-place kernels: arguments restored before every timed repetition ----

def test_in_place_arguments_are_restored_between_timed_repetitions():
    y = torch.zeros(4)
    seen = []

    def launch(config):
        seen.append(y[0].item())
        y.add_(1.0)  # updates its argument in place
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(warmup=1, repetitions=3), launch,
        {"y": y}, restore=["y"])
    evaluator(Config({"BLOCK": 16}))
    assert seen == [0.0] * 5  # first run, warm-up, three repetitions


# -- TF32-aware tolerances ---------------------------------------------------

def _tf32(x):
    # What sm_80+ tensor cores read of an fp32 operand: 10 mantissa bits.
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def test_tf32_result_is_within_tf32_tolerance_not_within_fp32():
    torch.manual_seed(0)
    k = 1024
    a, b = torch.randn(64, k), torch.randn(k, 64)
    want = a.double() @ b.double()
    got = (_tf32(a).double() @ _tf32(b).double()).float()
    rtol, atol = tuner.dot_tolerance(torch.float32, k, "tf32", scale=1.0)
    assert torch.allclose(got.double(), want, rtol=rtol, atol=atol)
    rtol, atol = tuner.dot_tolerance(torch.float32, k, "ieee", scale=1.0)
    assert not torch.allclose(got.double(), want, rtol=rtol, atol=atol)
    # fp32 accumulation in another order stays within the ieee tolerance.
    blocked = sum(a[:, i:i + 32] @ b[i:i + 32] for i in range(0, k, 32))
    assert torch.allclose(blocked.double(), want, rtol=rtol, atol=atol)


def test_matmul_precision_follows_torch():
    from autotune.kernels import matmul
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert matmul.input_precision(torch.float32) == "ieee"
        torch.set_float32_matmul_precision("high")
        assert matmul.input_precision(torch.float32) == "tf32"
        assert matmul.input_precision(torch.float16) == "ieee"
    finally:
        torch.set_float32_matmul_precision(saved)


# -- backend selection -------------------------------------------------------

@pytest.mark.parametrize("flags", ["--autotune_backend=interpreter",
                                   "--autotune_cache_mode=read "
                                   "--autotune_backend=interpreter"])
def test_interpreter_flag_selects_the_interpreter_on_a_gpu_host(
        monkeypatch, flags):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("AUTOTUNE_FLAGS", flags)
    monkeypatch.setattr(backends, "gpu_driver_visible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    backends.select_interpreter_early(autotune_flags.import_time_choices()[0])
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_gpu_host_without_the_flag_keeps_the_gpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_backend=auto")
    monkeypatch.setattr(backends, "gpu_driver_visible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    backends.select_interpreter_early(autotune_flags.import_time_choices()[0])
    assert "TRITON_INTERPRET" not in os.environ


def test_interpreter_backend_refused_when_kernels_compile_for_the_gpu(
        monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(backends.BackendError) as raised:
        backends.select_backend("interpreter")
    assert "\n" not in str(raised.value)
    assert "before `import autotune`" in str(raised.value)


def test_device_helper_gives_the_backends_device(session_factory):
    sess = session_factory()
    expected = "cuda" if sess.backend.name == "gpu" else "cpu"
    assert autotune.device().type == expected
    assert autotune.device() == sess.backend.device


# -- parallel workers pinned before they import anything -------------------

def report_start_environment(device):
    """Objective factory: each measurement carries the CUDA_VISIBLE_DEVICES
    the worker process was started with (/proc/self/environ is the
    environment at exec, before any import)."""
    with open("/proc/self/environ", "rb") as f:
        start_env = dict(item.split(b"=", 1) for item in
                         f.read().split(b"\0") if b"=" in item)
    pinned = start_env.get(b"CUDA_VISIBLE_DEVICES", b"<unset>").decode()

    def objective(config):
        return ev.Measurement(config, 1.0, "NONE", f"{device}:{pinned}")
    return objective


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"),
                    reason="needs /proc")
def test_gpu_workers_are_pinned_before_they_start():
    configs = [Config({"x": i}) for i in range(4)]
    with ParallelEvaluator(functools.partial(report_start_environment),
                           devices=["0", "1"], gpu=True) as evaluator:
        results = evaluator.evaluate(configs)
    seen = {r.detail for r in results}
    assert seen <= {"0:0", "1:1"} and seen, seen
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "1"


def test_gpu_workers_refuse_fork():
    with pytest.raises(ValueError, match="spawn"):
        ParallelEvaluator(report_start_environment, devices=["0"], gpu=True,
                          start_method="fork")


def test_gpu_timing_asks_do_bench_for_the_quartiles(monkeypatch):
    import triton.testing
    calls = []

    def fake_do_bench(fn, warmup, rep, quantiles):
        fn()
        calls.append((warmup, rep, tuple(quantiles)))
        return [0.010, 0.012, 0.020]
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    timing = gpu_backend_without_a_gpu().time(lambda: None)
    # Not the extremes: one slow outlier must not widen the noise estimate.
    assert calls == [(25.0, 100.0, (0.25, 0.5, 0.75))]
    assert timing.median_us == pytest.approx(12.0)
    assert selection.relative_noise(timing) == pytest.approx(10.0 / 12.0)


class _FakeCudaClock:
    """torch.cuda's events over a simulated GPU clock: a kernel launch
    advances it by the kernel's time, a restore by much more (its host sync
    and clones); the events record which steps they bracket."""

    def __init__(self, kernel_ms, setup_ms):
        import contextlib
        import types
        self.now = 0.0
        self.kernel_ms, self.setup_ms = kernel_ms, setup_ms
        self.steps = []
        clock = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = clock.now
                clock.steps.append("record")

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.at - self.at
        self.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
            device=lambda d: contextlib.nullcontext(), Event=Event,
            synchronize=lambda d=None: None))

    def run(self):
        self.now += self.kernel_ms
        self.steps.append("run")

    def setup(self):
        self.now += self.setup_ms
        self.steps.append("setup")


def test_gpu_timing_of_an_in_place_kernel_times_the_kernel_alone():
    """The restore (a host sync and clones, 20 times the kernel here) runs
    before the start event; the events bracket the launch only, so a
    3-microsecond kernel times at 3 microseconds, not at set-up minus
    set-up clamped to 0."""
    import types
    clock = _FakeCudaClock(kernel_ms=0.003, setup_ms=0.060)
    backend = gpu_backend_without_a_gpu(clock.torch)
    flushed = []
    backend._flush_buffer = lambda: types.SimpleNamespace(
        zero_=lambda: flushed.append(1))
    timing = backend.time(clock.run, setup=clock.setup)
    assert timing.median_us == pytest.approx(3.0)
    assert selection.relative_noise(timing) == pytest.approx(0.0)
    # Between a start and an end event: one launch, never a set-up.
    inside, bracketed, current = False, [], []
    for step in clock.steps:
        if step == "record":
            if inside:
                bracketed.append(current)
            inside, current = not inside, []
        elif inside:
            current.append(step)
    assert bracketed and all(b == ["run"] for b in bracketed), clock.steps
    assert flushed


def _triton_like_do_bench(clock):
    """do_bench as Triton 3.6-3.9 runs it, over the fake clock: one launch,
    five estimate launches (each behind an L2 flush), warm-ups and
    repetitions sized by the estimate, at least one each."""
    import statistics

    def do_bench(fn, warmup, rep, quantiles):
        fn()
        start = clock.now
        for _ in range(5):
            fn()
        estimate = (clock.now - start) / 5
        for _ in range(max(1, int(warmup / estimate))):
            fn()
        samples = []
        for _ in range(max(1, int(rep / estimate))):
            begin = clock.now
            fn()
            samples.append(clock.now - begin)
        clock.repetitions.append(len(samples))
        if len(samples) == 1:
            return samples * len(quantiles)
        q = statistics.quantiles(samples, n=4)
        return [q[0], statistics.median(samples), q[2]]
    return do_bench


def _timed_on_a_fake_clock(monkeypatch, kernel_ms, share):
    """A GpuBackend timing call over the fake clock (GPU and host time
    alike): (Timing, clock)."""
    import types

    import triton.testing
    clock = _FakeCudaClock(kernel_ms=kernel_ms, setup_ms=0.0)
    clock.repetitions = []
    steady = clock.run
    launches = []

    def run():  # a little jitter, so a spread can show
        steady()
        launches.append(1)
        clock.now += kernel_ms * 0.01 * (len(launches) % 3)
    monkeypatch.setattr(triton.testing, "do_bench",
                        _triton_like_do_bench(clock))
    monkeypatch.setattr(backends, "time", types.SimpleNamespace(
        perf_counter=lambda: clock.now / 1e3))
    backend = gpu_backend_without_a_gpu(clock.torch)
    backend._flush_buffer = lambda: types.SimpleNamespace(zero_=lambda: None)
    return backend.time(run, share=share), clock, backend


def test_a_kernel_slower_than_its_rep_gets_the_floor_of_repetitions(
        monkeypatch):
    """do_bench gives a 50 ms kernel one repetition at a screen's 10 ms
    rep; the call is topped up to MIN_REPETITIONS (more than one sample,
    a spread), and its wall time (do_bench's launch, five estimates, a
    warm-up, the repetition, then the floor's) is recorded beside the
    12.5 ms it asked for."""
    timing, clock, backend = _timed_on_a_fake_clock(monkeypatch, 50.0, 0.1)
    assert clock.repetitions == [1]  # what do_bench alone gives
    assert timing.repetitions == backends.MIN_REPETITIONS >= 3
    assert len([s for s in clock.steps if s == "run"]) == \
        8 + backends.MIN_REPETITIONS
    assert timing.spread > 0
    assert timing.asked_ms == pytest.approx(12.5)
    assert timing.wall_ms == pytest.approx(
        50.0 * (8 + backends.MIN_REPETITIONS), rel=0.05)
    ledger = backend.timing_ledger().summary()
    assert ledger["calls"] == 1 and ledger["topped_up_to_min_repetitions"] \
        == 1
    assert ledger["wall_over_asked"] > 20
    assert ledger["fewest_repetitions"] == backends.MIN_REPETITIONS


def test_a_fast_kernel_keeps_do_bench_and_records_what_it_cost(monkeypatch):
    """A 0.2 ms kernel at a screen's share: do_bench's own repetitions
    (no top-up), and the call's wall time is more than it asked for (the
    first launch and the five estimates)."""
    timing, clock, backend = _timed_on_a_fake_clock(monkeypatch, 0.2, 0.1)
    assert clock.repetitions[0] >= backends.MIN_REPETITIONS
    assert backend.timing_ledger().topped_up == 0
    assert timing.repetitions == pytest.approx(clock.repetitions[0], rel=0.15)
    assert timing.wall_ms > timing.asked_ms
    assert timing.wall_ms == pytest.approx(clock.now, rel=1e-6)


def _realistic_gpu_do_bench(true_us, current, rng):
    """do_bench over simulated GPU timings: most repetitions within a few
    per cent of the kernel's true time, and a few slow outliers (clock
    changes, another process) that stretch max/min to 1.3-2.0, as on a
    real GPU."""
    def do_bench(fn, warmup, rep, quantiles):
        fn()
        true_ms = true_us[current[0]] / 1e3
        samples = []
        for _ in range(100):
            value = true_ms * (1.0 + abs(rng.gauss(0.0, 0.01)))
            if rng.random() < 0.04:
                value *= rng.uniform(1.3, 2.0)
            samples.append(value)
        samples.sort()
        return [samples[min(int(q * len(samples)), len(samples) - 1)]
                for q in quantiles]
    return do_bench


def _tune_with_realistic_spread(monkeypatch, seed):
    import random

    import triton.testing
    # The smallest config (the tie-breaker) is not the fastest; the fastest
    # is 15 % ahead of the next.
    true_us = {16: 30.0, 32: 13.0, 64: 11.5, 128: 10.0, 256: 14.0, 512: 25.0}
    current = [None]
    rng = random.Random(seed)
    monkeypatch.setattr(triton.testing, "do_bench",
                        _realistic_gpu_do_bench(true_us, current, rng))
    y = torch.zeros(4)

    def launch(config):
        current[0] = config.kwargs["BLOCK"]
        y.fill_(1.0)
    evaluator = tuner.CandidateEvaluator(gpu_backend_without_a_gpu(), launch,
                                         {"y": y}, name="realistic")
    configs = [Config({"BLOCK": b}) for b in true_us]
    result = tuner.run_candidates(evaluator, configs)
    return result.best.config.kwargs["BLOCK"], len(result.duels)


def test_realistic_gpu_spread_the_fastest_wins_and_duels_stay_rare(
        monkeypatch):
    monkeypatch.setattr(tuner, "_context_lost", None)
    outcomes = [_tune_with_realistic_spread(monkeypatch, seed)
                for seed in range(10)]
    winners = [w for w, _ in outcomes]
    duels = sum(d for _, d in outcomes)
    assert winners == [128] * 10, outcomes
    assert duels <= 2, outcomes


def test_a_lost_context_in_a_duel_is_not_a_winner(monkeypatch):
    """A candidate that corrupts the CUDA context while retimed in a duel
    stops tuning with the one-line error; no winner is chosen or cached."""
    monkeypatch.setattr(tuner, "_context_lost", None)
    a, b = Config({"BLOCK": 16}), Config({"BLOCK": 32})
    times = {a: 10.0, b: 9.9}  # tie on the first pass: a duel decides

    def retime(config):
        if config == b:
            try:
                raise _illegal_address()
            except RuntimeError as e:
                tuner._stop_for_lost_context("dueller", config, e)
        return backends.Timing([times[config]] * 3)
    from autotune.records import Candidate
    candidates = [Candidate(a, times[a]), Candidate(b, times[b])]
    timings = {c: backends.Timing([times[c]] * 3) for c in times}
    with pytest.raises(tuner.DeviceContextLostError, match="dueller"):
        selection.select_winner(candidates, timings, retime)


# -- multi-GPU workers ------------------------------------------------------

def test_gpu_workers_take_the_parents_visible_gpus(monkeypatch):
    from autotune.runtime import parallel
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert parallel.visible_gpu_ids(2) == ["2", "3"]
    assert parallel.visible_gpu_ids(1) == ["2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb")
    assert parallel.visible_gpu_ids(2) == ["GPU-aa", "GPU-bb"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert parallel.visible_gpu_ids(3) == ["0", "1", "2"]


def context_killing_objective(device):
    """objective(config): config x=1 corrupts this worker's CUDA context
    (simulated: the tuner's DeviceContextLostError); reports its pid."""
    def objective(config):
        if config.kwargs["x"] == 1:
            try:
                raise _illegal_address()
            except RuntimeError as e:
                tuner._stop_for_lost_context("killer", config, e)
        return ev.Measurement(config, 1.0, "NONE", str(os.getpid()))
    return objective


def test_a_worker_whose_context_is_lost_is_retired():
    configs = [Config({"x": i}) for i in range(6)]
    with ParallelEvaluator(context_killing_objective, devices=["cpu0"],
                           start_method="fork", depth=1) as evaluator:
        results = evaluator.evaluate(configs)
        lost = evaluator.lost_workers
    assert results[1].failure == "RUNTIME_ERROR"
    assert "corrupted the CUDA context" in results[1].detail
    assert all(r.failure == "NONE" for i, r in enumerate(results) if i != 1)
    # The candidates after it ran in a fresh worker, not the dead one.
    assert lost == 1
    assert results[0].detail != results[2].detail
    assert results[2].detail == results[5].detail


def test_gpu_workers_get_lambda_grids_evaluated_per_config(monkeypatch):
    """A kernel called with a lambda grid (as users write it) goes to GPU
    workers: the grid is evaluated in the tuning process for each config
    and the worker gets the tuple."""
    import pickle

    import triton
    import tiny_kernels
    from autotune.runtime import parallel
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    backend = FakeBackend(name="gpu", warmup_ms=25.0, rep_ms=100.0)
    n = 100
    x, y = torch.arange(float(n)), torch.empty(n)
    pool = parallel.CandidatePool.for_miss(
        evaluator=None, workers=2, backend=backend,
        autotuner=tiny_kernels.AXPB,
        grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),),
        args=(x, y, n, 2.0), kwargs={})
    assert pool is not None and pool.gpu_count == 2
    tasks = pool._tasks(tiny_kernels.GOOD)
    assert [grid for _, grid in tasks] == [(7,), (4,)]
    pickle.dumps((pool.gpu_spec, tasks))


# -- compile in parallel, measure serially ----------------------------------

def test_launch_signature_specialises_as_a_launch_does():
    from autotune.kernels import matmul
    from autotune.binaries import compile_check
    a = torch.empty(64, 32)
    named = {"a": a, "b": a, "bias": a[0], "c": a, "M": 64, "N": 33, "K": 32,
             "stride_am": 32, "stride_ak": 1, "stride_bk": 32,
             "stride_bn": 1, "stride_cm": 32, "stride_cn": 1,
             "ACTIVATION": "relu"}
    sig = compile_check.launch_signature(
        matmul.matmul_bias_act_kernel.base_fn, named)
    assert sig["a"] == "*fp32:16" and sig["M"] == "i32:16"
    assert sig["N"] == "i32" and sig["stride_ak"] == 1
    assert sig["ACTIVATION"] == "relu"


def test_gpu_miss_compiles_candidates_ahead_in_a_pool(monkeypatch,
                                                      session_factory):
    """On the GPU backend (faked), a miss hands every candidate to the
    compile-ahead pool with the kernel, its launch arguments and the jobs
    the flag asks for; --autotune_compile_jobs=1 turns it off."""
    import tiny_kernels
    from autotune.binaries import compile_check
    sess = session_factory(autotune_compile_jobs=3)
    calls = []
    monkeypatch.setattr(compile_check, "compile_ahead_of_launch",
                        lambda *a: calls.append(a) or [])
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: (9, 0))
    monkeypatch.setattr(sess, "backend", FakeBackend(
        name="gpu", device="cuda:0"), raising=False)
    tuner_ = tiny_kernels.AXPB
    named = {"x": torch.arange(16.0), "y": torch.empty(16), "n": 16,
             "alpha": 2.0}
    miss = tuner_._miss(sess, None, named, None, (), {})
    miss.compile_ahead(tiny_kernels.GOOD)
    ((where, kernel, launch_args, configs, jobs),) = calls
    assert where == ("tiny_kernels", "AXPB") and kernel is tuner_.kernel
    assert jobs == 3 and launch_args is named
    assert configs == tiny_kernels.GOOD
    sess.options.autotune_compile_jobs = 1
    miss.compile_ahead(tiny_kernels.GOOD)
    assert len(calls) == 1
