"""Ranks tuning together: wall time per miss with 1, 2 and 4 ranks, and
what the exchanges between ranks cost.

    TRITON_INTERPRET=1 python3 bench/bench_distributed.py [--ranks 1,2,4]
        [--shapes 2]

For each world size, starts that many processes (a gloo process group on
127.0.0.1; one process alone has none and tunes as usual), each tuning the
example softmax kernel (6 configs) at --shapes row counts, all misses.
Prints per world size: the wall time per miss (the slowest rank's), each
rank's candidate benchmarks, the time spent inside the exchanges per miss
(waiting for slower ranks included), and the latency of one exchange of a
fusion's measurements with every rank ready (the pure cost: 100 exchanges
back to back after the tuning). On this shared 2-core machine, ranks
beyond 2 share the cores: the split work does not get faster there.
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(rank, world, port, shapes):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import torch.distributed as dist
    import autotune
    from autotune.kernels import softmax
    from autotune.runtime import distributed
    if world > 1:
        dist.init_process_group("gloo",
                                init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=300))
    sess = autotune.configure(autotune_distributed_timeout_s=300)
    in_exchange = [0.0]
    original = distributed.Job.exchange

    def timed(self, *args):
        start = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            in_exchange[0] += time.perf_counter() - start
    distributed.Job.exchange = timed
    xs = [torch.randn(8 * (i + 1), 64) for i in range(shapes)]
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for x in xs:
        softmax.softmax(x)
    tune_s = time.perf_counter() - start
    tune_exchange_s = in_exchange[0]
    tune_exchanges = sum(distributed.EXCHANGES.values())
    latency = None
    if world > 1:
        job = distributed.Job.current(sess.options)
        payload = ("ok", [(None, [10.0, 11.0, 12.0])] * 6)
        job.exchange("warm-up", "bench", payload)
        n = 100
        start = time.perf_counter()
        for i in range(n):
            job.exchange("bench", "bench", payload)
        latency = (time.perf_counter() - start) / n
        # Rank 0 hosts the store: nobody leaves before all have read.
        dist.barrier()
    print(json.dumps({"rank": rank, "tune_s": tune_s,
                      "benchmarks": sess.stats.candidate_benchmarks,
                      "misses": sess.stats.misses,
                      "exchange_s": tune_exchange_s,
                      "exchanges": tune_exchanges,
                      "latency_s": latency}), flush=True)
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world, shapes):
    port = free_port()
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    procs = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker",
         f"{r},{world},{port},{shapes}"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for r in range(world)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if p.returncode != 0 or not lines:
            sys.exit(f"bench_distributed: a rank failed:\n{stderr[-2000:]}")
        out.append(json.loads(lines[-1]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--shapes", type=int, default=2)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        rank, world, port, shapes = map(int, args.worker.split(","))
        return worker(rank, world, port, shapes)
    for world in map(int, args.ranks.split(",")):
        ranks = run(world, args.shapes)
        misses = ranks[0]["misses"]
        wall = max(r["tune_s"] for r in ranks) / misses
        exchange = max(r["exchange_s"] for r in ranks) / misses
        per_miss = ranks[0]["exchanges"] / misses if world > 1 else 0
        line = (f"{world} rank(s): {wall:.2f} s per miss ({misses} misses);"
                f" candidate benchmarks per rank "
                f"{[r['benchmarks'] for r in ranks]}")
        if world > 1:
            latency = max(r["latency_s"] for r in ranks)
            line += (f"; in exchanges {exchange:.3f} s per miss (waiting "
                     f"for other ranks included), "
                     f"{per_miss:.0f} exchanges per miss, one "
                     f"exchange {latency * 1e3:.2f} ms with every rank ready")
        print(line, flush=True)


if __name__ == "__main__":
    main()
