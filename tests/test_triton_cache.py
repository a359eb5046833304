"""Where Triton keeps binaries in a process of ours
(autotune/binaries/triton_cache.py): the private cache folder under
`bazel test`, a user's own cache manager kept, an unwritable cache as one
environment error, and the served and compiled counts of worker
processes added up. (tests/test_compiled_kernels.py: compiled-kernel
directories served read-through to a whole run.)"""
import errno

import pytest

from autotune.binaries import triton_cache
from autotune.errors import TritonCacheError
from autotune.measure import tuner


def test_private_cache_under_bazel(monkeypatch, tmp_path):
    env = {"TEST_TMPDIR": str(tmp_path)}
    assert triton_cache.configure_environment((), env) == \
        str(tmp_path / "triton-cache")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    for kept in ({"TEST_TMPDIR": "t", "TRITON_CACHE_DIR": "/mine"},
                 {"TEST_TMPDIR": "t", "TRITON_HOME": "/home"}):
        before = dict(kept)
        assert triton_cache.configure_environment((), kept) is None
        kept.pop("MPLCONFIGDIR")
        assert kept == before
    outside = {}
    triton_cache.configure_environment((), outside)
    assert "TRITON_CACHE_DIR" not in outside


def test_users_cache_manager_is_kept_and_named(capsys):
    env = {"TRITON_CACHE_MANAGER": "my.module:Manager"}
    triton_cache.configure_environment(("/compiled",), env)
    assert env["TRITON_CACHE_MANAGER"] == "my.module:Manager"
    assert triton_cache.COMPILED_DIRS_ENV not in env
    assert "TRITON_CACHE_MANAGER=my.module:Manager is set: the compiled " \
        "kernels in /compiled are not served" in capsys.readouterr().err


def test_unwritable_triton_cache_is_one_environment_error(tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "ro"))
    exc = OSError(errno.EROFS, "Read-only file system",
                  str(tmp_path / "ro" / "ABC"))
    with pytest.raises(TritonCacheError) as raised:
        tuner._stop_for_unwritable_cache(exc)
    assert "TRITON_CACHE_DIR" in str(raised.value)
    # Not the cache: left to the per-config classification.
    tuner._stop_for_unwritable_cache(OSError(errno.EROFS, "x", "/elsewhere"))


def test_matplotlib_config_folder_under_bazel(tmp_path):
    env = {"TEST_TMPDIR": str(tmp_path)}
    triton_cache.configure_environment((), env)
    assert env["MPLCONFIGDIR"] == str(tmp_path / "matplotlib")
    mine = {"TEST_TMPDIR": str(tmp_path), "MPLCONFIGDIR": "/mine"}
    triton_cache.configure_environment((), mine)
    assert mine["MPLCONFIGDIR"] == "/mine"
    outside = {}
    triton_cache.configure_environment((), outside)
    assert "MPLCONFIGDIR" not in outside


def test_worker_counts_add_up():
    worker = {"directories": ["/k"], "served": 2, "compiled": 1,
              "compiled_kernels": ["softmax_kernel"]}
    other = {"directories": ["/k"], "served": 3, "compiled": 0,
             "compiled_kernels": []}
    assert triton_cache.merged_counts([None, worker, other]) == {
        "directories": ["/k"], "served": 5, "compiled": 1,
        "compiled_kernels": ["softmax_kernel"]}
    assert triton_cache.merged_counts([None]) is None
    assert triton_cache.counts_text(worker) == \
        "compiled kernels: 2 served, 1 compiled (softmax_kernel)"
