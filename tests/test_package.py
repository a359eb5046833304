"""The package's import-time behaviour: lazy runtime, interpreter choice."""
import os
import subprocess
import sys

import pytest

import autotune
from autotune import flags
from autotune.measure import backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cache_tools_do_not_import_torch_or_triton():
    # The tools read and write files only; importing torch costs seconds.
    code = ("import sys, autotune.cli.cache_tool, autotune.cache.tiers\n"
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_runtime_names_resolve_lazily():
    assert autotune.tune.__module__ == "autotune.runtime.autotuner"
    assert autotune.Config.__module__ == "autotune.records"
    assert "configure" in dir(autotune)
    assert autotune.codec.load_results is autotune.load_results
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        autotune.nope  # noqa: B018


@pytest.mark.parametrize("devices, env, visible", [
    (set(), {}, False),
    ({"/dev/nvidiactl"}, {}, True),
    ({"/dev/nvidiactl"}, {"CUDA_VISIBLE_DEVICES": ""}, False),
    ({"/dev/nvidiactl"}, {"CUDA_VISIBLE_DEVICES": "-1"}, False),
    ({"/dev/nvidiactl"}, {"CUDA_VISIBLE_DEVICES": "1"}, True),
    ({"/dev/kfd"}, {}, True),
    ({"/dev/kfd"}, {"HIP_VISIBLE_DEVICES": ""}, False),
])
def test_gpu_driver_visibility(monkeypatch, devices, env, visible):
    monkeypatch.setattr(os.path, "exists", lambda p: p in devices)
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert backends.gpu_driver_visible() is visible


def test_no_gpu_driver_selects_the_interpreter_without_torch(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    monkeypatch.setattr(backends, "gpu_driver_visible", lambda: False)
    backends.select_interpreter_early(flags.import_time_choices()[0])
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_wheel_holds_the_pytest_entry_point_module(tmp_path):
    """pytest loads the plugin through a module outside the package: the
    wheel must ship it, and its pytest11 entry point must name it; and the
    drop-in's sitecustomize.py, which is not in a regular package."""
    pytest.importorskip("setuptools")
    import shutil
    import zipfile
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "pytest_autotune.py"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    shutil.copytree(os.path.join(ROOT, "autotune"), source / "autotune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "out"),
                    str(source)], check=True, capture_output=True)
    wheel, = (tmp_path / "out").glob("rules_autotune-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points, = [n for n in names if n.endswith("entry_points.txt")]
        text = z.read(entry_points).decode()
    assert "pytest_autotune.py" in names
    assert "autotune/pytest_plugin.py" in names
    # The zero-edit path puts this directory on the import path.
    assert "autotune/dropin/sitecustomize.py" in names
    assert "[pytest11]\npytest_autotune = pytest_autotune\n" in text


def test_every_error_users_meet_is_an_autotune_error():
    """One `except autotune.AutotuneError` catches them all (README)."""
    from autotune import flags
    from autotune.measure import backends
    from autotune.binaries import compile_check
    from autotune.cache import remote
    from autotune.measure import tuner
    from autotune.search import evolutionary, space
    for cls in (space.SpaceError, evolutionary.SearchError,
                tuner.TuningError, tuner.DeviceContextLostError,
                backends.BackendError, flags.AutotuneFlagsError,
                remote.RemoteCacheError,
                compile_check.CompileCheckError, autotune.CacheFileError,
                autotune.AutotuneCacheMissError):
        assert issubclass(cls, autotune.AutotuneError), cls
    with pytest.raises(autotune.AutotuneError, match="no values"):
        autotune.Space({"BLOCK": []})
