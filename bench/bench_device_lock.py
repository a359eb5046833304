"""What the device lock buys: winner agreement of fresh tunings that run
at the same time, beside a CPU-heavy job, with and without the lock.

    TRITON_INTERPRET=1 python3 bench/bench_device_lock.py [--rounds 1]
        [--suite examples/fused_kernels_test.py]

Each round starts two fresh tunings of the example suite at once (as two
dump targets of one `bazel test` would), each dumping its own cache, with
a busy-looping process beside them. Without the lock (a private lock
directory each) they time their candidates at the same time; with it (one
shared directory, the default) they take turns. Prints, per mode, the
share of fusions on which the tunings of a round picked the same winner,
over all rounds, the wall time, and the seconds the reports say each
tuning waited for the device. On a shared 2-core machine the figures are
what this machine did then.
"""
import argparse
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def hog(stop):
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def tune_pair(suite, workdir, tag, shared_lock):
    procs = []
    for i in range(2):
        lock_dir = os.path.join(workdir, "locks" if shared_lock
                                else f"locks-{tag}-{i}")
        dump = os.path.join(workdir, f"{tag}-{i}.textproto")
        report = os.path.join(workdir, f"{tag}-{i}.json")
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT,
                   AUTOTUNE_LOCK_DIR=lock_dir,
                   AUTOTUNE_FLAGS=f"--dump_autotune_results_to={dump} "
                   f"--autotune_report_to={report}")
        procs.append((subprocess.Popen(
            [sys.executable, os.path.join(ROOT, suite)], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
            dump, report))
    out = []
    for proc, dump, report in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"bench_device_lock: {suite} failed:\n{err[-2000:]}")
        out.append((dump, report))
    return out


def winners(path):
    from autotune import codec
    return {(e.key.kernel, e.key.signature): e.best.short()
            for e in codec.load_results(path)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--suite", default="examples/fused_kernels_test.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        for shared_lock in (False, True):
            mode = "with the lock" if shared_lock else "without the lock"
            same = total = 0
            waits, walls = [], []
            for r in range(args.rounds):
                stop = multiprocessing.Event()
                busy = multiprocessing.Process(target=hog, args=(stop,))
                busy.start()
                start = time.perf_counter()
                try:
                    pair = tune_pair(args.suite, workdir,
                                     f"{int(shared_lock)}-{r}", shared_lock)
                finally:
                    stop.set()
                    busy.join()
                walls.append(time.perf_counter() - start)
                picks = [winners(dump) for dump, _ in pair]
                for a, b in itertools.combinations(picks, 2):
                    for fusion in a:
                        total += 1
                        same += a[fusion] == b.get(fusion)
                for _, report in pair:
                    with open(report) as f:
                        fusions = json.load(f)["fusions"]
                    waits.append(sum(x.get("device_wait_s", 0.0)
                                     for x in fusions))
            print(f"{mode}: {same}/{total} fusions with the same winner in "
                  f"both tunings ({100.0 * same / max(total, 1):.0f}%); "
                  f"wall {', '.join(f'{w:.1f}' for w in walls)} s per round;"
                  f" seconds waited for the device per tuning: "
                  f"{', '.join(f'{w:.1f}' for w in waits)}", flush=True)


if __name__ == "__main__":
    main()
