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

With `time_limit_s`, a watchdog: a worker still on one candidate that
long after it began measuring it (a hung kernel) is killed, the candidate
recorded as TIMEOUT naming its config and the limit (not retried), and a
replacement worker takes the rest.
"""
import contextlib
import functools
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import weakref

from autotune import log as logs
from autotune.errors import DeviceContextLostError
from autotune.host import device_lock
from autotune.measure.backends import corrupts_context
from autotune.search.evolutionary import Measurement

log = logs.get("tuning")

_STOP = None
# What a worker sends, as (task id, _STARTED), when it begins measuring a
# task: the watchdog's clock for that task starts there; (task id,
# _WAITING) while it waits for its device, which stops the clock.
_STARTED = "started"
_WAITING = "waiting"
# (task id, _FIRST_RUN, seconds): the candidate's first run ended; what
# is left of it (its timing) may take this many launches of that length
# (do_bench's launch and five estimates, at least one warm-up and one
# repetition, and backends.MIN_REPETITIONS more where topped up: 13,
# rounded up), after which the watchdog stops it.
_FIRST_RUN = "first_run"
TIMED_LAUNCHES_AFTER_FIRST_RUN = 16
# In a worker process: its pipe and the task it is measuring, so that
# restart_candidate_clock() can say the measuring began later.
_WORKER = {}
# The pool's ends of the workers' pipes, in this process. A forked worker
# inherits every one of them (its own pipe's too): it closes them, so that
# the pipe it reads reaches end-of-file when the pool's process is gone.
_POOL_ENDS = weakref.WeakSet()
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PARENT_POLL_S = 0.5


def exit_with_parent(parent_pid):
    """Makes this worker end when the process that started it
    (`parent_pid`) dies, whatever it is doing: a tuner killed by SIGKILL,
    SIGTERM or the OOM killer leaves no orphan measuring (and holding a
    device) behind. Linux: the kernel sends SIGKILL on the parent's death
    (prctl PR_SET_PDEATHSIG); elsewhere a thread watches the parent pid."""
    done = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            done = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0,
                              0) == 0
        except (OSError, AttributeError):
            done = False
    if os.getppid() != parent_pid:  # died before the signal was asked for
        os._exit(4)
    if done:
        return

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(4)
    threading.Thread(target=watch, daemon=True,
                     name="autotune-parent-watch").start()


def _worker_main(factory, device, conn, parent_pid=None, forked=False):
    # Results go back over a pipe with synchronous sends: whatever a worker
    # reported before dying is readable after its death.
    # CUDA_VISIBLE_DEVICES was set in the environment the worker started
    # with (see _start): setting it here would be too late, unpickling this
    # function and the factory has imported autotune and torch already.
    if parent_pid is not None:
        exit_with_parent(parent_pid)
    if forked:
        for end in list(_POOL_ENDS):
            end.close()
    objective = factory(device)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is _STOP:
            return
        task_id, config = task
        _WORKER.update(conn=conn, task=task_id)
        conn.send((task_id, _STARTED))
        retire = False
        try:
            m = objective(config)
            payload = (m.time, m.failure, m.detail, m.timing)
        except DeviceContextLostError as e:
            # This worker's CUDA context is dead: every later candidate
            # would fail here. Report this one, and exit so that a fresh
            # worker takes the device.
            payload = (None, "RUNTIME_ERROR", str(e)[:200], None)
            retire = True
        except Exception as e:  # report, keep the worker alive
            payload = (None, "RUNTIME_ERROR", f"{type(e).__name__}: {e}"[:200],
                       None)
            retire = corrupts_context(e)
        conn.send((task_id, payload))
        if retire:
            conn.close()
            os._exit(3)


def _tell_pool(what, *values):
    conn = _WORKER.get("conn")
    if conn is not None:
        conn.send((_WORKER["task"], what) + values)


def first_run_took(seconds):
    """In a worker: the candidate's first run took `seconds`; the
    watchdog's limit for the rest of it starts now, sized by it."""
    _tell_pool(_FIRST_RUN, seconds)


def pause_candidate_clock():
    """In a worker: the watchdog's clock stops for the candidate being
    measured (the worker waits for its device, which is not the
    candidate's time). Elsewhere: nothing."""
    _tell_pool(_WAITING)


def restart_candidate_clock():
    """In a worker: the candidate being measured starts now as far as the
    watchdog is concerned. Elsewhere: nothing."""
    _tell_pool(_STARTED)


_ENV_LOCK = threading.Lock()


def visible_gpu_ids(count):
    """The ids of the first `count` GPUs this process sees, as
    CUDA_VISIBLE_DEVICES names them: a worker pinned to GPU i of a parent
    started with CUDA_VISIBLE_DEVICES=2,3 gets "2" or "3", not "0" or
    "1". Entries may be indices or UUIDs; they are passed on as given."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(count)]
    ids = [d.strip() for d in visible.split(",") if d.strip()]
    return ids[:count]


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
                 gpu=False, start_method="spawn", depth=2,
                 time_limit_s=None):
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
        self.time_limit_s = time_limit_s
        self.timed_out = 0
        self.workers = [self._start(d) for d in self.devices]
        self.lost_workers = 0

    def _start(self, device):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=_worker_main, daemon=True,
            args=(self.factory, device, child, os.getpid(),
                  self.ctx.get_start_method() == "fork"))
        if self.gpu:
            # A spawned interpreter gets the parent's environment at exec
            # time: pinned before it imports anything.
            with _visible_devices(device):
                proc.start()
        else:
            proc.start()
        child.close()
        _POOL_ENDS.add(parent)
        # started: (task id, monotonic time) of the task the worker said
        # it began measuring last.
        # limit: seconds the task may take from then (time_limit_s, or
        # after its first run a limit sized by that run).
        return {"device": device, "proc": proc, "conn": parent, "busy": [],
                "started": None, "limit": None}

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
            ready = multiprocessing.connection.wait(
                waitables, timeout=self._wait_s())
            for i, w in enumerate(list(self.workers)):
                if w["conn"] in ready or w["proc"].sentinel in ready:
                    if not self._drain(w, configs, done):
                        self._replace(i, pending, done, attempts)
            for i, w in enumerate(list(self.workers)):
                if not self._overdue(w):
                    continue
                # A result that came in since the wait is read first: the
                # candidate may have just finished.
                if not self._drain(w, configs, done):
                    self._replace(i, pending, done, attempts)
                elif self._overdue(w):
                    self._stop_overdue(i, pending, done, attempts)
        return [done[i] for i in range(len(configs))]

    def _deadline(self, w):
        """When the candidate the worker is measuring runs out of time, or
        None (no limit, nothing in flight, or not begun yet)."""
        if self.time_limit_s is None or not w["busy"] or \
                w["started"] is None or w["started"][0] != w["busy"][0][0]:
            return None
        return w["started"][1] + (w["limit"] or self.time_limit_s)

    def _overdue(self, w):
        deadline = self._deadline(w)
        return deadline is not None and time.monotonic() > deadline

    def _wait_s(self):
        """How long to wait for results: a second, or less when a
        candidate's deadline comes sooner."""
        deadlines = [d for d in map(self._deadline, self.workers)
                     if d is not None]
        if not deadlines:
            return 1.0
        return min(1.0, max(0.01, min(deadlines) - time.monotonic()))

    def _stop_overdue(self, i, pending, done, attempts):
        """The watchdog: kills the worker of a candidate past its time
        limit, records the candidate as TIMEOUT (not retried: it would
        hang again) and starts a replacement for the rest."""
        w = self.workers[i]
        task_id, config = w["busy"][0]
        seconds = time.monotonic() - w["started"][1]
        w["proc"].kill()
        w["proc"].join(5.0)
        self.timed_out += 1
        detail = (f"still running after {seconds:.1f} s, past its time limit "
                  f"of {self.time_limit_s:g} s: stopped (worker for device "
                  f"{w['device']} killed)")
        log.warning(f"autotune: candidate {config} {detail}")
        done[task_id] = Measurement(config, None, "TIMEOUT", detail[:200])
        self._replace(i, pending, done, attempts, lost=False)

    def _drain(self, w, configs, done):
        """Reads every result the worker sent; False when it is dead."""
        try:
            while w["conn"].poll():
                task_id, payload, *values = w["conn"].recv()
                if isinstance(payload, str):
                    # The watchdog's clock: started, restarted after the
                    # first run with a limit sized by it, or stopped while
                    # the worker waits for its device.
                    w["started"] = None if payload == _WAITING else \
                        (task_id, time.monotonic())
                    w["limit"] = self.time_limit_s + \
                        TIMED_LAUNCHES_AFTER_FIRST_RUN * values[0] \
                        if payload == _FIRST_RUN and self.time_limit_s \
                        else None
                    continue
                w["busy"] = [b for b in w["busy"] if b[0] != task_id]
                if task_id not in done:
                    t, failure, detail, timing = payload
                    done[task_id] = Measurement(configs[task_id], t, failure,
                                                detail, timing)
        except (EOFError, OSError):
            return False
        return w["proc"].is_alive()

    def _replace(self, i, pending, done, attempts, lost=True):
        """A fresh worker for worker i; lost: it died (a watchdog's kill is
        counted in timed_out instead)."""
        w = self.workers[i]
        w["proc"].join(1.0)
        self.lost_workers += lost
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


# -- the miss path: one fusion's candidates in worker processes -----------

def _evaluator_objective(evaluator):
    """objective(config) -> Measurement over a tuner.CandidateEvaluator."""
    def objective(config):
        return Measurement.of_candidate(config, *evaluator(config))
    return objective


def _forked_factory(evaluator):
    # Fork start: the worker inherits the evaluator (kernel, arguments,
    # reference outputs) as it is in the tuning process; nothing is pickled.
    def factory(device):
        evaluator.compile_checker = None  # checked by the tuning process
        evaluator.on_benchmark = None  # counted by the tuning process
        return _evaluator_objective(evaluator)
    return factory


class _Replay:
    def __init__(self, pool, evaluator):
        self.pool = pool
        self.evaluator = evaluator
        self.answers = {}

    def precheck(self, configs):
        todo = [c for c in dict.fromkeys(configs) if c not in self.answers]
        self.answers.update(zip(todo, self.pool.measure_many(todo)))

    def __call__(self, config):
        if config not in self.answers:
            self.precheck([config])
        return self.answers[config]

    def retime(self, config):
        return self.evaluator.retime(config)

    def finish(self):
        self.evaluator.finish()


def _to(value, device):
    return value.to(device) if hasattr(value, "copy_") else value


def _rebuilt_objective(spec_bytes, device):
    """In a spawned GPU worker (CUDA_VISIBLE_DEVICES already pinned): the
    kernel by reference, its arguments moved to the worker's GPU, and the
    reference outputs the tuning process computed."""
    import importlib
    import pickle
    import sys

    from autotune.measure import backends
    from autotune.measure import tuner
    spec = pickle.loads(spec_bytes)
    module_name, attribute = spec["kernel"]
    module = sys.modules.get(module_name) or \
        importlib.import_module(module_name)
    autotuner = getattr(module, attribute)
    backend = backends.GpuBackend(**spec["backend"])
    args = [_to(a, backend.device) for a in spec["args"]]
    kwargs = {k: _to(v, backend.device) for k, v in spec["kwargs"].items()}
    named = autotuner._bind(args, kwargs)
    tensors = {k: v for k, v in named.items() if hasattr(v, "copy_")}
    grid = [spec["grid"]]  # the current task's grid when sent per config
    evaluator = tuner.CandidateEvaluator(
        backend, lambda config: autotuner._launch(config, grid[0], args,
                                                  kwargs, named),
        tensors, outputs=autotuner.outputs, rtol=spec["rtol"],
        atol=spec["atol"], timeout_s=autotuner.timeout_s,
        # As in the tuning process: every tensor is watched and restored
        # between candidates; restore_value and reset_to_zero (Triton's
        # meaning) are applied before each launch by the setup.
        name=autotuner.name, setup=autotuner._tuning_setup(named),
        on_first_run=first_run_took)
    evaluator.expected = {k: _to(v, backend.device)
                          for k, v in spec["expected"].items()}
    measure = _evaluator_objective(evaluator)
    if spec.get("grid_per_config"):
        per_config = measure

        def measure(task):
            config, grid[0] = task
            return per_config(config)
    return holding_device(measure, device_lock.device_identity(backend),
                          spec.get("parent_device"))


def holding_device(objective, identity, parent_identity=None):
    """objective, measuring only while this worker holds the lock of its
    device (`identity`, autotune.host.device_lock): taken at the first
    measurement and held until the worker exits, which is when the pool of
    one fusion's tuning closes. A worker on the tuning process's own
    device (`parent_identity`) takes nothing: the tuning process holds
    that device's lock for it, and taking it here would wait forever."""
    if identity == parent_identity:
        return objective
    turn = device_lock.DeviceTurn(identity=identity)

    def measure_holding(task):
        if turn.start is None:
            # The wait for the device is not the candidate's time.
            pause_candidate_clock()
            turn.take()
            restart_candidate_clock()
        return objective(task)
    return measure_holding


def _grid_of_config(grid, named, config):
    """The launch grid of `config`, as Triton computes it from a callable
    grid: called with the bound arguments and the config's
    meta-parameters."""
    value = grid({**named, **config.all_kwargs()})
    return tuple(int(v) for v in value)


# A candidate in a worker is stopped by the watchdog this many times its
# time limit (the evaluator's timeout_s, 60 s by default, which bounds its
# first run: compiling and one launch) after it began, unless its first run
# ended by then: the rest of it then has that limit plus
# TIMED_LAUNCHES_AFTER_FIRST_RUN times the first run's length.
WORKER_LIMIT_FACTOR = 2.0


class CandidatePool:
    """Measures one fusion's candidates in `workers` processes, for the
    tuner's miss path: measure_many(configs) -> [(Candidate, Timing)] in
    the order given, as the in-process evaluator would return them.

    The reference outputs are computed here first (the reference function,
    or the first candidate that runs, measured in this process), so every
    worker compares against the same values. On the interpreter the workers
    are forked copies of this process; on GPUs they are spawned, one per
    visible GPU (never more than asked), and rebuild the launch from the
    kernel's module-level name and the call's arguments.
    """

    def __init__(self, evaluator, workers, gpu_spec=None, gpu_count=0,
                 take_device=None, parent_device=None):
        self.grid_of = None  # config -> launch grid tuple, for GPU workers
        self.evaluator = evaluator
        # Takes the tuning process's device lock (the session's turn) before
        # any worker measures; parent_device() names that device, whose
        # worker then takes no lock of its own.
        self.take_device = take_device
        self.parent_device = parent_device
        self.workers = workers
        self.gpu_spec = gpu_spec
        self.gpu_count = gpu_count
        self.pool = None

    @classmethod
    def for_miss(cls, evaluator, workers, backend, autotuner=None,
                 grid=None, args=(), kwargs=None, take_device=None):
        """A pool, or None when tuning stays in this process (one worker,
        one GPU, or a launch that cannot be rebuilt in another process).
        take_device: called before the workers measure (the session's
        device turn)."""
        if workers <= 1:
            return None
        if backend.name != "gpu":
            return cls(evaluator, workers, take_device=take_device)
        import pickle
        import torch
        count = min(workers, torch.cuda.device_count())
        reason = None
        if count <= 1:
            reason = "one GPU visible"
        kernel = module_name_of(autotuner)
        if reason is None and kernel is None:
            reason = (f"{autotuner.name} is not a module-level name, so "
                      "worker processes cannot import it")
        if reason is None:
            # A grid as users write it (a lambda over the meta-parameters)
            # cannot be pickled: it is evaluated here, per config, and the
            # worker gets the tuple (see _tasks).
            spec = {"kernel": kernel,
                    "grid": None if callable(grid) else grid,
                    "grid_per_config": callable(grid),
                    "args": [_to(a, "cpu") for a in args],
                    "kwargs": {k: _to(v, "cpu")
                               for k, v in (kwargs or {}).items()},
                    "backend": {"warmup_ms": backend.warmup_ms,
                                "rep_ms": backend.rep_ms}}
            try:
                pickle.dumps(spec)
            except Exception as e:
                reason = f"the launch cannot be sent to a worker ({e})"
        if reason is not None:
            log.warning(f"autotune: --autotune_workers={workers}: tuning "
                        f"{getattr(autotuner, 'name', 'the kernel')} in "
                        f"process: {reason}")
            return None
        pool = cls(evaluator, count, gpu_spec=spec, gpu_count=count,
                   take_device=take_device,
                   parent_device=functools.partial(
                       device_lock.device_identity, backend))
        if callable(grid):
            pool.grid_of = functools.partial(_grid_of_config, grid,
                                             autotuner._bind(args, kwargs
                                                             or {}))
        return pool

    def time_limit_s(self):
        """The watchdog's limit for one candidate in a worker (see
        WORKER_LIMIT_FACTOR), or None where the evaluator has no limit."""
        limit = getattr(self.evaluator, "timeout_s", None)
        return None if not limit else limit * WORKER_LIMIT_FACTOR

    def _start(self):
        if self.gpu_spec is None:
            self.pool = ParallelEvaluator(
                _forked_factory(self.evaluator),
                devices=[f"cpu{i}" for i in range(self.workers)],
                start_method="fork", time_limit_s=self.time_limit_s())
            return
        import functools
        import pickle
        spec = dict(self.gpu_spec)
        spec["expected"] = {k: _to(v, "cpu")
                            for k, v in self.evaluator.expected.items()}
        spec["rtol"], spec["atol"] = self.evaluator.rtol, self.evaluator.atol
        if self.parent_device is not None:
            spec["parent_device"] = self.parent_device()
        self.pool = ParallelEvaluator(
            functools.partial(_rebuilt_objective, pickle.dumps(spec)),
            devices=visible_gpu_ids(self.gpu_count), gpu=True,
            time_limit_s=self.time_limit_s())

    def _tasks(self, configs):
        """What the workers are sent: configs, or (config, grid tuple)
        pairs when the grid is a callable evaluated here."""
        if self.grid_of is None:
            return list(configs)
        return [(c, self.grid_of(c)) for c in configs]

    def measure_many(self, configs):
        from autotune.records import Candidate
        configs = list(configs)
        out = []
        # Compile checks (--autotune_compile_check) stay here; a rejected
        # config is answered without a launch, as in process.
        self.evaluator.precheck(configs)
        rejected = getattr(self.evaluator, "rejected", {})
        answers = {c: self.evaluator(c) for c in configs if c in rejected}
        order = configs
        configs = [c for c in configs if c not in rejected]
        # Until the reference outputs exist, candidates run here, in order:
        # the first one that runs is the reference, as with one worker.
        while configs and self.evaluator.expected is None:
            out.append(self.evaluator(configs.pop(0)))
        if configs:
            if self.take_device is not None:
                # One tuner per device: this process's device is measured
                # on by a worker too (on the interpreter, by all of them).
                self.take_device()
            if self.pool is None:
                self._start()
            for config, m in zip(configs,
                                 self.pool.evaluate(self._tasks(configs))):
                if self.evaluator.on_benchmark is not None:
                    self.evaluator.on_benchmark()
                out.append((Candidate(config, m.time or 0.0, m.failure,
                                      m.detail), m.timing))
        answers.update((answer[0].config, answer) for answer in out)
        return [answers[c] for c in order]

    def replay(self, evaluator):
        """An evaluator for tuner.run_candidates whose answers the workers
        measured: run_candidates hands every config to precheck first, and
        they are measured there in one parallel batch."""
        return _Replay(self, evaluator)

    def close(self):
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def module_name_of(obj):
    """(module, attribute) under which `obj` is a module-level global."""
    import sys
    kernel = getattr(obj, "kernel", None)
    fn = getattr(kernel, "fn", kernel)
    module_name = getattr(fn, "__module__", None)
    module = sys.modules.get(module_name) if module_name else None
    for name, value in vars(module).items() if module else ():
        if value is obj:
            return module_name, name
    return None
