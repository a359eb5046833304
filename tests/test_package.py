"""The package's import-time behaviour: lazy runtime, interpreter choice."""
import os
import subprocess
import sys

import pytest

import autotune

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cache_tools_do_not_import_torch_or_triton():
    # The tools read and write files only; importing torch costs seconds.
    code = ("import sys, autotune.cache_tool, autotune.cache_storage\n"
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_runtime_names_resolve_lazily():
    assert autotune.tune.__module__ == "autotune.autotuner"
    assert autotune.Config.__module__ == "autotune.records"
    assert "configure" in dir(autotune)
    assert autotune.results_io.load_results is autotune.load_results
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
    assert autotune._gpu_driver_visible() is visible


def test_no_gpu_driver_selects_the_interpreter_without_torch(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    monkeypatch.setattr(autotune, "_gpu_driver_visible", lambda: False)
    autotune._select_interpreter_early()
    assert os.environ["TRITON_INTERPRET"] == "1"
