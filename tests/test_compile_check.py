"""Compiling configs for a target GPU on the CPU (autotune/measure/compile_check.py):
the command line, the tuning option, the target's limits."""
import os
import subprocess
import sys

import pytest
import torch
import triton

import autotune
import compile_check_kernels as ck
from autotune.measure import compile_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_command_rejects_a_dot_tile_below_the_hardware_minimum():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests"))
    result = subprocess.run(
        [sys.executable, "tools/compile_check.py", "--targets", "sm_90",
         "--module", "compile_check_kernels", "--jobs", "1"],
        cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    failures = [line for line in result.stderr.splitlines()
                if line.startswith("compile_check:")]
    assert len(failures) == 1, result.stderr
    assert "BLOCK_K=8" in failures[0] and "COMPILE_ERROR" in failures[0]
    assert "K >= 16" in failures[0]
    table = result.stdout
    assert "BLOCK=16 BLOCK_K=16 warps=4 stages=2" in table
    assert "sm_90: 2 configs, 1 compiled within limits, 1 rejected" in table


def _run_tuned(n=32):
    dev = autotune.device()
    a = torch.randn(n, n, device=dev).half()
    b = torch.randn(n, n, device=dev).half()
    c = torch.empty(n, n, device=dev).half()
    ck.square_matmul_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),
                                          triton.cdiv(n, meta["BLOCK"]))](
        a, b, c, n)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2,
                               atol=2e-2)


def test_tuning_drops_configs_the_target_cannot_compile(session_factory):
    # The interpreter runs the K=8 tile (a GPU fails to compile it)...
    sess = session_factory()
    _run_tuned()
    entry = next(iter(sess.cache.memory.values()))
    on_interpreter = sess.backend.name == "interpreter"
    assert {c.config: c.failure for c in entry.candidates} == {
        ck.FITS: "NONE",
        ck.K_TOO_SMALL: "NONE" if on_interpreter else "COMPILE_ERROR"}
    # ...the compile check for sm_90 drops it before it is measured.
    sess = session_factory(autotune_compile_check="sm_90")
    _run_tuned()
    entry = next(iter(sess.cache.memory.values()))
    kinds = {c.config: c for c in entry.candidates}
    assert kinds[ck.K_TOO_SMALL].failure == "COMPILE_ERROR"
    assert "sm_90" in kinds[ck.K_TOO_SMALL].failure_detail
    assert kinds[ck.FITS].failure == "NONE" and entry.best == ck.FITS
    assert sess.stats.candidate_benchmarks == 1
    assert sess.stats.compile_rejected == 1
    assert sess.report()["compile_rejected"] == 1


def test_limits_of_the_target_are_checked():
    # Compiled in a spawned process: this one runs the interpreter.
    config = {"kwargs": ck.FITS.kwargs, "num_warps": 4, "num_stages": 2}
    signature = ck.COMPILE_SIGNATURES["square_matmul_kernel"][0]
    task = ("compile_check_kernels", None, "square_matmul_kernel", signature,
            config, ("sm_80", 80))
    ok, many_warps = compile_check.run_tasks(
        [task, task[:4] + (dict(config, num_warps=64),) + task[5:]], jobs=2)
    assert ok["ok"] and ok["shared"] > 0 and ok["registers"] > 0, ok
    assert not many_warps["ok"] and "2048 threads > 1024" in \
        many_warps["reason"]
    # The same compiled config against a smaller shared-memory limit.
    result = compile_check.Result(**ok)
    compile_check.apply_limits(result, compile_check.Target("sm_80", 80), 4,
                               shared_limit=ok["shared"] - 1)
    assert not result.ok and result.failure == "OUT_OF_RESOURCES"
    assert f"shared memory {ok['shared']} B > {ok['shared'] - 1} B" in \
        result.reason


def test_maxnreg_reaches_the_compile():
    """A config's maxnreg caps the registers of the compiled binary (40
    without it for this tile on sm_90)."""
    config = {"kwargs": ck.FITS.kwargs, "num_warps": 4, "num_stages": 2}
    signature = ck.COMPILE_SIGNATURES["square_matmul_kernel"][0]
    task = ("compile_check_kernels", None, "square_matmul_kernel", signature,
            config, ("sm_90", 90))
    free, capped = compile_check.run_tasks(
        [task, task[:4] + (dict(config, maxnreg=32),) + task[5:]], jobs=2)
    assert free["ok"] and capped["ok"], (free, capped)
    assert free["registers"] > 32 >= capped["registers"] > 0, (free, capped)
    assert capped["config"].endswith("maxnreg=32")
    assert compile_check._config_dict(
        autotune.Config({"BLOCK": 16}, maxnreg=64))["maxnreg"] == 64


@pytest.mark.parametrize("text", ["sm90x", "gfx90a", "sm_11", ""])
def test_bad_targets_are_one_line_errors(text):
    with pytest.raises(compile_check.CompileCheckError) as raised:
        compile_check.parse_targets(text)
    assert "\n" not in str(raised.value)


def test_targets_parse():
    assert [t.name for t in compile_check.parse_targets("sm_90, sm80")] == \
        ["sm_90", "sm_80"]
