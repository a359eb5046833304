"""One tuner per device: the inter-process device lock, with real
processes."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from autotune.host import device_lock, lock_files
from autotune.measure.fake_backend import FakeBackend

from tests_support import process_alive

HERE = os.path.dirname(os.path.abspath(__file__))


def _spawn(script, *args, env=None, stdin=None):
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "workers", script)]
        + [str(a) for a in args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env, stdin=stdin)


def test_sigkilled_holder_frees_the_lock(tmp_path):
    holder = _spawn("hold_lock.py", tmp_path, "gpu-test")
    try:
        assert holder.stdout.readline().strip() == "HELD"
        lock = device_lock.DeviceTurn(identity="gpu-test",
                                      directory=str(tmp_path)).lock
        assert not lock.try_acquire()
        assert device_lock.holder_of(lock.path) == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel dropped the dead process's flock; its file (naming the
    # dead pid) is still there and does not block.
    assert device_lock.holder_of(lock.path) == holder.pid
    start = time.monotonic()
    assert lock.try_acquire()
    assert time.monotonic() - start < 1.0
    assert device_lock.holder_of(lock.path) == os.getpid()
    lock.release()


def test_stale_lock_file_does_not_block(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; "
                           "print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    turn = device_lock.DeviceTurn(identity="host-x", directory=str(tmp_path))
    with open(turn.lock.path, "w") as f:
        f.write(dead + "\n")
    turn.take()
    assert turn.waited_s == 0.0
    turn.release()
    assert set(turn.report()) == {"device_wait_s", "tuning_start",
                                  "tuning_end"}


def test_waiting_logs_the_holder_once(tmp_path, capsys):
    holder = _spawn("hold_lock.py", tmp_path, "gpu-a")
    try:
        assert holder.stdout.readline().strip() == "HELD"
        turn = device_lock.DeviceTurn(identity="gpu-a",
                                      directory=str(tmp_path))
        import threading
        threading.Timer(1.0, holder.send_signal, (signal.SIGKILL,)).start()
        turn.take()
        turn.release()
    finally:
        holder.kill()
        holder.wait()
    waits = [line for line in capsys.readouterr().err.splitlines()
             if "waiting" in line]
    assert len(waits) == 1 and f"pid {holder.pid}" in waits[0], waits
    assert turn.waited_s >= 0.5


def test_devices_have_separate_locks(tmp_path):
    a = device_lock.DeviceTurn(identity="gpu-a", directory=str(tmp_path))
    b = device_lock.DeviceTurn(identity="gpu-b", directory=str(tmp_path))
    a.take()
    assert b.lock.try_acquire()  # another device: not blocked
    b.lock.release()
    a.release()


def test_interpreter_identity_is_the_host():
    import socket
    from autotune.measure import backends
    assert device_lock.device_identity(backends.InterpreterBackend()) == \
        "host-" + socket.gethostname()


@pytest.mark.slow
def test_two_processes_tune_one_at_a_time(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1",
               AUTOTUNE_LOCK_DIR=str(tmp_path / "locks"))
    reports = [tmp_path / f"report{i}.json" for i in range(2)]
    procs = [_spawn("lock_tuner.py", r, 40, 72, env=env,
                    stdin=subprocess.PIPE) for r in reports]
    # Both start tuning at once (imports take seconds, and unequally):
    # each says READY, then waits for GO.
    for p in procs:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()
    for p in procs:
        p.stdin.write("GO\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    fusions = []
    for r in reports:
        tuned = [f for f in json.loads(r.read_text())["fusions"]
                 if f["status"] == "tuned"]
        assert len(tuned) == 2
        fusions.append(tuned)
    intervals = sorted((f["tuning_start"], f["tuning_end"], i)
                       for i, tuned in enumerate(fusions) for f in tuned)
    for (s0, e0, _), (s1, e1, _) in zip(intervals, intervals[1:]):
        assert e0 <= s1, intervals  # never two tunings at once
    # Both processes started together: one waited for the other at least
    # once (the one that lost the first race, and the other for its second
    # fusion unless it finished both first).
    waits = [[f["device_wait_s"] for f in tuned] for tuned in fusions]
    assert sum(w > 0 for ws in waits for w in ws) >= 1, waits
    assert all(any(w > 0 for w in ws) for ws in waits) or \
        [i for _, _, i in intervals] in ([0, 0, 1, 1], [1, 1, 0, 0]), waits


def test_a_gpu_is_named_by_its_uuid_whatever_index_it_has(monkeypatch):
    """Two processes seeing one GPU as cuda:0 (CUDA_VISIBLE_DEVICES=3) and
    as cuda:3 (all visible) take the same lock."""
    import types
    import torch

    def FakeGpu(index):
        return FakeBackend(name="gpu", device=torch.device("cuda", index))
    physical = {("3", 0): "GPU-aaaa", (None, 3): "GPU-aaaa",
                (None, 0): "GPU-bbbb"}

    def props(device):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return types.SimpleNamespace(uuid=physical[(visible, device.index)])
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    seen_through_one = device_lock.device_identity(FakeGpu(0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_lock.device_identity(FakeGpu(3)) == seen_through_one == \
        "gpu-GPU-aaaa"
    assert device_lock.device_identity(FakeGpu(0)) == "gpu-GPU-bbbb"


# -- --autotune_workers: each worker holds its own device's lock ------------

def _stamping_factory(parent_identity, device):
    """Objective factory for a worker on simulated GPU `device`: reports
    the device, its pid and when it measured, measuring only while it
    holds that device's lock (the parent's device excepted)."""
    from autotune.runtime import parallel
    from autotune.search import evolutionary as ev

    def objective(config):
        return ev.Measurement(config, 1.0, "NONE",
                              f"{device} {os.getpid()} {time.time()}")
    return parallel.holding_device(objective, f"gpu-{device}",
                                   parent_identity)


def test_each_worker_measures_holding_its_devices_lock(tmp_path,
                                                       monkeypatch):
    import functools
    import threading

    from autotune import Config
    from autotune.runtime.parallel import ParallelEvaluator
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    # This process tunes on device 0 and holds its lock; another process
    # measures on device 1.
    parent = device_lock.DeviceTurn(identity="gpu-0")
    parent.take()
    holder = _spawn("hold_lock.py", tmp_path, "gpu-1")
    results = {}
    try:
        assert holder.stdout.readline().strip() == "HELD"
        configs = [Config({"x": i}) for i in range(6)]
        with ParallelEvaluator(functools.partial(_stamping_factory, "gpu-0"),
                               devices=["0", "1"], start_method="fork",
                               depth=1) as pool:
            run = threading.Thread(
                target=lambda: results.update(m=pool.evaluate(configs)))
            run.start()
            time.sleep(1.5)
            freed = time.time()
            holder.kill()
            holder.wait()
            run.join(60)
            assert not run.is_alive(), "a worker waits for a lock forever"
            seen = [m.detail.split() for m in results["m"]]
            by_device = {}
            for device, pid, at in seen:
                by_device.setdefault(device, []).append((int(pid),
                                                         float(at)))
            # Device 0's worker did not wait: the parent's lock covers it.
            assert min(at for _, at in by_device["0"]) < freed, seen
            # Device 1's worker measured only once the other process let
            # go, and holds the lock while the pool lives.
            assert min(at for _, at in by_device["1"]) >= freed, seen
            lock = device_lock.DeviceTurn(identity="gpu-1").lock
            assert device_lock.holder_of(lock.path) == by_device["1"][0][0]
            assert not lock.try_acquire()
        # The pool closed: its workers let go.
        assert lock.try_acquire()
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        parent.release()


class _StampingEvaluator:
    """What CandidatePool needs of a tuner.CandidateEvaluator: the
    reference outputs are known (a reference= ran), so every candidate
    goes to the workers; each reports when it ran as its time."""
    expected = {"y": None}
    on_benchmark = None
    compile_checker = None
    rejected = {}

    def precheck(self, configs):
        pass

    def __call__(self, config):
        from autotune.records import Candidate
        return Candidate(config, time.time(), "NONE", ""), None


def test_the_tuning_process_takes_its_device_before_workers_measure():
    from autotune import Config
    from autotune.runtime import parallel
    taken = []
    pool = parallel.CandidatePool(_StampingEvaluator(), 2,
                                  take_device=lambda: taken.append(
                                      time.time()))
    try:
        answers = pool.measure_many([Config({"x": i}) for i in range(4)])
    finally:
        pool.close()
    assert len(taken) >= 1
    assert all(candidate.run_time_us >= taken[0]
               for candidate, _ in answers), (taken, answers)


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []




@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"),
                    reason="reads a process's children from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_tuner_leaves_no_worker_holding_its_device(tmp_path, sig):
    """--autotune_workers=2 forks workers while the tuner holds the device
    lock: killed mid-tuning, the tuner's lock is free at once (no worker
    shares it) and its orphaned workers exit."""
    env = {**os.environ, device_lock.LOCK_DIR_ENV: str(tmp_path)}
    tuner = _spawn("pool_tuner.py", 8192, env=env)
    lock = device_lock.DeviceTurn(identity="host-" + __import__(
        "socket").gethostname(), directory=str(tmp_path)).lock
    workers = []
    try:
        assert tuner.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                len(workers) >= 2
                and device_lock.holder_of(lock.path) == tuner.pid):
            assert tuner.poll() is None, tuner.stderr.read()
            time.sleep(0.05)
            workers = _children(tuner.pid)
        assert len(workers) >= 2, "the workers never started"
        assert not lock.try_acquire()
        tuner.send_signal(sig)
        tuner.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(process_alive, workers)):
            time.sleep(0.05)
        assert not any(map(process_alive, workers)), "orphaned workers live on"
        assert lock.try_acquire(), "a dead tuner's workers hold its device"
        lock.release()
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
        for pid in workers:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"),
                    reason="reads process states from /proc (Linux)")
def test_spawned_workers_exit_when_their_pool_process_dies():
    """GPU workers are spawned: a SIGKILLed pool process leaves none of
    them measuring."""
    pool = _spawn("spawn_pool.py")
    workers = []
    try:
        workers = [int(p) for p in pool.stdout.readline().split()]
        assert len(workers) == 2, pool.stderr.read()
        time.sleep(1.0)  # started and measuring (a minute per candidate)
        assert all(map(process_alive, workers))
        pool.send_signal(signal.SIGKILL)
        pool.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(process_alive, workers)):
            time.sleep(0.05)
        assert not any(map(process_alive, workers)), "orphaned workers live on"
    finally:
        if pool.poll() is None:
            pool.kill()
            pool.wait()
        for pid in workers:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_forked_child_does_not_hold_the_parents_lock(tmp_path):
    turn = device_lock.DeviceTurn(identity="host-x", directory=str(tmp_path))
    turn.take()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: holds no lock, and believes it holds none
        os.close(read)
        os.write(write, b"held" if turn.lock.held else b"free")
        time.sleep(30)
        os._exit(0)
    try:
        os.close(write)
        assert os.read(read, 4) == b"free"
        turn.release()
        other = device_lock.DeviceTurn(identity="host-x",
                                       directory=str(tmp_path)).lock
        assert other.try_acquire(), "a forked child keeps the lock"
        other.release()
    finally:
        os.close(read)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# -- a lock directory others can write: nothing in it is trusted -----------

def _turn(tmp_path, identity="gpu-x"):
    return device_lock.DeviceTurn(identity=identity,
                                  directory=str(tmp_path / "locks"))


def _one_line(error):
    text = str(error)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("victim_exists", [True, False])
def test_a_planted_symlink_is_not_followed(tmp_path, victim_exists):
    """Someone who can write the directory points the lock file at a file
    of the user's (or root's): the lock neither creates nor overwrites
    it."""
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    victim = tmp_path / "victim"
    if victim_exists:
        victim.write_text("keep me\n")
    os.symlink(victim, turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        turn.take()
    text = _one_line(raised.value)
    assert turn.lock.path in text and "a symbolic link" in text, text
    if victim_exists:
        assert victim.read_text() == "keep me\n"
    else:
        assert not victim.exists()
    assert not turn.lock.held


def test_a_hard_link_to_another_file_is_refused(tmp_path):
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.link(victim, turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError, match="2 hard links"):
        turn.take()
    assert victim.read_text() == "keep me\n"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_in_place_of_the_lock_file_is_one_line(
        tmp_path, kind):
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    if kind == "fifo":
        os.mkfifo(turn.lock.path)
    else:
        os.mkdir(turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        turn.take()
    text = _one_line(raised.value)
    expected = "a FIFO" if kind == "fifo" else "a directory"
    assert f"{expected}, not a regular file" in text, text


def test_the_holder_of_a_fifo_is_read_without_hanging(tmp_path):
    import threading
    fifo = tmp_path / "gpu-x.lock"
    os.mkfifo(fifo)
    found = []
    reader = threading.Thread(
        target=lambda: found.append(device_lock.holder_of(str(fifo))),
        daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "holder_of blocked on a FIFO"
    assert found == [None]


@pytest.mark.parametrize("text", ["\u00b2\n", "\u0663\u0664\n", "12x\n",
                                  "9" * 40 + "\n"])
def test_a_lock_file_that_holds_no_ascii_pid_names_no_holder(tmp_path,
                                                             text):
    path = tmp_path / "gpu-x.lock"
    path.write_text(text, encoding="utf-8")
    assert device_lock.holder_of(str(path)) is None
    path.write_text("4242\n")
    assert device_lock.holder_of(str(path)) == 4242


def test_a_long_device_name_makes_a_bounded_file_name(tmp_path):
    turn = _turn(tmp_path, identity="gpu-" + "7," * 5000)
    name = os.path.basename(turn.lock.path)
    assert len(name) <= 130 and name.endswith(".lock"), name
    other = _turn(tmp_path, identity="gpu-" + "7," * 5001)
    assert other.lock.path != turn.lock.path
    turn.take()
    assert turn.lock.held
    turn.release()


def _read_only_run(directory, code):
    """Runs `code` in a Python whose view of `directory` is a read-only
    bind mount (a private mount namespace: nothing leaks out); None when
    this host cannot make one."""
    import shutil
    if shutil.which("unshare") is None:
        return None
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
              '|| exit 99; shift; exec "$@"')
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         "sh", str(directory), sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
    if proc.returncode == 99 or "unshare:" in proc.stderr[:200]:
        return None
    return proc


def test_a_read_only_lock_directory_is_one_line(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    code = ("from autotune.host import device_lock\n"
            "turn = device_lock.DeviceTurn(identity='gpu-x', "
            f"directory={str(locks)!r})\n"
            "try:\n"
            "    turn.take()\n"
            "except device_lock.DeviceLockError as e:\n"
            "    print('ERROR', e)\n")
    proc = _read_only_run(locks, code)
    if proc is None:
        if os.geteuid() == 0:
            pytest.skip("no read-only bind mount here (unshare -m)")
        # Not root: a directory without write permission refuses the
        # create the same way (EACCES instead of EROFS).
        locks.chmod(0o555)
        proc = subprocess.run([sys.executable, "-c", code],
                              capture_output=True, text=True,
                              env=dict(os.environ,
                                       PYTHONPATH=os.path.dirname(HERE)))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, \
        proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR lock file"), lines
    assert "Read-only file system" in lines[0] or \
        "Permission denied" in lines[0]
    assert os.listdir(locks) == []


def test_the_default_directory_is_this_users_own(tmp_path, monkeypatch):
    assert lock_files.DEFAULT_LOCK_DIR == \
        f"/tmp/rules_autotune-locks-{os.getuid()}"
    monkeypatch.delenv(device_lock.LOCK_DIR_ENV, raising=False)
    default = tmp_path / "default"
    monkeypatch.setattr(lock_files, "DEFAULT_LOCK_DIR", str(default))
    assert device_lock.lock_dir() == str(default)
    # Missing: created private.
    turn = device_lock.DeviceTurn(identity="gpu-x")
    turn.take()
    turn.release()
    assert (default.stat().st_mode & 0o777) == 0o700
    # Ours but writable by others: narrowed.
    default.chmod(0o777)
    turn = device_lock.DeviceTurn(identity="gpu-x")
    turn.take()
    turn.release()
    assert default.stat().st_mode & 0o022 == 0


def test_a_planted_default_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(device_lock.LOCK_DIR_ENV, raising=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    default = tmp_path / "default"
    default.symlink_to(elsewhere)
    monkeypatch.setattr(lock_files, "DEFAULT_LOCK_DIR", str(default))
    with pytest.raises(device_lock.DeviceLockError) as raised:
        device_lock.DeviceTurn(identity="gpu-x").take()
    text = _one_line(raised.value)
    assert "a symbolic link, not a directory" in text, text
    assert os.listdir(elsewhere) == []
    if os.geteuid() == 0:
        default.unlink()
        default.mkdir()
        os.chown(default, 65534, 65534)  # another user made it first
        with pytest.raises(device_lock.DeviceLockError,
                           match="belongs to uid 65534"):
            device_lock.DeviceTurn(identity="gpu-x").take()
        assert os.listdir(default) == []


@pytest.mark.parametrize("value", ["locks", "./locks", "~/locks", "~",
                                   "~other/locks"])
def test_a_relative_or_tilde_lock_directory_is_refused(tmp_path, monkeypatch,
                                                       value):
    """Resolved per working directory (each Bazel test runs in its own
    runfiles tree), such a directory would give every process its own
    lock: refused, one line saying why, and nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, value)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        device_lock.DeviceTurn(identity="gpu-x").take()
    text = _one_line(raised.value)
    assert text.startswith(f"lock directory {value}: ") and \
        device_lock.LOCK_DIR_ENV in text and "absolute" in text, text
    if value.startswith("~"):
        assert "~ is not expanded" in text, text
    else:
        assert "a relative path" in text, text
    assert os.listdir(tmp_path) == []
