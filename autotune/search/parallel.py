"""Parallel tuning: one worker process per device evaluates candidates.

    evaluator = ParallelEvaluator(factory, devices=["0", "1"])
    measurements = evaluator.evaluate(configs)   # same order as configs

`factory(device)` runs in each worker (it must be picklable: a module-level
function or a functools.partial of one) and returns an objective:
objective(config) -> Measurement. On GPUs each worker sees only its device
(CUDA_VISIBLE_DEVICES is set before anything imports torch); on the CPU the
workers are plain processes.

A worker that dies loses nothing the others measured: its in-flight
candidate is retried on another worker (`retries` times), then recorded as
a RUNTIME_ERROR naming the lost worker, and a replacement worker starts.
"""
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import threading
import time

from autotune.search.evolutionary import Measurement

_STOP = None


def _worker_main(factory, device, conn):
    # Results go back over a pipe with synchronous sends: whatever a worker
    # reported before dying is readable after its death.
    # CUDA_VISIBLE_DEVICES was set in the environment the worker started
    # with (see _start): setting it here would be too late, unpickling this
    # function and the factory has imported autotune and torch already.
    objective = factory(device)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is _STOP:
            return
        task_id, config = task
        try:
            m = objective(config)
            payload = (m.time, m.failure, m.detail)
        except Exception as e:  # report, keep the worker alive
            payload = (None, "RUNTIME_ERROR", f"{type(e).__name__}: {e}"[:200])
        conn.send((task_id, payload))


_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _visible_devices(device):
    with _ENV_LOCK:
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
        try:
            yield
        finally:
            if saved is None:
                del os.environ["CUDA_VISIBLE_DEVICES"]
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = saved


class ParallelEvaluator:
    def __init__(self, factory, devices=("cpu0", "cpu1"), retries=1,
                 gpu=False, start_method="spawn", depth=2):
        if not devices:
            raise ValueError("ParallelEvaluator needs at least one device")
        self.factory = factory
        self.devices = list(devices)
        self.retries = retries
        self.depth = depth
        self.gpu = gpu
        if gpu and start_method != "spawn":
            # A forked worker inherits the parent's CUDA state, and a fork
            # server its environment at start: only a spawned worker starts
            # with its own CUDA_VISIBLE_DEVICES.
            raise ValueError("GPU workers need start_method='spawn'")
        self.ctx = multiprocessing.get_context(start_method)
        self.workers = [self._start(d) for d in self.devices]
        self.lost_workers = 0

    def _start(self, device):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main,
                                args=(self.factory, device, child),
                                daemon=True)
        if self.gpu:
            # A spawned interpreter gets the parent's environment at exec
            # time: pinned before it imports anything.
            with _visible_devices(device):
                proc.start()
        else:
            proc.start()
        child.close()
        return {"device": device, "proc": proc, "conn": parent, "busy": []}

    def evaluate(self, configs):
        pending = list(enumerate(configs))
        pending.reverse()
        done = {}
        attempts = {}
        while len(done) < len(configs):
            for w in self.workers:
                # Two tasks in flight per worker: the next one is queued
                # before the current one ends, so no worker waits on us.
                while len(w["busy"]) < self.depth and pending:
                    task_id, config = pending.pop()
                    attempts[task_id] = attempts.get(task_id, 0) + 1
                    w["busy"].append((task_id, config))
                    try:
                        w["conn"].send((task_id, config))
                    except OSError:
                        break  # dead: found below
            waitables = [w["conn"] for w in self.workers] + [
                w["proc"].sentinel for w in self.workers]
            ready = multiprocessing.connection.wait(waitables, timeout=1.0)
            for i, w in enumerate(list(self.workers)):
                if w["conn"] in ready or w["proc"].sentinel in ready:
                    if not self._drain(w, configs, done):
                        self._replace(i, pending, done, attempts)
        return [done[i] for i in range(len(configs))]

    def _drain(self, w, configs, done):
        """Reads every result the worker sent; False when it is dead."""
        try:
            while w["conn"].poll():
                task_id, payload = w["conn"].recv()
                w["busy"] = [b for b in w["busy"] if b[0] != task_id]
                if task_id not in done:
                    t, failure, detail = payload
                    done[task_id] = Measurement(configs[task_id], t, failure,
                                                detail)
        except (EOFError, OSError):
            return False
        return w["proc"].is_alive()

    def _replace(self, i, pending, done, attempts):
        w = self.workers[i]
        w["proc"].join(1.0)
        self.lost_workers += 1
        self.workers[i] = self._start(w["device"])
        for position, (task_id, config) in enumerate(w["busy"]):
            if task_id in done:
                continue
            if position > 0:
                # Queued behind the candidate that killed the worker: never
                # started, so not an attempt.
                attempts[task_id] -= 1
                pending.append((task_id, config))
            elif attempts[task_id] <= self.retries:
                pending.append((task_id, config))
            else:
                done[task_id] = Measurement(
                    config, None, "RUNTIME_ERROR",
                    f"worker for device {w['device']} died (exit code "
                    f"{w['proc'].exitcode}) {attempts[task_id]} time(s) on "
                    "this candidate")

    def close(self):
        for w in self.workers:
            try:
                w["conn"].send(_STOP)
            except OSError:
                pass
        deadline = time.time() + 5
        for w in self.workers:
            w["proc"].join(max(0.0, deadline - time.time()))
            if w["proc"].is_alive():
                w["proc"].kill()
            w["conn"].close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
