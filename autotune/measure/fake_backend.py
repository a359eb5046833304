"""A backend that runs nothing of its own: the test double of the backend
interface (autotune.measure.backends.Backend), beside it so that every
part of the package can be exercised without a GPU and without stand-ins
that implement part of the interface.

It times a launch by a clock it is given (a test's fake clock advances by
what each launch says it took) and answers every other question of the
interface from its constructor's arguments: its name (say "gpu" to take
the GPU paths), its torch device, device key and versions.
"""
import contextlib
import time
import types

from autotune.measure.backends import Backend, GpuBackend, Timing

FAKE_VERSIONS = {"triton_version": "fake", "torch_version": "fake",
                 "cuda_version": ""}


class FakeBackend(Backend):
    """name: the backend's name; device_key: the key entries are tuned
    under; device: the torch device its kernels take (the interface's
    default, the CPU, when None); versions: the version facts recorded in
    provenance; clock: a callable returning seconds (time.perf_counter
    unless given); repetitions: timed runs per time() call; warmup_ms,
    rep_ms: the timing a GPU backend would be asked for (the GPU paths
    read them)."""

    def __init__(self, name="fake", device_key="fake/device", device=None,
                 versions=None, clock=time.perf_counter, repetitions=3,
                 warmup_ms=25.0, rep_ms=100.0):
        self.name = name
        self._device_key = device_key
        self._device = device
        self._versions = dict(FAKE_VERSIONS if versions is None
                              else versions)
        self.clock = clock
        self.repetitions = repetitions
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self.timed = 0  # time() calls

    @property
    def device(self):
        return super().device if self._device is None else self._device

    def device_key(self):
        return self._device_key

    def versions(self):
        return dict(self._versions)

    def describe_timing(self, warmup=None, repetitions=None):
        return f"{self.name} (fake clock, {self.repetitions} repetitions)"

    def time(self, run, setup=None):
        """Each repetition: `setup` (untimed), then `run`, timed by the
        clock; the Timing is in microseconds."""
        self.timed += 1
        samples = []
        for _ in range(self.repetitions):
            if setup is not None:
                setup()
            start = self.clock()
            run()
            samples.append((self.clock() - start) * 1e6)
        timing = Timing(samples, asked_ms=round(sum(samples) / 1e3, 3),
                        repetitions=len(samples))
        self.timing_ledger().add(timing)
        return timing


def gpu_backend_without_a_gpu(torch_module=None):
    """The real GpuBackend on cuda:0, built without the GPU its __init__
    asks torch for: its timing is Triton's do_bench, which the caller
    replaces. torch_module stands in for torch (by default one whose
    cuda.device and cuda.synchronize do nothing)."""
    backend = object.__new__(GpuBackend)
    backend.torch = torch_module or types.SimpleNamespace(
        cuda=types.SimpleNamespace(device=lambda d: contextlib.nullcontext(),
                                   synchronize=lambda d=None: None))
    backend._device = "cuda:0"
    backend.warmup_ms, backend.rep_ms = 25.0, 100.0
    return backend
