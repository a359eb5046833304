"""Layer normalization over the last dimension, with weight and bias."""
import torch
import triton
import triton.language as tl

from autotune import Config, autotune

CONFIGS = [Config({"BLOCK": b}, num_warps=w, num_stages=2)
           for b in (32, 64, 128)
           for w in (2, 4)]


# Argument types for compile checks (tools/compile_check.py).
COMPILE_SIGNATURES = {"layernorm_kernel": [
    {"x": f"*{dt}", "w": f"*{dt}", "b": f"*{dt}", "y": f"*{dt}",
     "n_cols": "i32", "stride": "i32", "eps": "fp32"}
    for dt in ("fp32", "fp16")]}


def _reference(x, w, b, y, n_cols, stride, eps, **_):
    y.copy_(reference(x, w, b, eps))


@autotune(configs=CONFIGS, key=["n_cols"], reference=_reference,
          outputs=["y"])
@triton.jit
def layernorm_kernel(x, w, b, y, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x += row * stride
    y += row * stride
    # Two passes over the row in BLOCK-sized chunks: any row length fits.
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, v - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n_cols
        v = tl.load(x + cols, mask=m, other=0.0).to(tl.float32)
        out = (v - mean) * rstd * tl.load(w + cols, mask=m) + tl.load(
            b + cols, mask=m)
        tl.store(y + cols, out.to(y.dtype.element_ty), mask=m)


def layernorm(x, weight, bias, eps=1e-5):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    layernorm_kernel[(n_rows,)](x, weight, bias, y, n_cols, x.stride(0), eps)
    return y


def reference(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(
        x.float(), (x.shape[-1],), weight.float(), bias.float(), eps
    ).to(x.dtype)
