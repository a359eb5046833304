"""Small real Triton kernels for the runtime tests: fast in the interpreter,
with configs that fail in each way the tuner must handle."""
import torch
import triton
import triton.language as tl

import autotune
from autotune import Config


@triton.jit
def _scale(v, alpha):
    return v * alpha


@triton.jit
def axpb_kernel(x, y, n, alpha, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    out = _scale(v, alpha) + 1.0
    if BUG:
        out = out + 0.5  # a config that computes the wrong result
    tl.store(y + offs, out, mask=m)


GOOD = [Config({"BLOCK": 16, "BUG": 0}, num_warps=2),
        Config({"BLOCK": 32, "BUG": 0}, num_warps=4)]
WRONG = Config({"BLOCK": 64, "BUG": 1}, num_warps=4)
CRASH = Config({"BLOCK": 24, "BUG": 0}, num_warps=4)  # arange needs 2^k


def make_tuner(configs=None, **options):
    return autotune.tune(axpb_kernel, configs or GOOD + [WRONG, CRASH],
                         key=["n"], **options)


def run(tuned, n, alpha=2.0):
    x = torch.arange(n, dtype=torch.float32, device=autotune.device())
    y = torch.empty_like(x)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, alpha)
    return x, y


def used_config(tuned, n):
    """The short form of the config `tuned` uses at size n."""
    x = torch.zeros(n)
    return tuned.lookup_config(x, x, n, 2.0).short()


def run_sizes(tuned, sizes):
    """Runs `tuned` at each size; returns {size: the config it used}."""
    used = {}
    for n in sizes:
        run(tuned, n)
        used[n] = used_config(tuned, n)
    return used


# A module-level tuned kernel: worker processes find it by name.
AXPB = make_tuner(GOOD)
