"""Two functions of one name, from the user's side: a test-local kernel
with the same name and signature as a cached library kernel, never tuned
itself, is another kernel of that name, not the cached one edited; the
cached one edited still reads as stale (its source changed)."""
import json
import textwrap

import pytest

from test_pytest_plugin import (CACHE, STALE_KERNELS, outcomes, run_pytest,
                                write_project)

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

LOCAL_COPY = '''
import torch
import triton
import triton.language as tl

import autotune
from autotune import Config


def test_local_copy():
    # Same name and arguments as kernels.add_one_kernel, another body.
    @autotune.autotune(configs=[Config({"BLOCK": 16}, num_warps=1),
                                Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def add_one_kernel(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n)
        tl.store(y + offs, v + 0.5 + 0.5, mask=offs < n)

    x = torch.arange(20, dtype=torch.float32)
    y = torch.empty_like(x)
    add_one_kernel[lambda meta: (triton.cdiv(20, meta["BLOCK"]),)](x, y, 20)
    assert torch.equal(y, x + 1)
'''


def test_a_test_local_kernel_of_a_cached_name_is_another_kernel(pytester):
    write_project(pytester.path)
    tuned = run_pytest(pytester, "-p", "pytest_autotune", "--autotune-update",
                       "test_kernels.py", "-k", "add_one")
    assert tuned.returncode == 0, tuned.output
    (pytester.path / "test_local.py").write_text(textwrap.dedent(LOCAL_COPY))
    result = run_pytest(pytester, "-p", "pytest_autotune",
                        "--autotune-require-complete",
                        "--autotune-report=report.json", "test_local.py")
    assert outcomes(result) == {"failed": 1}, result.output
    assert "its source changed" not in result.output
    assert "stale:" not in result.output
    assert ("missing: add_one_kernel [n=20;dtypes=x:float32,y:float32]"
            in result.output)
    assert ("the cache has it only for another kernel named add_one_kernel"
            in result.output)
    assert "tuned for kernels:add_one_kernel" in result.output
    assert "test_local:test_local_copy.<locals>.add_one_kernel" in \
        result.output
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["stale"] == [] and len(report["missing"]) == 1
    # The runtime's own reason agrees (not "kernel changed").
    assert [f["miss_reason"] for f in report["fusions"]] == ["missing"]

    # The cached kernel itself, edited, is stale as before.
    write_project(pytester.path, kernels=STALE_KERNELS)
    result = run_pytest(pytester, "-p", "pytest_autotune",
                        "--autotune-require-complete", "test_kernels.py",
                        "-k", "add_one")
    assert "stale: add_one_kernel [n=20;" in result.output
    assert "its source changed since it was tuned" in result.output
    assert (pytester.path / CACHE).exists()
