"""Arguments that a careless restore breaks: a leaf that requires grad, a
stride-0 expanded bias, and an inference tensor updated in place."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 8}, num_warps=1),
                          triton.Config({"BLOCK": 32}, num_warps=2)],
                 key=["rows", "cols"])
@triton.jit
def add_rows_kernel(x, b, out, rows, cols, sbr, sbc, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < cols
    v = tl.load(x + r * cols + c, mask=m) + tl.load(b + r * sbr + c * sbc,
                                                     mask=m)
    tl.store(out + r * cols + c, v, mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 8}, num_warps=1),
                          triton.Config({"BLOCK": 32}, num_warps=2)],
                 key=["n"])
@triton.jit
def double_inplace_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, 2.0 * tl.load(x + offs, mask=offs < n), mask=offs < n)


def add_rows(x, b, out):
    rows, cols = x.shape
    grid = lambda meta: (rows, triton.cdiv(cols, meta["BLOCK"]))  # noqa: E731
    add_rows_kernel[grid](x, b, out, rows, cols, *b.stride())
    return out


def _inputs():
    g = torch.Generator(torch.get_default_device()).manual_seed(4)
    return torch.randn(5, 20, generator=g), torch.randn(1, 20, generator=g)


def run():
    x, bias = _inputs()
    leaf = x.clone().requires_grad_()
    expanded = bias.expand(5, 20)
    out = add_rows(leaf.detach(), expanded, torch.empty(5, 20))
    # The leaf itself (requires grad) as an argument, and as the output.
    out_leaf = torch.zeros(5, 20, requires_grad=True)
    add_rows(leaf, expanded, out_leaf)
    with torch.inference_mode():
        inf = x.clone()
    double_inplace_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](
        inf, 100)
    with torch.inference_mode():
        y = x.clone()
        double_inplace_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](
            y, 100)
    assert leaf.requires_grad and leaf.is_leaf and leaf._version == 0
    return {"out": out, "out_leaf": out_leaf.detach().clone(),
            "inf": inf.clone(), "inf_mode": y.clone()}


def expected():
    x, bias = _inputs()
    return {"out": x + bias, "out_leaf": x + bias, "inf": 2 * x,
            "inf_mode": 2 * x}
