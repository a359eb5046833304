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
