"""The project's own tests stay off what other users of the machine share:
the host-wide device lock and slot directory, fixed temporary folders."""
import logging
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from autotune.host import device_lock, lock_files
from autotune.measure import backends

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402

# What tests/conftest.py sets for the run (the second tells its own
# directory from one a caller set).
OWN_LOCK_DIR_ENV = "RULES_AUTOTUNE_TESTS_LOCK_DIR"

# Tests that tune, and so take the device lock on every tuned fusion.
LOCK_USING_TESTS = (
    "tests/test_report.py::test_normal_verbosity_prints_start_and_end",
    "tests/test_report.py::test_verbose_prints_every_candidate",
)

HOLD_HOST_LOCK = """
import sys, time
from autotune.host import device_lock
lock = device_lock.FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_the_tests_use_a_private_lock_directory():
    directory = os.environ[device_lock.LOCK_DIR_ENV]
    assert os.path.realpath(directory) != os.path.realpath(
        lock_files.DEFAULT_LOCK_DIR)
    assert device_lock.lock_dir() == directory
    assert os.environ[OWN_LOCK_DIR_ENV] == directory


def _bare_environment():
    """The environment of a shell that never heard of lock directories."""
    env = dict(os.environ)
    for name in (device_lock.LOCK_DIR_ENV, OWN_LOCK_DIR_ENV,
                 "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "AUTOTUNE_FLAGS"):
        env.pop(name, None)
    return env


@pytest.mark.slow
def test_lock_using_tests_pass_while_another_process_holds_the_host_lock():
    """Another process tunes on this host (it holds the host-wide lock of
    the interpreter) while the suite's tuning tests run: they neither wait
    for it nor time out."""
    env = _bare_environment()
    host_lock = os.path.join(
        lock_files.DEFAULT_LOCK_DIR,
        lock_files.safe_name(device_lock.device_identity(
            backends.InterpreterBackend())) + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_HOST_LOCK, host_lock, "600"],
        cwd=ROOT, env=dict(env, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        # Held by the holder, or already by some other process of the host:
        # either way held by another process while the tests run.
        ready = threading.Event()
        threading.Thread(target=lambda: (holder.stdout.readline(),
                                         ready.set()), daemon=True).start()
        ready.wait(60)
        assert holder.poll() is None, holder.stderr.read()
        start = time.monotonic()
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p",
                 "no:cacheprovider", "-o", "log_cli=true",
                 "--log-cli-level=INFO", *LOCK_USING_TESTS],
                cwd=ROOT, env=env, capture_output=True, text=True,
                timeout=240)
        except subprocess.TimeoutExpired as e:
            pytest.fail("the tuning tests waited for the host-wide device "
                        f"lock: {(e.stdout or b'')[-2000:]!r}")
        wall = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert re.search(r"\b2 passed\b", output), output[-3000:]
    assert "waiting for device" not in output, output[-3000:]
    assert wall < 240


def test_bazel_tests_get_the_callers_lock_directory(tmp_path):
    env = {device_lock.LOCK_DIR_ENV: str(tmp_path)}
    args = suite.lock_dir_args(["test", "//...", "--jobs=2"], env)
    assert args == ["test", f"--test_env=AUTOTUNE_LOCK_DIR={tmp_path}",
                    f"--sandbox_writable_path={tmp_path}", "//...",
                    "--jobs=2"]
    # Only where tests run; a test that names its own keeps it.
    assert suite.lock_dir_args(["query", "//..."], env) == ["query", "//..."]
    own = ["test", "//x", "--test_env=AUTOTUNE_LOCK_DIR=/elsewhere"]
    assert suite.lock_dir_args(own, env) == own
    assert suite.lock_dir_args(["test", "//x"], {}) == ["test", "//x"]


def test_a_wait_close_to_the_test_timeout_says_it_will_time_out(
        tmp_path, monkeypatch, caplog):
    """Under `bazel test` (TEST_TIMEOUT), a wait still going on near the
    timeout says that the wait is what will end the test."""
    path = str(tmp_path / "device.lock")
    holder = device_lock.FileLock(path)
    holder.acquire()
    # This process is older than 85% of a 1 s timeout: the line comes at
    # once, while the wait goes on.
    monkeypatch.setenv("TEST_TIMEOUT", "1")
    logger = logging.getLogger("autotune")
    monkeypatch.setattr(logger, "propagate", True)
    caplog.set_level(logging.INFO, logger="autotune")
    waiter = device_lock.FileLock(path, "device test-gpu")
    done = threading.Event()

    def wait():
        waiter.acquire()
        done.set()
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            "still waiting" in r.getMessage() for r in caplog.records):
        time.sleep(0.05)
    assert not done.is_set()
    holder.release()
    thread.join(30)
    waiter.release()
    lines = [r.getMessage() for r in caplog.records
             if "still waiting" in r.getMessage()]
    assert len(lines) == 1, caplog.records
    assert re.match(
        r"autotune: still waiting for device test-gpu after \d+ s, held by "
        rf"pid {os.getpid()} \(.*device\.lock\); this test times out after "
        r"1 s \(TEST_TIMEOUT\): the wait for the device, not tuning, is "
        r"what will time it out\. Give the dump target a longer timeout",
        lines[0]), lines[0]


def test_no_timeout_line_without_a_test_timeout(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_TIMEOUT", raising=False)
    lock = device_lock.FileLock(str(tmp_path / "x.lock"))
    assert device_lock._timeout_warning(lock, None, time.monotonic()) is None
    monkeypatch.setenv("TEST_TIMEOUT", "junk")
    assert device_lock._timeout_warning(lock, None, time.monotonic()) is None


def test_the_protobuf_floor_step_uses_a_fresh_directory():
    """Two CI runs on one machine must not remove each other's folder."""
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        script = f.read()
    start = script.rindex("\n\n", 0, script.index("protobuf=="))
    step = script[start:script.index("\n\n", script.index("protobuf=="))]
    assert "/tmp/protobuf-floor " not in step and \
        "rm -rf /tmp/protobuf-floor" not in step, step
    folder = re.search(r'(\w+)="\$\(mktemp -d[^)]*\)"', step)
    assert folder, step
    assert f'--target "${{{folder.group(1)}}}"' in step, step
