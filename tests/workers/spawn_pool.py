"""A pool of two spawned workers (as GPU workers start) measuring
candidates that take a minute each; prints the workers' pids once both
measure. The test kills this process."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def slow_factory(device):
    def objective(config):
        time.sleep(60)
    return objective


if __name__ == "__main__":
    from autotune.records import Config
    from autotune.runtime.parallel import ParallelEvaluator
    pool = ParallelEvaluator(slow_factory, devices=["cpu0", "cpu1"],
                             start_method="spawn")
    print(" ".join(str(w["proc"].pid) for w in pool.workers), flush=True)
    pool.evaluate([Config({"x": i}) for i in range(4)])
