"""A tiled fp16 matmul with a config the interpreter runs but a GPU
compiler rejects: a tl.dot tile below the hardware minimum (K=8)."""
import triton
import triton.language as tl

import autotune
from autotune import Config

FITS = Config({"BLOCK": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2)
K_TOO_SMALL = Config({"BLOCK": 16, "BLOCK_K": 8}, num_warps=4, num_stages=2)


@autotune.autotune(configs=[FITS, K_TOO_SMALL],
                   key=["n"])
@triton.jit
def square_matmul_kernel(a, b, c, n, BLOCK: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(n, BLOCK_K)):
        kk = k * BLOCK_K + rk
        x = tl.load(a + rm[:, None] * n + kk[None, :],
                    mask=(rm[:, None] < n) & (kk[None, :] < n), other=0.0)
        y = tl.load(b + kk[:, None] * n + rn[None, :],
                    mask=(kk[:, None] < n) & (rn[None, :] < n), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * n + rn[None, :], acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < n) & (rn[None, :] < n))


COMPILE_SIGNATURES = {"square_matmul_kernel": [
    {"a": "*fp16", "b": "*fp16", "c": "*fp16", "n": "i32"}]}


# Three fusions of a kernel with an integer and a string constexpr that the
# launch passes (Triton versions give them different attribute entries) and
# a tuned one: what tests/test_compile_ahead.py builds and serves.
SCALE_CONFIGS = [Config({"BLOCK": 64}, num_warps=1, num_stages=1),
                 Config({"BLOCK": 128}, num_warps=2, num_stages=1)]


@autotune.autotune(configs=SCALE_CONFIGS, key=["n"])
@triton.jit
def scale_kernel(x, y, n, SCALE: tl.constexpr, MODE: tl.constexpr,
                 BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0) * SCALE
    if MODE == "relu":
        v = tl.maximum(v, 0.0)
    tl.store(y + offs, v, mask=offs < n)


SCALE_SIZES = (100, 1000, 4096)


def scale_launches():
    """One launch per fusion (a size each); returns how many."""
    import torch
    dev = autotune.device()
    for n in SCALE_SIZES:
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        scale_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](
            x, y, n, SCALE=3, MODE="relu")
    return len(SCALE_SIZES)
