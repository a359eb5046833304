"""A compile for a GPU target, held against that target's limits: the
Result every compile of the project reports (the compile check, compile
requests, compile-ahead), the registers and stack from the wheel's
cuobjdump, and the shared memory, registers and threads a block may use.
"""
import dataclasses
import os
import re
import subprocess
import tempfile
import time

# Per compute capability: dynamic shared memory per block (the opt-in
# maximum, which Triton requests), registers per block, threads per block.
# From the CUDA programming guide's table of compute capabilities.
_SHARED_OPTIN = {70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376,
                 87: 166912, 89: 101376, 90: 232448, 100: 232448,
                 120: 101376}
REGISTERS_PER_BLOCK = 65536
THREADS_PER_BLOCK = 1024

@dataclasses.dataclass(frozen=True)
class Target:
    name: str          # sm_90
    capability: int    # 90

    @property
    def shared_limit(self):
        return _SHARED_OPTIN.get(self.capability, 49152)


@dataclasses.dataclass
class Result:
    target: str
    kernel: str
    signature: str
    config: str
    ok: bool
    failure: str = "NONE"      # COMPILE_ERROR or OUT_OF_RESOURCES
    reason: str = ""
    shared: int = 0
    registers: int = 0
    stack: int = 0
    seconds: float = 0.0


# -- compiled ------------------------------------------------------------------

def _tool(name):
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends",
                        "nvidia", "bin", name)
    return path if os.path.exists(path) else None


def resource_usage(cubin):
    """(registers, stack bytes) of a cubin, from the wheel's cuobjdump."""
    tool = _tool("cuobjdump")
    if tool is None:
        return 0, 0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name],
                             capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _failed(result, exc, start):
    """`result` as a failed compile: the failure classified as the runtime
    classifies it (a compile's runtime error is a compile error), the
    reason the exception's last line."""
    from autotune.measure import backends  # loads torch: only on a failure
    result.ok = False
    result.failure = backends.classify_failure(exc)
    if result.failure == "RUNTIME_ERROR":
        result.failure = "COMPILE_ERROR"
    lines = [ln.strip() for ln in str(exc).strip().splitlines()
             if ln.strip()]
    result.reason = (f"{type(exc).__name__}: "
                     + (lines[-1] if lines else ""))[:200]
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def checked(result, compiled, target, num_warps, start):
    """`result` of a compile that succeeded: its shared memory, registers
    and stack, its seconds since `start`, held against the target's
    limits (apply_limits)."""
    result.shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    result.registers, result.stack = resource_usage(
        compiled.asm.get("cubin", b""))
    result.seconds = round(time.perf_counter() - start, 3)
    return apply_limits(result, target, num_warps)


def apply_limits(result, target, num_warps, shared_limit=None):
    """Marks a compiled config OUT_OF_RESOURCES when it needs more than the
    target has per block: what a launch there would refuse."""
    shared_limit = shared_limit or target.shared_limit
    threads = num_warps * 32
    problems = []
    if result.shared > shared_limit:
        problems.append(f"shared memory {result.shared} B > "
                        f"{shared_limit} B per block")
    if threads > THREADS_PER_BLOCK:
        problems.append(f"{threads} threads > {THREADS_PER_BLOCK} per block")
    if result.registers * threads > REGISTERS_PER_BLOCK:
        problems.append(f"{result.registers} registers x {threads} threads > "
                        f"{REGISTERS_PER_BLOCK} per block")
    if problems:
        result.ok = False
        result.failure = "OUT_OF_RESOURCES"
        result.reason = "; ".join(problems)
    return result


def _quiet_fp_fusion_notice():
    # Triton 3.9 warns on every compile that TRITON_DEFAULT_FP_FUSION is
    # unset; the check compiles with whatever default a launch would use.
    import warnings
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")


