"""A kernel that writes scratch space keeps its tuning, from the user's
side: a pytest project whose loss kernel stores one partial sum per block
(how many, and what, depends on BLOCK) for the host to add up, with no
reference= and no outputs=, tuned by `pytest --autotune-update` through
the zero-edit drop-in (`@triton.autotune`, untouched) and through
`@autotune.autotune`. Every config computes the same loss, so none may be
dropped as a wrong result; beside the scratch, a real output that one
config gets wrong still drops that config.
"""
import textwrap

import pytest

from autotune import codec
from test_pytest_plugin import outcomes, run_pytest

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

CACHE = "testdata/kernels.textproto"

KERNELS = '''
import autotune
import torch
import triton
import triton.language as tl

BLOCKS = [triton.Config({"BLOCK": b}, num_warps=w)
          for b, w in ((16, 1), (32, 2), (64, 2), (128, 4))]


# As a library writes it: the drop-in tunes it, unedited.
@triton.autotune(configs=BLOCKS, key=["n"])
@triton.jit
def dropin_loss_kernel(x, partials, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(partials + tl.program_id(0), tl.sum(v * v, axis=0))


@autotune.autotune(configs=BLOCKS, key=["n"])
@triton.jit
def ported_loss_kernel(x, partials, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(partials + tl.program_id(0), tl.sum(v * v, axis=0))


# Also writes each square: BLOCK=64 gets them wrong, the other three agree.
@autotune.autotune(configs=BLOCKS, key=["n"])
@triton.jit
def squares_kernel(x, squares, partials, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    if BLOCK == 64:
        v = v * 2.0
    tl.store(squares + offs, v * v, mask=offs < n)
    tl.store(partials + tl.program_id(0), tl.sum(v * v, axis=0))


def loss(kernel, x):
    n = x.numel()
    partials = torch.zeros(triton.cdiv(n, 16))
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, partials, n)
    return partials.sum()


def squares(x):
    n = x.numel()
    out, partials = torch.zeros_like(x), torch.zeros(triton.cdiv(n, 16))
    squares_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        x, out, partials, n)
    return out, partials.sum()
'''

TESTS = '''
import torch
from kernels import dropin_loss_kernel, loss, ported_loss_kernel, squares

X = torch.arange(1000, dtype=torch.float32) / 100


def test_dropin_loss():
    assert torch.allclose(loss(dropin_loss_kernel, X), (X * X).sum())


def test_ported_loss():
    assert torch.allclose(loss(ported_loss_kernel, X), (X * X).sum())


def test_squares():
    out, total = squares(X)
    assert torch.allclose(out, X * X) and torch.allclose(total, (X * X).sum())
'''

INI = f'''
[tool.pytest.ini_options]
autotune_cache = "{CACHE}"
autotune_dropin = true
'''


def test_scratch_output_keeps_every_config_and_a_wrong_one_is_dropped(
        pytester):
    (pytester.path / "testdata").mkdir()
    (pytester.path / "kernels.py").write_text(textwrap.dedent(KERNELS))
    (pytester.path / "test_loss.py").write_text(textwrap.dedent(TESTS))
    (pytester.path / "pyproject.toml").write_text(textwrap.dedent(INI))
    result = run_pytest(pytester, "-p", "pytest_autotune",
                        "--autotune-update")
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 3}
    entries = {e.key.kernel: e for e in
               codec.load_results(str(pytester.path / CACHE))}
    assert sorted(entries) == ["dropin_loss_kernel", "ported_loss_kernel",
                               "squares_kernel"]
    for name in ("dropin_loss_kernel", "ported_loss_kernel"):
        candidates = entries[name].candidates
        assert len(candidates) == 4
        assert all(c.failure == "NONE" and c.run_time_us > 0
                   for c in candidates), (name, candidates)
    # One note per kernel names the buffer taken for scratch space.
    assert result.output.count("values into partials and no majority") >= 3
    # Beside scratch, a real output is still checked.
    judged = {c.config.kwargs["BLOCK"]: c for c in
              entries["squares_kernel"].candidates}
    assert judged[64].failure == "WRONG_RESULT"
    assert judged[64].failure_detail.startswith("squares: ")
    assert "3 of 4 configs agree" in judged[64].failure_detail
    assert all(judged[b].ok for b in (16, 32, 128))
