"""The runner stamp (AUTOTUNE_RUNNER_STAMP): what the runner exports, how
a test reads it, and the one line a stamp that does not describe the
runner gives. (tests/test_e2e_smoke.py: a cached Bazel test re-runs when
the stamp's Triton version changes.)"""
import os
import subprocess
import sys

import pytest

from autotune.errors import AutotuneError
from autotune.host import stamp
from autotune.measure import backends

from tests_support import environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def backend():
    return backends.InterpreterBackend()


def test_the_stamp_names_the_device_key_and_the_versions(backend):
    fields = stamp.parse(stamp.current(backend))
    import torch
    import triton
    assert fields["device"] == backend.device_key()
    assert fields["triton"] == triton.__version__
    assert fields["torch"] == torch.__version__
    assert list(fields)[:4] == list(stamp.CHECKED)
    assert stamp.check(backend, {stamp.STAMP_ENV: stamp.current(backend)}) \
        == fields


def test_a_stamp_of_another_triton_is_one_line_naming_the_field(backend):
    fields = stamp.parse(stamp.current(backend))
    fields["triton"] = "9.9.0"
    with pytest.raises(AutotuneError) as e:
        stamp.check(backend, {stamp.STAMP_ENV: stamp.format_stamp(fields)})
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(
        f"AUTOTUNE_RUNNER_STAMP says triton=9.9.0, but this test runs with "
        f"triton={fields['device'].rpartition('-')[2]}")
    assert "tools/runner_stamp.py" in message and stamp.DOCS in message


def test_the_runners_own_fields_and_the_driver_only_key_the_action(backend):
    text = stamp.current(backend) + ";driver=550.54;image=sha256:ab12"
    assert stamp.check(backend, {stamp.STAMP_ENV: text})["image"] == \
        "sha256:ab12"
    # Without a stamp nothing is checked.
    assert stamp.check(backend, {}) == {}
    assert stamp.check(backend, {stamp.STAMP_ENV: " "}) == {}


def test_a_malformed_stamp_names_the_variable_and_the_part():
    with pytest.raises(AutotuneError) as e:
        stamp.parse("triton=3.9.0;oops")
    assert str(e.value).startswith(
        "AUTOTUNE_RUNNER_STAMP='triton=3.9.0;oops': 'oops' is not NAME=VALUE")


def test_a_session_refuses_a_stamp_that_does_not_describe_the_runner(
        monkeypatch, session_factory, backend):
    fields = stamp.parse(stamp.current(backend))
    monkeypatch.setenv(stamp.STAMP_ENV, stamp.format_stamp(
        dict(fields, torch="1.0.0")))
    with pytest.raises(AutotuneError, match="says torch=1.0.0"):
        session_factory()
    monkeypatch.setenv(stamp.STAMP_ENV, stamp.format_stamp(fields))
    assert session_factory().device_key == fields["device"]


def test_the_tool_prints_what_a_test_accepts(tmp_path):
    env = environment()
    result = subprocess.run([sys.executable, os.path.join(
        ROOT, "tools", "runner_stamp.py")], capture_output=True, text=True,
        env=env, check=False)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    assert printed.startswith("device=cpu/triton-interpreter/triton-")
    code = "import autotune; autotune.configure(); print('ok')"
    check = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        check=False,
        env=dict(env, AUTOTUNE_RUNNER_STAMP=printed))
    assert check.stdout.strip() == "ok", check.stderr


class _GpuLike(backends.InterpreterBackend):
    """A backend that says it is the GPU one (the note is for GPU tests)."""
    name = "gpu"


def test_a_gpu_test_under_bazel_without_a_stamp_says_so_once(
        monkeypatch, capfd):
    from autotune.runtime.session import Session
    monkeypatch.delenv(stamp.STAMP_ENV, raising=False)
    monkeypatch.setenv("TEST_TARGET", "//:kernels_test")
    Session(backend=_GpuLike())
    err = capfd.readouterr().err
    assert err.count(f"{stamp.STAMP_ENV} is not set") == 1, err
    # Outside Bazel (pytest, a script), and on the interpreter: no note.
    monkeypatch.delenv("TEST_TARGET")
    Session(backend=_GpuLike())
    monkeypatch.setenv("TEST_TARGET", "//:kernels_test")
    Session(backend=backends.InterpreterBackend())
    assert stamp.STAMP_ENV not in capfd.readouterr().err


def _fake_smi(tmp_path, printed):
    """A folder holding an nvidia-smi that prints `printed`."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '%s\\n' " + repr(printed) + "\n")
    smi.chmod(0o755)
    return str(tmp_path)


def test_the_driver_field_is_the_drivers_branch(monkeypatch, tmp_path,
                                                 backend):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, "580.159.04") + ":"
                       + os.environ["PATH"])
    assert stamp.driver_version() == "580.159.04"
    fields = stamp.parse(stamp.current(backend))
    assert fields["driver"] == "580"
    # Two patch levels of one branch give one stamp.
    smi = _fake_smi(tmp_path, "580.159.03")
    monkeypatch.setenv("PATH", smi + ":" + os.environ["PATH"])
    assert stamp.current(backend) == stamp.format_stamp(fields)
    assert stamp.driver_branch("570.86.15") == "570"
    assert stamp.driver_branch("x;device=evil") == ""


@pytest.mark.parametrize("printed", ["x;device=evil", "580.1;device=evil",
                                     "580\nautotune: all ok", "N/A"])
def test_what_nvidia_smi_prints_is_a_version_or_nothing(
        monkeypatch, tmp_path, backend, printed):
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, printed) + ":"
                       + os.environ["PATH"])
    fields = stamp.parse(stamp.current(backend))
    assert fields["device"] == backend.device_key()
    assert list(fields) == list(stamp.CHECKED) or \
        list(fields) == list(stamp.CHECKED) + ["driver"]
    assert fields.get("driver", "580") == "580"
    assert "evil" not in stamp.current(backend)


def test_a_stamp_with_a_newline_is_one_short_line(backend):
    forged = stamp.current(backend).replace(
        "torch=", "torch=1.0\nautotune: all 12 fusions hit;x=")
    with pytest.raises(AutotuneError) as e:
        stamp.check(backend, {stamp.STAMP_ENV: forged})
    message = str(e.value)
    assert "\n" not in message and "autotune: all" not in message
    assert message.startswith(
        "AUTOTUNE_RUNNER_STAMP holds the control character '\\n'")


def test_a_huge_stamp_is_one_short_line(backend):
    huge = stamp.current(backend) + ";image=" + "a" * 100_000
    with pytest.raises(AutotuneError) as e:
        stamp.check(backend, {stamp.STAMP_ENV: huge})
    message = str(e.value)
    assert len(message) < 300 and "\n" not in message
    assert message.startswith("AUTOTUNE_RUNNER_STAMP is 100")
