"""Two small Triton kernels tuned by rules_autotune (the interpreter runs
them when no GPU is visible). Callers pass tensors on autotune.device():
the GPU, or the CPU for the interpreter."""
import autotune  # before the kernels: selects the interpreter without a GPU
import torch
import triton
import triton.language as tl
from autotune import Config


def scale_shift_reference(x, y, alpha, beta, **_):
    """What every config must write: the tuner compares each with it."""
    y.copy_(x * alpha + beta)


def row_max_reference(x, out, n_cols, **_):
    out.copy_(x[:, :n_cols].max(dim=1).values)


@autotune.autotune(
    configs=[Config({"BLOCK": 32}, num_warps=1, num_stages=2),
             Config({"BLOCK": 64}, num_warps=2, num_stages=2),
             Config({"BLOCK": 128}, num_warps=4, num_stages=2)],
    key=["n"], reference=scale_shift_reference, outputs=["y"])
@triton.jit
def scale_shift_kernel(x, y, n, alpha, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) * alpha + beta,
             mask=mask)


@autotune.autotune(
    configs=[Config({"BLOCK": 32}, num_warps=1, num_stages=2),
             Config({"BLOCK": 64}, num_warps=2, num_stages=2)],
    key=["n_cols"], reference=row_max_reference, outputs=["out"])
@triton.jit
def row_max_kernel(x, out, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * stride + offs, mask=offs < n_cols,
                    other=float("-inf"))
        best = tl.maximum(best, v)
    tl.store(out + row, tl.max(best, axis=0))


def scale_shift(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    scale_shift_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        x, y, n, alpha, beta)
    return y


def row_max(x):
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    row_max_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0))
    return out
