"""SiLU as a torch.autograd.Function whose forward and backward are tuned
kernels; the input is a leaf that requires grad and is saved for
backward."""
import torch
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1),
           triton.Config({"BLOCK": 64}, num_warps=2)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def silu_fwd_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    tl.store(y + offs, v * tl.sigmoid(v), mask=offs < n)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def silu_bwd_kernel(x, dy, dx, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    s = tl.sigmoid(v)
    g = tl.load(dy + offs, mask=offs < n)
    tl.store(dx + offs, g * (s + v * s * (1.0 - s)), mask=offs < n)


class Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        n = x.numel()
        silu_fwd_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
            x, y, n)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, _ = ctx.saved_tensors
        dx = torch.empty_like(x)
        n = x.numel()
        silu_bwd_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
            x, dy.contiguous(), dx, n)
        return dx


def _inputs():
    return torch.linspace(-3, 3, 70)


def run():
    x = _inputs().requires_grad_()
    y = Silu.apply(x)
    (y * y).sum().backward()
    return {"y": y.detach(), "dx": x.grad}


def expected():
    x = _inputs().requires_grad_()
    y = torch.nn.functional.silu(x)
    (y * y).sum().backward()
    return {"y": y.detach(), "dx": x.grad}
