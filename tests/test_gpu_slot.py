"""The --run_under wrapper tools/gpu_slot.py, with real processes and two
simulated devices."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpu_slot  # noqa: E402
from autotune.measure import device_lock  # noqa: E402

WRAPPER = os.path.join(ROOT, "tools", "gpu_slot.py")
JOB = os.path.join(HERE, "workers", "slot_job.py")


def _env(tmp_path, kind="dump", **extra):
    env = dict(os.environ, AUTOTUNE_LOCK_DIR=str(tmp_path / "locks"),
               **{"AUTOTUNE_GPU_SLOT_DEVICES": "2", **extra})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["AUTOTUNE_FLAGS"] = \
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/c.textproto" \
        if kind == "dump" else "--load_autotune_results_from=c.textproto"
    return env


def _wrapped(env, record, seconds):
    # Its own process group, as Bazel runs a test: a SIGKILLed wrapper's
    # child is killed with the group afterwards.
    return subprocess.Popen([sys.executable, WRAPPER, sys.executable, JOB,
                             str(record), str(seconds)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _intervals(record):
    return [json.loads(line) for line in record.read_text().splitlines()]


def _max_overlap(runs):
    events = sorted([(r["start"], 1) for r in runs]
                    + [(r["end"], -1) for r in runs])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_four_dumps_on_two_devices_one_per_device(tmp_path):
    record = tmp_path / "runs.jsonl"
    env = _env(tmp_path)
    procs = [_wrapped(env, record, 1.5) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    runs = _intervals(record)
    print(json.dumps(runs, indent=1))  # the recorded intervals
    assert sorted(r["device"] for r in runs) == ["0", "0", "1", "1"]
    for device in ("0", "1"):
        mine = sorted((r["start"], r["end"]) for r in runs
                      if r["device"] == device)
        assert mine[0][1] <= mine[1][0], mine  # one at a time per device
    assert _max_overlap(runs) == 2  # both devices used at once


def test_loads_share_a_device_up_to_the_limit(tmp_path):
    record = tmp_path / "runs.jsonl"
    env = _env(tmp_path, kind="load", AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE="2")
    procs = [_wrapped(env, record, 1.5) for _ in range(5)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    runs = _intervals(record)
    assert _max_overlap(runs) == 4
    for device in ("0", "1"):
        assert _max_overlap([r for r in runs if r["device"] == device]) <= 2


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_test_frees_its_slot(tmp_path, signum):
    env = _env(tmp_path, AUTOTUNE_GPU_SLOT_DEVICES="1")
    proc = _wrapped(env, tmp_path / "runs.jsonl", 300)
    assert proc.stdout.readline().strip() == "STARTED"
    directory = env["AUTOTUNE_LOCK_DIR"]
    devices = gpu_slot.devices(env)
    assert gpu_slot.try_take(directory, devices, "dump", 2) is None
    assert gpu_slot.try_take(directory, devices, "load", 2) is None
    try:
        proc.send_signal(signum)
        proc.wait(timeout=30)
        start = time.monotonic()
        slot = gpu_slot.try_take(directory, devices, "dump", 2)
        assert slot is not None and time.monotonic() - start < 1.0
        slot.release()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_stale_slot_file_does_not_block(tmp_path):
    env = _env(tmp_path, AUTOTUNE_GPU_SLOT_DEVICES="1")
    os.makedirs(env["AUTOTUNE_LOCK_DIR"])
    for k in range(2):
        with open(os.path.join(env["AUTOTUNE_LOCK_DIR"],
                               f"slot-dev-0-{k}.lock"), "w") as f:
            f.write("999999\n")  # a pid that does not run
    record = tmp_path / "runs.jsonl"
    proc = _wrapped(env, record, 0)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "waiting" not in err


def test_exit_status_is_the_tests(tmp_path):
    env = _env(tmp_path)
    code = subprocess.run([sys.executable, WRAPPER, sys.executable, "-c",
                           "import sys; sys.exit(3)"], env=env).returncode
    assert code == 3


def test_device_count_and_kind_come_from_the_environment():
    assert gpu_slot.devices({"AUTOTUNE_GPU_SLOT_DEVICES": "3"}) == [
        ("0", "dev-0"), ("1", "dev-1"), ("2", "dev-2")]
    assert gpu_slot.devices({"AUTOTUNE_GPU_SLOT_DEVICES": "1",
                             "CUDA_VISIBLE_DEVICES": "5,6"}) == [
        ("5", "dev-5")]
    assert gpu_slot.kind({"AUTOTUNE_FLAGS":
                          "--dump_autotune_results_to=x"}) == "dump"
    assert gpu_slot.kind({}) == "load"
    with pytest.raises(gpu_slot.SlotError, match="AUTOTUNE_GPU_SLOT_DEVICES"):
        gpu_slot.devices({"AUTOTUNE_GPU_SLOT_DEVICES": "two"})


def test_the_wrapper_uses_autotunes_lock_directory():
    assert gpu_slot.LOCK_DIR_ENV == device_lock.LOCK_DIR_ENV
    assert gpu_slot.DEFAULT_LOCK_DIR == device_lock.DEFAULT_LOCK_DIR


def test_regenerate_runs_dump_targets_under_the_wrapper(tmp_path):
    import regenerate
    env = {"AUTOTUNE_LOCK_DIR": str(tmp_path / "l"),
           "AUTOTUNE_GPU_SLOT_DEVICES": "2"}
    args = regenerate.slot_args([], env)
    assert args[0].startswith("--run_under=") and \
        args[0].endswith("//tools:gpu_slot")
    assert f"--test_env=AUTOTUNE_LOCK_DIR={tmp_path / 'l'}" in args
    assert f"--sandbox_writable_path={tmp_path / 'l'}" in args
    assert "--test_env=AUTOTUNE_GPU_SLOT_DEVICES=2" in args
    assert regenerate.slot_args(["--run_under=mine"], env) == []
