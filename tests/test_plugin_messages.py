"""What the pytest plugin says, from a user's project: a winner deleted from
the decoration's list reads as no longer offered (not as a regression), an
update after a shape left the tests names the entries it kept and the flag
that drops them, and a wait for the device shows in a CI log (output that
is not a terminal) too."""
import os
import socket
import threading
import time
import textwrap

from autotune import codec
from autotune.host import device_lock
from autotune.report import summary
from autotune.runtime import offers

from test_pytest_plugin import (CACHE, KERNELS, PLUGIN, TESTS, run_pytest,
                                tuned, write_project)

pytest_plugins = ["pytester"]
__all__ = ["tuned"]  # the tuned project: a fixture shared with the plugin's tests


def _checked_in(pytester, tuned, **files):
    write_project(pytester.path, **files)
    (pytester.path / CACHE).write_bytes(tuned[1])
    return pytester.path / CACHE


def test_a_deleted_winner_reads_as_no_longer_offered(pytester, tuned):
    # add_one offers neither of the configs it was tuned with.
    kernels = textwrap.dedent(KERNELS).replace(
        "@autotune.autotune(configs=CONFIGS, key=[\"n\"])\n@triton.jit\n"
        "def add_one_kernel",
        "@autotune.autotune(configs=[Config({'BLOCK': 8}), "
        "Config({'BLOCK': 64})], key=[\"n\"])\n@triton.jit\n"
        "def add_one_kernel", 1)
    _checked_in(pytester, tuned, kernels=kernels)
    result = run_pytest(pytester, *PLUGIN, "--autotune-update")
    assert result.returncode == 0, result.output
    changed = [l for l in result.output.splitlines()
               if l.startswith("  ~ add_one_kernel")]
    assert len(changed) == 2, result.output
    for line in changed:
        assert "the old winner is no longer offered (new " in line, line
        assert "across runs" not in line and "%" not in line, line


def test_the_summary_knows_the_runtimes_word_for_not_offered():
    assert summary.NOT_OFFERED_REASON == offers.NOT_OFFERED


def test_an_update_after_a_shape_left_the_tests_names_what_it_kept(
        pytester, tuned):
    # test_add_one no longer runs n=40.
    cache = _checked_in(pytester, tuned, tests=TESTS.replace(
        '@pytest.mark.parametrize("n", [20, 40])',
        '@pytest.mark.parametrize("n", [20])'))
    result = run_pytest(pytester, *PLUGIN, "--autotune-update")
    assert result.returncode == 0, result.output
    assert ("autotune: 1 entry no test of this run used kept in "
            "testdata/kernels.textproto: add_one_kernel [n=40;dtypes="
            "x:float32,y:float32]; `pytest --autotune-update "
            "--autotune-prune-unused` on a full run drops them") \
        in result.output, result.output
    assert len(codec.load_results(str(cache))) == 3
    result = run_pytest(pytester, *PLUGIN, "--autotune-update",
                        "--autotune-prune-unused")
    assert result.returncode == 0, result.output
    assert "no test of this run used" not in result.output
    assert len(codec.load_results(str(cache))) == 2
    # A run narrowed with -k keeps the rest by design: nothing to say.
    result = run_pytest(pytester, *PLUGIN, "--autotune-update", "-k",
                        "double")
    assert "no test of this run used" not in result.output


def _until_another_process_waits_for_a_lock(done, limit_s=60.0):
    """Returns once a process other than this one waits in a blocking
    flock (a "->" line of /proc/locks), `done` is set, or limit_s passed."""
    deadline = time.monotonic() + limit_s
    while not done.is_set() and time.monotonic() < deadline:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "->" and \
                        fields[5] != str(os.getpid()):
                    return
        time.sleep(0.05)


def test_a_wait_for_the_device_shows_in_a_ci_log(pytester, tuned):
    """The output is a pipe (no terminal): the tuning lines stay captured,
    the wait for the device does not."""
    write_project(pytester.path)  # no cache: every fusion is tuned
    turn = device_lock.DeviceTurn(
        identity="host-" + socket.gethostname(),
        directory=os.environ[device_lock.LOCK_DIR_ENV])
    turn.take()
    done = threading.Event()
    # Released once the run blocks on the lock (however long its start-up
    # takes on a loaded machine), at the latest after a minute.
    release = threading.Thread(
        target=lambda: (_until_another_process_waits_for_a_lock(done),
                        turn.release()))
    release.start()
    try:
        result = run_pytest(pytester, *PLUGIN, "--autotune-update")
    finally:
        done.set()
        release.join()
        turn.release()
    assert result.returncode == 0, result.output
    waits = [l for l in result.output.splitlines()
             if l.startswith("autotune: waiting for device host-")]
    assert len(waits) == 1, result.output
    assert f"held by pid {os.getpid()}" in waits[0], waits
    # The tuning lines are a terminal's only.
    assert "tuning add_one_kernel" not in result.output
