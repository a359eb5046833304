"""The one tiny kernel the GPU runner doctor compiles (and, on a GPU,
launches): its own module, because Triton reads a kernel's source and
globals (`tl`) from the module that defines it. The doctor compiles
`add_one_kernel` in a spawned process that imports this module with
TRITON_INTERPRET=0, so it is a GPU kernel there on any machine; the plain
`add_one` is what it wraps in a JITFunction to launch on a GPU."""
import triton
import triton.language as tl

SIGNATURE = {"x": "*fp32", "n": "i32"}
BLOCK = 16


def add_one(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask) + 1.0, mask=mask)


add_one_kernel = triton.jit(add_one)
