"""Backends: where candidates run and how they are timed.

The tuner only sees this interface (Backend): a device key, version facts
for provenance, a way to time a callable, and a way to classify failures.
Its test double, a full backend that times by a given clock, is
autotune/measure/fake_backend.py.

- GpuBackend: triton.testing.do_bench (CUDA events, warm-up, the driver's
  L2 flush before every repetition), median of the repetitions.
- InterpreterBackend: Triton's interpreter (TRITON_INTERPRET=1) on the CPU.
  Its timings are not GPU timings, but every flow (tune, dump, load, hit,
  miss, require-complete) runs the same code.
"""
import abc
import os
import statistics
import threading
import time

from autotune import log as logs
from autotune.errors import BackendError

from autotune.flags import BACKEND_NAMES




class Timing:
    """One timing call's repetitions. `share`: what the call asked for, as
    a share of the backend's full call (a screen asks for less: its median
    is noisier, and the tuner weighs it so). `asked_ms`: the warm-up and
    repetition time the call asked for; `wall_ms`: the host wall time it
    cost (a GPU call also runs do_bench's first launch, its five estimate
    launches and an L2 flush before every repetition, so a short call
    costs several times its ask); `repetitions`: the timed repetitions
    (None where the backend does not know them)."""
    __slots__ = ("median_us", "spread", "samples", "share", "asked_ms",
                 "wall_ms", "repetitions")

    def __init__(self, samples_us, share=1.0, asked_ms=None, wall_ms=None,
                 repetitions=None):
        self.share = share
        self.samples = sorted(samples_us)
        self.median_us = round(statistics.median(self.samples), 3)
        self.spread = ((self.samples[-1] - self.samples[0]) / self.median_us
                       if self.median_us > 0 else 0.0)
        self.asked_ms = asked_ms
        self.wall_ms = wall_ms
        self.repetitions = repetitions


class TimingLedger:
    """What a backend's timing calls asked for and what they cost: calls,
    asked and wall milliseconds, and the calls topped up to the floor of
    repetitions (see MIN_REPETITIONS)."""

    def __init__(self):
        self.calls = 0
        self.asked_ms = 0.0
        self.wall_ms = 0.0
        self.topped_up = 0
        self.fewest_repetitions = None

    def add(self, timing, topped_up=False):
        self.calls += 1
        self.asked_ms += timing.asked_ms or 0.0
        self.wall_ms += timing.wall_ms or 0.0
        self.topped_up += bool(topped_up)
        if timing.repetitions is not None:
            self.fewest_repetitions = timing.repetitions if \
                self.fewest_repetitions is None else \
                min(self.fewest_repetitions, timing.repetitions)

    def summary(self):
        return {"calls": self.calls, "asked_ms": round(self.asked_ms, 1),
                "wall_ms": round(self.wall_ms, 1),
                "wall_over_asked": (round(self.wall_ms / self.asked_ms, 2)
                                    if self.asked_ms else None),
                "topped_up_to_min_repetitions": self.topped_up,
                "fewest_repetitions": self.fewest_repetitions}


# The fewest timed repetitions a GPU timing call has. do_bench sizes its
# repetitions by time (int(rep / its estimate of one launch), at least 1):
# a kernel slower than a fifth of the asked rep gets fewer than five, one
# when slower than the rep, a median with no spread that the tuner would
# weigh like a call of many repetitions. Five is the fewest whose
# quartiles (what Timing keeps, see GpuBackend.QUANTILES) are three
# different repetitions.
MIN_REPETITIONS = 5
# do_bench's estimate of one launch includes the L2 flush before it (about
# 0.05 ms on an H200), so it runs fewer repetitions than rep / median; a
# kernel slow enough to get fewer than MIN_REPETITIONS takes at least a
# fifth of the rep (2 ms for a screen's 10 ms), next to which the flush is
# a few per cent: the median is taken this much longer to count them.
_FLOOR_MARGIN = 1.1


class Watchdog:
    """Guards a block (a candidate's launch in the tuning process): when it
    is still running `limit_s` after it began, `message` is logged once,
    as a warning, from a thread of its own. A launch that hangs inside the
    process cannot be stopped there (the CUDA context is the process's);
    in worker processes the pool stops it (runtime/parallel.py)."""

    def __init__(self, limit_s, message):
        self.limit_s = limit_s
        self.message = message
        self.fired = False
        self._timer = None

    def _expired(self):
        self.fired = True
        logs.get("tuning").warning(self.message)

    def __enter__(self):
        if self.limit_s:
            self._timer = threading.Timer(self.limit_s, self._expired)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc):
        if self._timer is not None:
            self._timer.cancel()


def _versions():
    import triton
    try:
        import torch
        torch_version = torch.__version__
        cuda_version = torch.version.cuda or ""
    except ImportError:
        torch_version, cuda_version = "", ""
    return {"triton_version": triton.__version__,
            "torch_version": torch_version, "cuda_version": cuda_version}


def _error_types():
    """Triton's and torch's exception types, by failure kind. Imported where
    they are defined (triton.runtime.errors, triton.compiler.errors) and
    looked up defensively: each exists in Triton 3.6 to 3.9, but a missing
    one must not stop the runtime."""
    global _ERROR_TYPES
    if _ERROR_TYPES is None:
        import importlib

        def collect(*names):
            found = []
            for module_name, attr in names:
                try:
                    module = importlib.import_module(module_name)
                except ImportError:
                    continue
                cls = getattr(module, attr, None)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append(cls)
            return tuple(found)

        _ERROR_TYPES = {
            "OUT_OF_RESOURCES": collect(
                ("triton.runtime.errors", "OutOfResources"),
                ("torch", "OutOfMemoryError"),
                ("torch.cuda", "OutOfMemoryError")),
            "COMPILE_ERROR": collect(
                ("triton.compiler.errors", "CompilationError"),
                ("triton.runtime.errors", "PTXASError")),
            "INTERPRETER": collect(
                ("triton.runtime.errors", "InterpreterError")),
        }
    return _ERROR_TYPES


_ERROR_TYPES = None

# CUDA errors after which the context is unusable: every later CUDA call in
# the process fails with the same error, whatever it does.
_CONTEXT_FATAL = ("illegal memory access", "illegal address",
                  "illegal instruction", "misaligned address",
                  "unspecified launch failure", "device-side assert",
                  "hardware stack error", "invalid program counter",
                  "cuda_error_illegal_address", "cuda_error_launch_failed",
                  "cuda_error_illegal_instruction",
                  "cuda_error_misaligned_address", "cuda_error_assert")


def corrupts_context(exc):
    """Whether `exc` reports a CUDA error that leaves the context unusable
    (an illegal address, a device-side assert, ...)."""
    if not isinstance(exc, RuntimeError):  # torch.AcceleratorError is one
        return False
    text = str(exc).lower()
    return "cuda" in text and any(s in text for s in _CONTEXT_FATAL)


def classify_failure(exc):
    """Maps an exception raised by compiling or running a candidate to a
    FailureKind name of the schema."""
    types = _error_types()
    if isinstance(exc, types["OUT_OF_RESOURCES"]):
        return "OUT_OF_RESOURCES"
    if isinstance(exc, types["COMPILE_ERROR"]):
        return "COMPILE_ERROR"
    if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
        # A CUDA allocation that fails outside torch's allocator.
        return "OUT_OF_RESOURCES"
    if isinstance(exc, types["INTERPRETER"]) and (
            _raised_in_triton_language(exc.__cause__)
            or _failed_static_assert(exc.__cause__)):
        # The interpreter runs the language's checks (block shapes, types)
        # as the kernel runs; compiled for a GPU they fail the compile.
        return "COMPILE_ERROR"
    return "RUNTIME_ERROR"


def _innermost_frame(exc):
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame


def _failed_static_assert(exc):
    """A tl.static_assert that failed under the interpreter, which raises a
    plain AssertionError from its stand-in for static_assert; compiled for
    a GPU it is a compile-time assertion failure."""
    if not isinstance(exc, AssertionError) or exc.__traceback__ is None:
        return False
    return "static_assert" in _innermost_frame(exc).f_code.co_name


def _raised_in_triton_language(exc):
    if exc is None or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return "/triton/language/" in path


class Backend(abc.ABC):
    """What the package asks of a backend: its `name` ("gpu" takes the GPU
    paths: device locks by GPU, worker processes per GPU, do_bench
    arguments), its torch `device`, `device_key()` (the device part of a
    cache key), `versions()` (provenance), `synchronize()`,
    `describe_timing()` (provenance's method), `timing_ledger()` and
    `time(run, setup)`. The class attributes are defaults a backend
    overrides where it differs."""
    name = "abstract"
    warmup = 1
    repetitions = 3
    # Whether time() takes share=: a call that asks for that share of the
    # full call's warm-up and repetition time (the tuner screens with
    # short calls where it can).
    scalable = False
    # Config fields this backend's runs do not depend on: configs that
    # differ only in them run the same code, and the tuner times them as
    # one (the smallest of them wins for all).
    ignored_config_fields = ()

    @property
    def device(self):
        """The torch device whose tensors this backend's kernels take."""
        import torch
        return torch.device("cpu")

    @abc.abstractmethod
    def device_key(self):
        """The device part of a cache key (its Triton version included)."""

    def versions(self):
        return _versions()

    def synchronize(self):
        pass

    def describe_timing(self, warmup=None, repetitions=None):
        """How this backend times a launch, in words (recorded with each
        entry: see Provenance.method)."""
        return f"{self.name} ({type(self).__name__})"

    def timing_ledger(self):
        """This backend's TimingLedger (every time() call is added)."""
        ledger = getattr(self, "_ledger", None)
        if ledger is None:
            ledger = self._ledger = TimingLedger()
        return ledger

    @abc.abstractmethod
    def time(self, run, setup=None):
        """Times `run` (one launch); returns a Timing in microseconds.
        `setup`, when given, runs before every repetition (restoring the
        arguments of a kernel that updates them in place) and is not part
        of the time."""


class InterpreterBackend(Backend):
    """Wall-clock timing of the Triton interpreter. Few repetitions: one
    interpreted launch costs milliseconds to seconds."""

    name = "interpreter"
    # The interpreter runs a kernel's Python with numpy: launch parameters
    # change nothing.
    ignored_config_fields = ("num_warps", "num_stages", "num_ctas",
                             "maxnreg", "ir_override")

    def __init__(self, warmup=0, repetitions=3):
        self.warmup = warmup
        self.repetitions = repetitions

    def device_key(self):
        import triton
        return f"cpu/triton-interpreter/triton-{triton.__version__}"

    def describe_timing(self, warmup=None, repetitions=None):
        return (f"interpreter wall clock, warmup {self.warmup}, "
                f"{self.repetitions} repetitions, median")

    def time(self, run, setup=None):
        began = time.perf_counter()
        for _ in range(self.warmup):
            if setup is not None:
                setup()
            run()
        samples = []
        for _ in range(self.repetitions):
            if setup is not None:
                setup()
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1e6)
        # Asked for by count, not time: what the timed repetitions took.
        timing = Timing(samples, asked_ms=round(sum(samples) / 1e3, 3),
                        wall_ms=round((time.perf_counter() - began) * 1e3,
                                      3),
                        repetitions=len(samples))
        self.timing_ledger().add(timing)
        return timing


class GpuBackend(Backend):
    """Times with triton.testing.do_bench: CUDA events, warm-up and
    repetitions sized by time, and the driver's own L2 flush before every
    repetition."""

    name = "gpu"
    scalable = True

    def __init__(self, warmup_ms=25.0, rep_ms=100.0, device=None):
        import torch
        if not torch.cuda.is_available():
            raise BackendError("the gpu backend needs a CUDA device; none is "
                               "visible (use --autotune_backend=interpreter)")
        if interpreter_selected():
            raise BackendError(
                "--autotune_backend=gpu: TRITON_INTERPRET=1 is set, so "
                "kernels run on Triton's interpreter; unset it")
        self.torch = torch
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self._device = torch.device(device)
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms

    @property
    def device(self):
        return self._device

    def device_key(self):
        torch = self.torch
        props = torch.cuda.get_device_properties(self.device)
        import triton
        return (f"{props.name}/sm_{props.major}{props.minor}/"
                f"sms={props.multi_processor_count}/triton-{triton.__version__}")

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)

    def describe_timing(self, warmup_ms=None, rep_ms=None):
        warmup_ms = self.warmup_ms if warmup_ms is None else warmup_ms
        rep_ms = self.rep_ms if rep_ms is None else rep_ms
        return (f"gpu triton.testing.do_bench, warmup {warmup_ms} ms, "
                f"rep {rep_ms} ms, quantiles "
                f"{'/'.join(map(str, self.QUANTILES))}, L2 flushed, "
                "no CUDA graphs")

    # The quartiles, not the extremes: GPU timings have rare slow outliers
    # (a clock change, another process), and the noise estimate that decides
    # which candidates tie (selection.relative_noise) must not count them, or
    # every config ties with the fastest and duels decide everything.
    QUANTILES = (0.25, 0.5, 0.75)

    def _do_bench(self):
        from triton.testing import do_bench
        return do_bench

    def _bench_ms(self, fn, share=1.0):
        do_bench = self._do_bench()
        with self.torch.cuda.device(self.device):
            # quantiles (not return_mode="all"): the same call on Triton 3.6+.
            q1, median, q3 = do_bench(fn, warmup=self.warmup_ms * share,
                                      rep=self.rep_ms * share,
                                      quantiles=list(self.QUANTILES))
        return q1, median, q3

    def time(self, run, setup=None, share=1.0):
        """share: of the warm-up and repetition times (a screen's call).
        Never fewer than MIN_REPETITIONS repetitions: a do_bench call
        whose kernel is too slow for its rep is topped up by a run of
        MIN_REPETITIONS timed repetitions, whose samples the Timing is."""
        asked_ms = (self.warmup_ms + self.rep_ms) * share
        start = time.perf_counter()
        topped_up = False
        if setup is None:
            q1, median, q3 = self._bench_ms(run, share)
            samples = [q1, median, q3]
            # do_bench's own count: int(rep / estimate), at least 1, the
            # estimate being the median plus the L2 flush (_FLOOR_MARGIN).
            repetitions = max(1, int(self.rep_ms * share
                                     / (_FLOOR_MARGIN * median))) \
                if median > 0 else None
            if repetitions is not None and repetitions < MIN_REPETITIONS:
                with self.torch.cuda.device(self.device):
                    samples, repetitions = self._bench_with_setup(
                        run, None, share, repetitions=MIN_REPETITIONS)
                topped_up = True
        else:
            with self.torch.cuda.device(self.device):
                samples, repetitions = self._bench_with_setup(run, setup,
                                                              share)
        wall_ms = (time.perf_counter() - start) * 1e3
        timing = Timing([v * 1e3 for v in samples], share,
                        asked_ms=round(asked_ms, 3),
                        wall_ms=round(wall_ms, 3), repetitions=repetitions)
        self.timing_ledger().add(timing, topped_up)
        return timing

    def _flush_buffer(self):
        """What do_bench writes to empty the L2 cache before a repetition:
        the driver's own buffer where this Triton has one."""
        try:
            from triton import runtime
            return runtime.driver.active.get_empty_cache_for_benchmark()
        except Exception:  # an older driver interface: a buffer of our own
            return self.torch.empty(256 * 1024 * 1024, dtype=self.torch.int8,
                                    device=self.device)

    def _bench_with_setup(self, run, setup, share=1.0, repetitions=None):
        """([q1, median, q3] in ms of `run` alone, repetitions timed),
        `setup` (when given) before every repetition; with `repetitions`,
        that many timed repetitions of a launch that ran already (no
        estimate, no warm-up), else as many as the share of rep_ms holds,
        at least MIN_REPETITIONS.

        do_bench has no untimed set-up step, and timing set-up + launch
        then subtracting the set-up alone measures the set-up's host sync
        and clones, and clamps fast kernels at 0. Here CUDA events bracket
        the launch only; the set-up and the L2 flush run before the start
        event, as Triton's own restore_value runs outside its measured
        loop."""
        cuda = self.torch.cuda
        flush = self._flush_buffer()

        def prepare():
            if setup is not None:
                setup()
        if repetitions is None:
            prepare()
            run()
            self.synchronize()
            start, end = cuda.Event(enable_timing=True), \
                cuda.Event(enable_timing=True)
            estimate_ms = 0.0
            for _ in range(3):
                prepare()
                flush.zero_()
                start.record()
                run()
                end.record()
                end.synchronize()
                estimate_ms += start.elapsed_time(end) / 3
            estimate_ms = max(estimate_ms, 1e-3)
            # Each repetition syncs for its set-up: fewer than do_bench's.
            repetitions = int(min(max(self.rep_ms * share / estimate_ms,
                                      MIN_REPETITIONS), 200))
            warmups = int(min(max(self.warmup_ms * share / estimate_ms, 1),
                              50))
            for _ in range(warmups):
                prepare()
                run()
        pairs = [(cuda.Event(enable_timing=True),
                  cuda.Event(enable_timing=True)) for _ in range(repetitions)]
        for begin, finish in pairs:
            prepare()
            flush.zero_()
            begin.record()
            run()
            finish.record()
        self.synchronize()
        samples = sorted(begin.elapsed_time(finish) for begin, finish in pairs)
        quartiles = [statistics.quantiles(samples, n=4)[0]
                     if len(samples) > 1 else samples[0],
                     statistics.median(samples),
                     statistics.quantiles(samples, n=4)[2]
                     if len(samples) > 1 else samples[0]]
        return quartiles, repetitions


def gpu_driver_visible():
    """Whether a GPU driver's device files exist and are not hidden by the
    *_VISIBLE_DEVICES variables; a machine without them has no GPU for
    Triton, and is known so without importing torch."""
    hidden = ("", "-1")
    nvidia = (os.path.exists("/dev/nvidiactl")
              and os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip()
              not in hidden)
    amd = (os.path.exists("/dev/kfd")
           and os.environ.get("HIP_VISIBLE_DEVICES", "0").strip()
           not in hidden)
    return nvidia or amd


def select_interpreter_early(backend):
    """Called by `import autotune`, before any kernel is decorated (Triton
    decides then whether a kernel is interpreted): sets TRITON_INTERPRET=1
    unless it is set already, the backend flag says gpu, or a GPU is
    there; --autotune_backend=interpreter forces it."""
    if os.environ.get("TRITON_INTERPRET") is not None:
        return
    if backend == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
        return
    if backend == "gpu":
        return
    if gpu_driver_visible():
        # A driver is there; torch says whether it has a usable device.
        try:
            import torch
            if torch.cuda.is_available():
                return
        except ImportError:
            pass
    os.environ["TRITON_INTERPRET"] = "1"


def interpreter_selected():
    """Whether Triton runs kernels on its interpreter (TRITON_INTERPRET is
    read when a kernel is decorated)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in (
        "1", "true", "on", "yes")



def gpu_available():
    if interpreter_selected():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def select_backend(name="auto"):
    if name not in BACKEND_NAMES:
        raise BackendError(f"unknown backend {name!r}; expected one of "
                           f"{', '.join(BACKEND_NAMES)}")
    if name == "interpreter" and not interpreter_selected():
        # Kernels were decorated for the GPU: they would compile for it and
        # be timed without synchronising.
        raise BackendError(
            "--autotune_backend=interpreter: kernels were not decorated "
            "under Triton's interpreter; put the flag in AUTOTUNE_FLAGS (or "
            "set TRITON_INTERPRET=1) before `import autotune` and the kernels")
    if name == "gpu" or (name == "auto" and gpu_available()):
        return GpuBackend()
    return InterpreterBackend()
