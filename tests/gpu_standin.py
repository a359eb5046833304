"""An sm_90 machine as far as Triton's launcher asks, for child processes
that check GPU launch paths on the CPU (TRITON_INTERPRET=0)."""


class FakeDriver:
    """The active driver of an sm_90 machine, as far as Triton's launcher
    asks: device, stream, target."""

    def __init__(self):
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def is_active(self):
        return True


class FakeKernel:
    """What a stubbed compile returns: launchable, launches nothing."""

    def __init__(self):
        import types
        self.function = None
        self.packed_metadata = None
        self.metadata = types.SimpleNamespace(shared=0)
        self.asm = {"cubin": b""}

    def launch_metadata(self, *args):
        return None

    def run(self, *args):
        return None


def stand_in_gpu_backend():
    """A backend for hits only: the interpreter's device key (so caches
    tuned on the interpreter answer) with kernels that are JITFunctions
    (not refused as interpreted)."""
    import triton

    from autotune.measure import backends

    from autotune.measure.fake_backend import FakeBackend
    return FakeBackend(
        name="gpu-standin", device="cpu",
        device_key=f"cpu/triton-interpreter/triton-{triton.__version__}",
        versions=backends.InterpreterBackend().versions())


def count_launch_compiles():
    """An sm_90 driver stand-in and a compile that goes through Triton's own
    cache lookup (a real triton.compile) and then hands the launcher a
    stand-in kernel; returns the list each launch's compile is named in."""
    import triton
    import triton.compiler
    from triton.runtime import driver

    driver.set_active(FakeDriver())
    real_compile = triton.compiler.compile
    launches = []

    def compile(src, target=None, options=None, **kw):
        launches.append(src.name)
        real_compile(src, target=target, options=options, **kw)
        return FakeKernel()
    triton.compiler.compile = triton.compile = compile
    return launches
