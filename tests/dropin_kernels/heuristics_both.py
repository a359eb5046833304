"""triton.heuristics stacked below the autotuner (reading a tuned block
size) and above it (reading a call argument)."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1),
                          triton.Config({"BLOCK": 32}, num_warps=2)],
                 key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def square_kernel(x, y, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        v = tl.load(x + offs)
        tl.store(y + offs, v * v)
    else:
        v = tl.load(x + offs, mask=offs < n)
        tl.store(y + offs, v * v, mask=offs < n)


@triton.heuristics({"UNIT": lambda args: args["scale"] == 1.0})
@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1),
                          triton.Config({"BLOCK": 64}, num_warps=2)],
                 key=["n"])
@triton.jit
def scale_kernel(x, y, scale, n, BLOCK: tl.constexpr, UNIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    if not UNIT:
        v = v * scale
    tl.store(y + offs, v, mask=offs < n)


def _inputs():
    return torch.linspace(-2, 2, 48), torch.linspace(-1, 3, 37)


def run():
    a, b = _inputs()
    sq = torch.empty_like(a)
    square_kernel[lambda meta: (triton.cdiv(48, meta["BLOCK"]),)](a, sq, 48)
    sq_odd = torch.empty_like(b)
    square_kernel[lambda meta: (triton.cdiv(37, meta["BLOCK"]),)](
        b, sq_odd, 37)
    scaled, same = torch.empty_like(b), torch.empty_like(b)
    scale_kernel[lambda meta: (triton.cdiv(37, meta["BLOCK"]),)](
        b, scaled, 2.5, 37)
    scale_kernel[lambda meta: (triton.cdiv(37, meta["BLOCK"]),)](
        b, same, 1.0, 37)
    return {"sq": sq, "sq_odd": sq_odd, "scaled": scaled, "same": same}


def expected():
    a, b = _inputs()
    return {"sq": a * a, "sq_odd": b * b, "scaled": b * 2.5, "same": b}
