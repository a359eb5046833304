"""Kernels tuned by this project where torch takes a triton.autotune kernel:
torch.library.wrap_triton and torch.library.triton_op (eager, on Triton's
interpreter), and a library's own subclass of Triton's Autotuner reached
by the drop-in."""
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner as TritonAutotuner

import autotune
from autotune.runtime import triton_patch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1),
           triton.Config({"BLOCK": 32}, num_warps=2)]
_OP_NAMES = itertools.count()


@triton.jit
def add_one_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)


def tuned_kernel():
    return autotune.autotune(configs=CONFIGS, key=["n"])(add_one_kernel)


def grid_for(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def add_one_op(kernel):
    """A custom op launching `kernel` the way torch recommends for ops
    torch.compile can trace: triton_op + wrap_triton."""
    name = f"autotune_test::add_one_{next(_OP_NAMES)}"

    @torch.library.triton_op(name, mutates_args=())
    def add_one(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        torch.library.wrap_triton(kernel)[grid_for(n)](x, y, n)
        return y
    return add_one


def test_the_autotuner_is_a_triton_autotuner():
    kernel = tuned_kernel()
    assert isinstance(kernel, TritonAutotuner)
    assert not triton_patch.is_triton_autotuner(kernel)


def test_wrap_triton_accepts_a_tuned_kernel(session_factory):
    sess = session_factory()
    kernel = tuned_kernel()
    wrapped = torch.library.wrap_triton(kernel)  # raised RuntimeError before
    x, y = torch.arange(40.0), torch.empty(40)
    wrapped[grid_for(40)](x, y, 40)
    assert torch.equal(y, x + 1)
    assert sess.stats.tuned == 1


def test_triton_op_tunes_once_then_hits_with_no_tuning(session_factory,
                                                       tmp_path):
    dump = tmp_path / "kernels.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    add_one = add_one_op(tuned_kernel())
    x = torch.arange(40.0)
    assert torch.equal(add_one(x), x + 1)
    assert sess.stats.tuned == 1 and sess.stats.candidate_benchmarks == 2
    autotune.session().finish()
    # A fresh process's view: a new kernel object and op, the cache loaded.
    sess = session_factory(load_autotune_results_from=[str(dump)],
                           require_complete_autotune_results=True)
    add_one = add_one_op(tuned_kernel())
    assert torch.equal(add_one(x), x + 1)
    assert torch.equal(add_one(x), x + 1)
    assert sess.stats.candidate_benchmarks == 0 and sess.stats.tuned == 0
    assert sess.stats.hits >= 1


class CachedAutotuner(TritonAutotuner):
    """A library's own subclass of Triton's Autotuner, as
    flash-linear-attention's: its own state on top of Triton's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.launches = 0

    def run(self, *args, **kwargs):
        self.launches += 1
        return super().run(*args, **kwargs)


def cached_autotune(configs, key):
    def decorate(fn):
        return CachedAutotuner(fn, fn.arg_names, configs, key, None, None)
    return decorate


def test_a_librarys_autotuner_subclass_is_routed_with_its_timings(
        session_factory):
    kernel = cached_autotune(CONFIGS, ["n"])(add_one_kernel)
    triton_patch.install()
    try:
        sess = session_factory()
        x, y = torch.arange(40.0), torch.empty(40)
        kernel[grid_for(40)](x, y, 40)
        assert torch.equal(y, x + 1)
        assert kernel.launches == 1 and sess.stats.tuned == 1
        # Filled as Triton fills it: every candidate, timings in ms.
        assert set(kernel.configs_timings) == set(CONFIGS)
        for timings in kernel.configs_timings.values():
            assert isinstance(timings, list) and timings[0] > 0
        assert kernel.best_config in CONFIGS
        assert kernel.bench_time is not None
    finally:
        triton_patch.uninstall()


def test_tuned_kernel_timings_have_tritons_shape(session_factory):
    session_factory()
    kernel = tuned_kernel()
    x, y = torch.arange(40.0), torch.empty(40)
    kernel[grid_for(40)](x, y, 40)
    assert set(kernel.configs_timings) == set(CONFIGS)
    assert all(isinstance(t, list) and t[0] > 0
               for t in kernel.configs_timings.values())
    assert kernel.best_config in kernel.configs_timings


@pytest.mark.slow
@pytest.mark.parametrize("decorator", ["autotune", "triton"])
def test_torch_compile_traces_a_triton_op_of_a_tuned_kernel(decorator):
    """What torch.compile does with the op up to Inductor's code
    generation, which needs a GPU driver (without one it fails there for
    Triton's own autotune too): the traced graph launches this project's
    kernel object through torch's functional kernel wrapper, and tracing
    measures nothing."""
    env = dict(os.environ, AUTOTUNE_FLAGS="--autotune_backend=gpu",
               PYTHONPATH=ROOT)
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "workers",
                                      "compile_trace.py"), decorator],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    traced = json.loads(result.stdout.strip().splitlines()[-1])
    assert traced == {"wrappers": ["triton_kernel_wrapper_functional"],
                      "same_kernel": [True], "session_started": False}
