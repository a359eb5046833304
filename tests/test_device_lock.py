"""One tuner per device: the inter-process device lock, with real
processes."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from autotune.host import device_lock
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
def _assert_workers_exit(workers, within_s=10):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(map(process_alive, workers)):
        time.sleep(0.05)
    assert not any(map(process_alive, workers)), "orphaned workers live on"


def _kill_leftovers(parent, workers):
    """What a failed test left running: its parent process and workers."""
    if parent.poll() is None:
        parent.kill()
        parent.wait()
    for pid in workers:
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


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
        _assert_workers_exit(workers)
        assert lock.try_acquire(), "a dead tuner's workers hold its device"
        lock.release()
    finally:
        _kill_leftovers(tuner, workers)


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
        _assert_workers_exit(workers)
    finally:
        _kill_leftovers(pool, workers)


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
