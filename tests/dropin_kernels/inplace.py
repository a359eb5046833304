"""In-place updates: x += alpha * y with no restore_value (each candidate
runs several times while tuning), and an in-place clamp that names its
argument in restore_value, as Triton asks."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1),
                          triton.Config({"BLOCK": 64}, num_warps=2)],
                 key=["n"])
@triton.jit
def axpy_inplace_kernel(x, y, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=m)
             + alpha * tl.load(y + offs, mask=m), mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1),
                          triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"], restore_value=["x"])
@triton.jit
def clamp_inplace_kernel(x, lo, hi, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    tl.store(x + offs, tl.minimum(tl.maximum(v, lo), hi) + 1.0, mask=m)


def _inputs():
    g = torch.Generator(torch.get_default_device()).manual_seed(2)
    return torch.randn(100, generator=g), torch.randn(100, generator=g)


def run():
    x, y = _inputs()
    n = x.numel()
    axpy_inplace_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        x, y, 3.0, n)
    z = x.clone()
    clamp_inplace_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        z, -1.0, 1.0, n)
    return {"x": x, "z": z}


def expected():
    x, y = _inputs()
    x = x + 3.0 * y
    return {"x": x, "z": x.clamp(-1.0, 1.0) + 1.0}
