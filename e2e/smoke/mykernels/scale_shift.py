"""y = x * scale + shift, elementwise: the workspace's own tuned kernel."""
import autotune  # first: picks Triton's interpreter when there is no GPU

import torch
import triton
import triton.language as tl

CONFIGS = [autotune.Config({"BLOCK": b}, num_warps=w)
           for b in (32, 128) for w in (2, 4)]


def _reference(x, y, n, scale, shift, **_):
    y.copy_(x * scale + shift)


@autotune.autotune(configs=CONFIGS, key=["n"], reference=_reference,
                   outputs=["y"])
@triton.jit
def scale_shift_kernel(x, y, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    tl.store(y + offs, v * scale + shift, mask=mask)


def scale_shift(x, scale, shift):
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    scale_shift_kernel[grid](x, y, n, scale, shift)
    return y
