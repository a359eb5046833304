"""What the GPU runner doctor's checks look at (autotune/cli/doctor.py):
the machine (Machine: this process's environment, /dev, the driver's
version file, and the probes that ask torch and Triton, each replaceable
by a test's stand-in) and what earlier checks found for the later ones
(State)."""

import dataclasses
import inspect
import os
import re
import shutil
import sysconfig
import warnings

from autotune.host import stamp
from autotune.measure import backends

# The target compiled for without a GPU.
DEFAULT_ARCH = 90


def _torch_gpus():
    """[(name, (major, minor))] of the GPUs torch sees; RuntimeError with
    torch's reason when CUDA does not start."""
    import torch  # heavy: only when the check runs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available:
        reasons = [str(w.message).strip().splitlines()[0] for w in caught
                   if str(w.message).strip()]
        if reasons:
            raise RuntimeError(reasons[0])
        return []
    return [(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
            for i in range(torch.cuda.device_count())]


def _torch_build():
    import torch  # heavy: only when the check runs
    return torch.__version__, torch.version.cuda


class _KnobReads:
    """Stands in for `triton.knobs` while Triton's own get_ptxas runs:
    answers as the real one, and records which `knobs.nvidia` tools it
    read (the rule for which ptxas builds an architecture is Triton's
    own, and differs between versions)."""

    def __init__(self, real):
        self._real = real
        self.read = []
        outer = self

        class _Nvidia:
            def __getattr__(self, name):
                outer.read.append(name)
                return getattr(real.nvidia, name)
        self.nvidia = _Nvidia()

    def __getattr__(self, name):
        return getattr(self._real, name)


def triton_ptxas(arch):
    """(path, CUDA release, variable) of the ptxas Triton builds `arch`
    with, and the variable that points it at another one, both asked of
    the installed Triton: its get_ptxas runs with its knobs watched, and
    the variable is the key of the knob it read. variable is "" when this
    Triton reads none."""
    from triton.backends.nvidia import compiler  # heavy
    watched = _KnobReads(compiler.knobs)
    compiler.knobs = watched
    try:
        # Triton 3.5's get_ptxas takes no architecture (one ptxas for
        # every target); later ones choose by it.
        takes_arch = bool(inspect.signature(compiler.get_ptxas).parameters)
        tool = compiler.get_ptxas(arch) if takes_arch else \
            compiler.get_ptxas()
    finally:
        compiler.knobs = watched._real
    variable = ""
    for name in watched.read:
        knob = inspect.getattr_static(type(watched._real.nvidia), name, None)
        key = getattr(knob, "key", "")
        if key.startswith("TRITON_PTXAS"):
            variable = key
    return tool.path, tool.version, variable


def _python_include():
    """Python.h's folder as Triton's build looks it up."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


@dataclasses.dataclass
class Machine:
    """Where the checks look: this process and machine by default; the
    tests give stand-ins (a folder for /dev, an environment, a driver
    version file, a ptxas answer)."""
    environ: dict = None
    dev: str = "/dev"
    driver_file: str = "/proc/driver/nvidia/version"
    ldconfig: str = "/sbin/ldconfig"  # where Triton runs it from
    smi_driver: object = stamp.driver_version
    gpus: object = _torch_gpus
    torch_build: object = _torch_build
    ptxas: object = triton_ptxas
    include_dir: object = _python_include
    client_env: dict = None  # the client's TRITON_*, when known
    launch: bool = True  # on a GPU, launch the kernel
    running_stamp: object = None  # {field: value} this process runs with
    compiled_kernels: tuple = ()  # directories to check serving from

    def __post_init__(self):
        if self.environ is None:
            self.environ = os.environ

    def stamp_fields(self):
        if self.running_stamp is not None:
            return self.running_stamp()
        return stamp.fields_of(backends.select_backend())

    def which(self, name):
        return shutil.which(name, path=self.environ.get("PATH", os.defpath))

    def in_bazel_test(self):
        return bool(self.environ.get("TEST_TMPDIR")) and \
            bool(self.environ.get("TEST_SRCDIR"))


@dataclasses.dataclass
class State:
    """What earlier checks found, for the later ones."""
    gpus: list = dataclasses.field(default_factory=list)
    driver: str = ""
    nodes: list = dataclasses.field(default_factory=list)

    @property
    def arch(self):
        if self.gpus:
            major, minor = self.gpus[0][1]
            return major * 10 + minor
        return DEFAULT_ARCH

    @property
    def gpu_here(self):
        return bool(self.gpus)


def driver_version(machine):
    """(version, where it was read) of the NVIDIA driver, ("", "") without
    one: the kernel module's version file, else nvidia-smi."""
    try:
        with open(machine.driver_file, errors="replace") as f:
            text = f.read(4096)
    except OSError:
        text = ""
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    if found:
        return found.group(1), machine.driver_file
    version = machine.smi_driver()
    return (version, "nvidia-smi") if version else ("", "")


def nvidia_nodes(dev):
    try:
        return sorted(n for n in os.listdir(dev) if n.startswith("nvidia"))
    except OSError:
        return []
