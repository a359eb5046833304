"""Backends: where candidates run and how they are timed.

The tuner only sees this interface: a device key, version facts for
provenance, a way to time a callable, and a way to classify failures.

- GpuBackend: CUDA events, warm-up, an L2 flush before every repetition,
  median of the repetitions.
- InterpreterBackend: Triton's interpreter (TRITON_INTERPRET=1) on the CPU.
  Its timings are not GPU timings, but every flow (tune, dump, load, hit,
  miss, require-complete) runs the same code.
"""
import os
import statistics
import time

BACKEND_NAMES = ("auto", "gpu", "interpreter")


class BackendError(Exception):
    pass


class Timing:
    __slots__ = ("median_us", "spread", "samples")

    def __init__(self, samples_us):
        self.samples = sorted(samples_us)
        self.median_us = round(statistics.median(self.samples), 3)
        self.spread = ((self.samples[-1] - self.samples[0]) / self.median_us
                       if self.median_us > 0 else 0.0)


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


def classify_failure(exc):
    """Maps an exception raised by compiling or running a candidate to a
    FailureKind name of the schema."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "OutOfResources" in names or "OutOfMemoryError" in names:
        return "OUT_OF_RESOURCES"
    if names & {"CompilationError", "CompileTimeAssertionFailure",
                "PTXASError", "MLIRCompilationError"}:
        return "COMPILE_ERROR"
    text = str(exc).lower()
    if "out of resource" in text or "out of memory" in text:
        return "OUT_OF_RESOURCES"
    if "InterpreterError" in names and _raised_in_triton_language(
            exc.__cause__):
        # The interpreter runs the language's checks (block shapes, types)
        # as the kernel runs; compiled for a GPU they fail the compile.
        return "COMPILE_ERROR"
    return "RUNTIME_ERROR"


def _raised_in_triton_language(exc):
    if exc is None or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return "/triton/language/" in path


class Backend:
    name = "abstract"
    warmup = 1
    repetitions = 3

    def device_key(self):
        raise NotImplementedError

    def versions(self):
        return _versions()

    def synchronize(self):
        pass

    def time(self, run):
        """Times `run` (one launch); returns a Timing in microseconds."""
        raise NotImplementedError


class InterpreterBackend(Backend):
    """Wall-clock timing of the Triton interpreter. Few repetitions: one
    interpreted launch costs milliseconds to seconds."""

    name = "interpreter"

    def __init__(self, warmup=0, repetitions=3):
        self.warmup = warmup
        self.repetitions = repetitions

    def device_key(self):
        import triton
        return f"cpu/triton-interpreter/triton-{triton.__version__}"

    def time(self, run):
        for _ in range(self.warmup):
            run()
        samples = []
        for _ in range(self.repetitions):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1e6)
        return Timing(samples)


class GpuBackend(Backend):
    name = "gpu"

    def __init__(self, warmup_ms=25.0, rep_ms=100.0, device=None):
        import torch
        if not torch.cuda.is_available():
            raise BackendError("the gpu backend needs a CUDA device; none is "
                               "visible (use --autotune_backend=interpreter)")
        self.torch = torch
        self.device = torch.device(device or "cuda")
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self._flush = None

    def device_key(self):
        torch = self.torch
        props = torch.cuda.get_device_properties(self.device)
        import triton
        return (f"{props.name}/sm_{props.major}{props.minor}/"
                f"sms={props.multi_processor_count}/triton-{triton.__version__}")

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)

    def _l2_flush(self):
        # Larger than any L2 (H200: 60 MB): every repetition starts cold.
        if self._flush is None:
            self._flush = self.torch.empty(256 * 1024 * 1024 // 4,
                                           dtype=self.torch.int32,
                                           device=self.device)
        self._flush.zero_()

    def time(self, run):
        torch = self.torch
        run()
        self.synchronize()
        # Estimate one launch, then size warm-up and repetitions by time.
        start, end = (torch.cuda.Event(enable_timing=True),
                      torch.cuda.Event(enable_timing=True))
        start.record()
        for _ in range(5):
            self._l2_flush()
            run()
        end.record()
        self.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(self.warmup_ms / estimate))):
            run()
        reps = max(5, min(1000, int(self.rep_ms / estimate)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self._l2_flush()
            starts[i].record()
            run()
            ends[i].record()
        self.synchronize()
        return Timing([s.elapsed_time(e) * 1000.0
                       for s, e in zip(starts, ends)])


def gpu_available():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
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
    if name == "gpu" or (name == "auto" and gpu_available()):
        return GpuBackend()
    return InterpreterBackend()
