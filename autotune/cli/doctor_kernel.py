"""The one tiny kernel the GPU runner doctor compiles (and, on a GPU,
launches): its own module, because Triton reads a kernel's source and
globals (`tl`) from the module that defines it. Plain Python function,
wrapped in a JITFunction by the doctor, so it compiles for a GPU target
under TRITON_INTERPRET=1 too (a machine without a GPU)."""
import triton.language as tl

SIGNATURE = {"x": "*fp32", "n": "i32"}
BLOCK = 16


def add_one(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask) + 1.0, mask=mask)
