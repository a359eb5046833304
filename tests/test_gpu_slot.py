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
from autotune.host import device_lock, lock_files  # noqa: E402

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
    # One module for both: the wrapper loads the package's own file.
    assert os.path.samefile(gpu_slot.lock_files.__file__,
                            lock_files.__file__)
    assert device_lock.lock_dir is lock_files.lock_dir


def test_regenerate_runs_dump_targets_under_the_wrapper(tmp_path):
    from autotune.cli import regenerate_bazel
    env = {"AUTOTUNE_LOCK_DIR": str(tmp_path / "l"),
           "AUTOTUNE_GPU_SLOT_DEVICES": "2"}
    args = regenerate_bazel.slot_args([], env)
    assert args[0].startswith("--run_under=") and \
        args[0].endswith("//tools:gpu_slot")
    assert f"--test_env=AUTOTUNE_LOCK_DIR={tmp_path / 'l'}" in args
    assert f"--sandbox_writable_path={tmp_path / 'l'}" in args
    assert "--test_env=AUTOTUNE_GPU_SLOT_DEVICES=2" in args
    assert regenerate_bazel.slot_args(["--run_under=mine"], env) == []


# -- values and files the wrapper does not trust ----------------------------

def _limit_memory():
    import resource
    # A list of 10**9 devices must not take the machine down with the test.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _refused(env, timeout=60):
    """Runs the wrapper around a trivial command: its one error line
    (it must exit 2 at once, never run the command)."""
    proc = subprocess.run([sys.executable, WRAPPER, sys.executable, "-c",
                           "print('RAN')"], env=env, capture_output=True,
                          text=True, timeout=timeout,
                          preexec_fn=_limit_memory)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "RAN" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_slot: error: "), \
        proc.stderr
    return lines[0]


@pytest.mark.parametrize("name,value", [
    ("AUTOTUNE_GPU_SLOT_DEVICES", "1000000"),
    ("AUTOTUNE_GPU_SLOT_DEVICES", "9" * 30),
    ("AUTOTUNE_GPU_SLOT_DEVICES", "\u00b2"),        # superscript two
    ("AUTOTUNE_GPU_SLOT_DEVICES", "\u0663"),        # Arabic-Indic three
    ("AUTOTUNE_GPU_SLOT_DEVICES", "0"),
    ("AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE", "1000000"),
    ("AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE", "\uff12"),  # fullwidth two
    ("AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE", "-1"),
])
def test_a_count_out_of_bounds_or_not_in_ascii_digits_is_one_line(
        tmp_path, name, value):
    env = _env(tmp_path, kind="load", **{name: value})
    line = _refused(env)
    assert f"{name}=" in line and "expected a whole number from 1 to" in line
    assert line.isascii(), line


BAD_VISIBLE = {
    "more devices than any machine": ",".join(["0"] * 10_000),
    "a terminal escape": "0,\x1b]0;title\x07",
    "no file name that long": "GPU-" + "a" * 1000,
    "a path": "0,../../etc/x",
}


@pytest.mark.parametrize("case", sorted(BAD_VISIBLE))
def test_a_bad_cuda_visible_devices_is_one_line(tmp_path, case):
    env = _env(tmp_path, kind="load")
    env["CUDA_VISIBLE_DEVICES"] = BAD_VISIBLE[case]
    line = _refused(env)
    assert "CUDA_VISIBLE_DEVICES" in line and line.isascii(), line
    assert len(line) < 400
    assert not os.path.exists(env["AUTOTUNE_LOCK_DIR"]) or \
        os.listdir(env["AUTOTUNE_LOCK_DIR"]) == []


def test_uuids_and_mig_devices_in_cuda_visible_devices_are_accepted():
    uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
    mig = "MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0"
    assert gpu_slot.devices({"AUTOTUNE_GPU_SLOT_DEVICES": "3",
                             "CUDA_VISIBLE_DEVICES": f"{uuid},{mig},-1"}) \
        == [(uuid, f"dev-{uuid}"), (mig, f"dev-{mig}"), ("-1", "dev--1")]


def _slot_files(env):
    directory = env["AUTOTUNE_LOCK_DIR"]
    os.makedirs(directory, exist_ok=True)
    return [os.path.join(directory, f"slot-dev-0-{k}.lock") for k in (0, 1)]


@pytest.mark.parametrize("victim_exists", [True, False])
def test_a_planted_symlink_slot_file_is_not_followed(tmp_path,
                                                     victim_exists):
    env = _env(tmp_path, AUTOTUNE_GPU_SLOT_DEVICES="1")
    victim = tmp_path / "victim"
    if victim_exists:
        victim.write_text("keep me\n")
    os.symlink(victim, _slot_files(env)[0])
    line = _refused(env)
    assert "a symbolic link, not a regular file" in line, line
    if victim_exists:
        assert victim.read_text() == "keep me\n"
    else:
        assert not victim.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory", "hardlink"])
def test_a_fifo_directory_or_hard_link_slot_file_is_one_line(tmp_path,
                                                             kind):
    env = _env(tmp_path, AUTOTUNE_GPU_SLOT_DEVICES="1")
    path = _slot_files(env)[0]
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    {"fifo": os.mkfifo, "directory": os.mkdir,
     "hardlink": lambda p: os.link(victim, p)}[kind](path)
    line = _refused(env, timeout=30)
    assert path in line
    assert {"fifo": "a FIFO, not a regular file",
            "directory": "a directory, not a regular file",
            "hardlink": "2 hard links"}[kind] in line, line
    assert victim.read_text() == "keep me\n"


def test_a_read_only_lock_directory_is_one_line(tmp_path):
    from test_lock_files import _read_only_run
    env = _env(tmp_path, AUTOTUNE_GPU_SLOT_DEVICES="1")
    locks = env["AUTOTUNE_LOCK_DIR"]
    os.makedirs(locks)
    code = (f"import sys; sys.argv = ['gpu_slot', {sys.executable!r}, "
            "'-c', 'print(1)']; sys.path.insert(0, "
            f"{os.path.join(ROOT, 'tools')!r}); import gpu_slot; "
            "sys.exit(gpu_slot.main())")
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        proc = _read_only_run(locks, code)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if proc is None:
        if os.geteuid() == 0:
            pytest.skip("no read-only bind mount here (unshare -m)")
        # Not root: a directory without write permission refuses the
        # create the same way (EACCES instead of EROFS).
        os.chmod(locks, 0o555)
        proc = subprocess.run([sys.executable, "-c", code], env=env,
                              capture_output=True, text=True)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "gpu_slot: error: slot file "), proc.stderr
    assert "Read-only file system" in lines[0] or \
        "Permission denied" in lines[0]
    assert os.listdir(locks) == []


def test_the_default_directory_is_this_users_own(tmp_path, monkeypatch):
    assert gpu_slot.lock_files.DEFAULT_LOCK_DIR == \
        f"/tmp/rules_autotune-locks-{os.getuid()}"
    default = tmp_path / "default"
    monkeypatch.setattr(gpu_slot.lock_files, "DEFAULT_LOCK_DIR", str(default))
    assert gpu_slot.lock_directory({}) == str(default)
    assert (default.stat().st_mode & 0o777) == 0o700
    default.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    default.symlink_to(elsewhere)
    with pytest.raises(gpu_slot.SlotError,
                       match="a symbolic link, not a directory"):
        gpu_slot.lock_directory({})
    if os.geteuid() == 0:
        default.unlink()
        default.mkdir()
        os.chown(default, 65534, 65534)
        with pytest.raises(gpu_slot.SlotError, match="belongs to uid 65534"):
            gpu_slot.lock_directory({})
    # The variable still chooses any directory, shared on purpose or not.
    shared = tmp_path / "shared"
    assert gpu_slot.lock_directory({"AUTOTUNE_LOCK_DIR": str(shared)}) == \
        str(shared)


@pytest.mark.parametrize("value", ["locks", "~/locks"])
def test_a_relative_or_tilde_lock_directory_is_one_line(tmp_path, value):
    env = {**_env(tmp_path), "AUTOTUNE_LOCK_DIR": value}
    proc = subprocess.run([sys.executable, WRAPPER, sys.executable, "-c",
                           "print(1)"], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"gpu_slot: error: lock directory {value}: "), proc.stderr
    assert "absolute" in lines[0] and "AUTOTUNE_LOCK_DIR" in lines[0]
    assert sorted(os.listdir(tmp_path)) == []


def test_regenerate_refuses_a_relative_lock_directory(tmp_path, monkeypatch):
    from autotune.cli import regenerate_bazel
    from autotune.errors import RegenerateError
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RegenerateError, match="lock directory locks: .*"
                       "absolute"):
        regenerate_bazel.slot_args([], {"AUTOTUNE_LOCK_DIR": "locks"})
    assert os.listdir(tmp_path) == []


def test_regenerate_hands_a_persistent_triton_cache_to_the_dump_targets(
        tmp_path):
    from autotune.cli import regenerate_bazel
    folder = str(tmp_path / "triton")
    assert regenerate_bazel.triton_cache_args(
        {"TRITON_CACHE_DIR": folder}) == [
        f"--test_env=TRITON_CACHE_DIR={folder}",
        f"--sandbox_writable_path={folder}"]
    assert os.path.isdir(folder)
    assert regenerate_bazel.triton_cache_args({}) == []
    with pytest.raises(regenerate_bazel.RegenerateError) as raised:
        regenerate_bazel.triton_cache_args({"TRITON_CACHE_DIR": "cache"})
    assert "relative path" in str(raised.value)
