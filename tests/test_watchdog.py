"""The watchdog: a candidate that runs past its time limit is stopped (in a
worker process) or named while it still runs (in the tuning process)."""
import functools
import logging
import os
import time

import pytest
import torch

from autotune.measure import backends, tuner
from autotune.records import Config
from autotune.runtime import parallel
from autotune.runtime.parallel import ParallelEvaluator
from autotune.search import evolutionary as ev

from tests_support import process_alive

LIMIT_S = 1.0
# Killing the worker and forking its replacement, on a loaded CI machine.
MARGIN_S = 4.0


@pytest.fixture
def caplog(caplog):
    """caplog that sees the autotune logger (which does not propagate)."""
    logger = logging.getLogger("autotune")
    logger.propagate = True
    yield caplog
    logger.propagate = False


def hanging_objective(device, hang_on, pids):
    def objective(config):
        if config.kwargs["x"] == hang_on:
            pids.put(os.getpid())
            time.sleep(600)  # a kernel that never returns
        return ev.Measurement(config, float(config.kwargs["x"]) + 1.0)
    return objective




def test_a_hung_candidate_in_a_worker_is_stopped_and_reported(caplog):
    import multiprocessing
    pids = multiprocessing.get_context("fork").SimpleQueue()
    configs = [Config({"x": i}) for i in range(6)]
    factory = functools.partial(hanging_objective, hang_on=2, pids=pids)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="autotune"):
        with ParallelEvaluator(factory, devices=["cpu0", "cpu1"],
                               start_method="fork",
                               time_limit_s=LIMIT_S) as evaluator:
            results = evaluator.evaluate(configs)
            assert evaluator.timed_out == 1
    elapsed = time.monotonic() - start
    assert elapsed < LIMIT_S + MARGIN_S, elapsed
    assert [r.config for r in results] == configs
    for r in results:
        if r.config.kwargs["x"] == 2:
            assert r.failure == "TIMEOUT", r.detail
            assert "time limit of 1 s" in r.detail and "stopped" in r.detail
        else:
            assert r.ok and r.time == r.config.kwargs["x"] + 1.0
    hung = pids.get()
    assert not process_alive(hung)
    warning = [r.getMessage() for r in caplog.records
               if "time limit" in r.getMessage()]
    assert len(warning) == 1 and str(configs[2]) in warning[0], warning


def test_no_limit_no_watchdog():
    configs = [Config({"x": i}) for i in range(3)]
    factory = functools.partial(hanging_objective, hang_on=-1, pids=None)
    with ParallelEvaluator(factory, devices=["cpu0"],
                           start_method="fork") as evaluator:
        assert all(r.ok for r in evaluator.evaluate(configs))
        assert evaluator.timed_out == 0


class _SleepingEvaluator:
    """What CandidatePool needs of a tuner.CandidateEvaluator, with the
    evaluator's time limit; config x=1 hangs."""
    expected = {"y": None}
    on_benchmark = None
    compile_checker = None
    rejected = {}
    timeout_s = LIMIT_S / parallel.WORKER_LIMIT_FACTOR

    def precheck(self, configs):
        pass

    def __call__(self, config):
        from autotune.records import Candidate
        if config.kwargs["x"] == 1:
            time.sleep(600)
        return Candidate(config, 10.0 + config.kwargs["x"], "NONE", ""), None


def test_the_miss_paths_pool_stops_a_hung_candidate_at_its_limit():
    pool = parallel.CandidatePool(_SleepingEvaluator(), 2)
    assert pool.time_limit_s() == LIMIT_S
    start = time.monotonic()
    try:
        answers = pool.measure_many([Config({"x": i}) for i in range(4)])
    finally:
        pool.close()
    assert time.monotonic() - start < LIMIT_S + MARGIN_S
    failures = {c.config.kwargs["x"]: c.failure for c, _ in answers}
    assert failures == {0: "NONE", 1: "TIMEOUT", 2: "NONE", 3: "NONE"}


def test_a_hung_candidate_in_process_is_named_while_it_runs(caplog):
    """In the tuning process a launch cannot be stopped, but the watchdog
    names the candidate and its limit while it still runs; once it
    returns it is recorded as TIMEOUT."""
    y = torch.zeros(4)
    returned = []

    def launch(config):
        time.sleep(1.0)
        y.fill_(1.0)
        returned.append(time.time())
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(), launch, {"y": y}, timeout_s=0.3,
        name="sleeper")
    with caplog.at_level(logging.WARNING, logger="autotune"):
        candidate, _ = evaluator(Config({"BLOCK": 16}))
    assert candidate.failure == "TIMEOUT"
    named = [r for r in caplog.records if "time limit" in r.getMessage()]
    assert len(named) == 1, [r.getMessage() for r in caplog.records]
    text = named[0].getMessage()
    assert "sleeper" in text and "BLOCK" in text and "0.3 s" in text
    assert "--autotune_workers" in text
    assert named[0].created < returned[0]  # while it still ran


def test_a_candidate_within_its_limit_is_not_named(caplog):
    y = torch.zeros(4)
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(), lambda config: y.fill_(1.0),
        {"y": y}, timeout_s=5.0, name="quick")
    with caplog.at_level(logging.WARNING, logger="autotune"):
        candidate, _ = evaluator(Config({"BLOCK": 16}))
        time.sleep(0.1)
    assert candidate.ok
    assert not [r for r in caplog.records if "time limit" in r.getMessage()]


def quick_objective_on_a_locked_device(device):
    def objective(config):
        return ev.Measurement(config, 1.0)
    return parallel.holding_device(objective, f"gpu-{device}")


def test_the_wait_for_the_device_is_not_the_candidates_time(tmp_path,
                                                            monkeypatch):
    """A worker waits for its device's lock (another process holds it)
    past the limit: the watchdog's clock stops while it waits, so its
    candidates are measured once the device is free, none TIMEOUT."""
    import subprocess
    import sys

    from autotune.host import device_lock
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "workers",
                                      "hold_lock.py"), str(tmp_path),
         "gpu-7"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HELD"
        import threading
        freeing = threading.Timer(3 * LIMIT_S, holder.kill)
        freeing.start()
        with ParallelEvaluator(quick_objective_on_a_locked_device,
                               devices=["7"], start_method="fork",
                               time_limit_s=LIMIT_S) as evaluator:
            results = evaluator.evaluate([Config({"x": i})
                                          for i in range(3)])
            assert evaluator.timed_out == 0
        freeing.join()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert all(r.ok for r in results), [r.detail for r in results]


def slow_timing_objective(device, first_run_s, rest_s):
    """A candidate whose first run took first_run_s and whose timing then
    takes rest_s (a slow kernel's do_bench and repetitions)."""
    def objective(config):
        time.sleep(first_run_s)
        parallel.first_run_took(first_run_s)
        time.sleep(rest_s)
        return ev.Measurement(config, 1.0)
    return objective


def test_a_slow_kernels_timing_is_given_time_by_its_first_run():
    # The first run took 0.2 s: its timing may take the limit plus 16
    # such launches (4.2 s), so 1.5 s of it is no hang.
    factory = functools.partial(slow_timing_objective, first_run_s=0.2,
                                rest_s=1.5)
    with ParallelEvaluator(factory, devices=["cpu0"], start_method="fork",
                           time_limit_s=LIMIT_S) as evaluator:
        [result] = evaluator.evaluate([Config({"x": 0})])
        assert evaluator.timed_out == 0
    assert result.failure == "NONE" and result.time == 1.0


def test_a_hang_after_a_quick_first_run_is_stopped():
    factory = functools.partial(slow_timing_objective, first_run_s=0.01,
                                rest_s=600)
    start = time.monotonic()
    with ParallelEvaluator(factory, devices=["cpu0"], start_method="fork",
                           time_limit_s=LIMIT_S) as evaluator:
        [result] = evaluator.evaluate([Config({"x": 0})])
        assert evaluator.timed_out == 1 and evaluator.lost_workers == 0
    assert result.failure == "TIMEOUT"
    assert time.monotonic() - start < LIMIT_S + 0.16 + MARGIN_S
