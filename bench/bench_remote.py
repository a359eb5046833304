"""Remote cache figures on loopback: hit latency against a per-fusion file
lookup, and many processes hitting one server.

    python bench/bench_remote.py [--url redis://127.0.0.1:6379/0]
        [--entries 1000] [--lookups 10000] [--processes 16]

Without --url it starts its own redis-server on a free loopback port (and
stops it). Entries are shaped like a matmul tuning run's (bench_runtime).
Each lookup is the tier's real path: GET, then decoding and validating the
whole value (the per-fusion lookup likewise reads and decodes its file).
Prints p50/p99 per lookup, then the fleet's throughput and error count.
Run on an idle machine: figures on a shared one are noisy.
"""
import argparse
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from autotune.cache.tiers import PerFusionDirectory  # noqa: E402
from autotune.cache.remote import RemoteCache  # noqa: E402
from bench_runtime import matmul_entries  # noqa: E402


def start_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", workdir,
         "--loglevel", "warning"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("redis-server did not start")
            time.sleep(0.02)
    return proc, workdir, f"redis://127.0.0.1:{port}/0"


def percentiles(samples_ns):
    samples = sorted(samples_ns)
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    return pick(0.50) / 1e3, pick(0.99) / 1e3


def latency(lookup, keys, n, seed=0):
    rng = random.Random(seed)
    order = [rng.choice(keys) for _ in range(n)]
    clock = time.perf_counter_ns
    samples = []
    misses = 0
    for key in order:
        start = clock()
        entry = lookup(key)
        samples.append(clock() - start)
        misses += entry is None
    return samples, misses


def fleet_worker(url, prefix, keys, n, seed, start_at, out):
    remote = RemoteCache(url, prefix=prefix, timeout_s=5.0,
                         log=lambda line: None)
    rng = random.Random(seed)
    order = [rng.choice(keys) for _ in range(n)]
    while time.time() < start_at:
        time.sleep(0.001)
    start = time.perf_counter()
    misses = sum(remote.lookup(key) is None for key in order)
    out.put((time.perf_counter() - start, misses, remote.failed_operations,
             remote.corrupt))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--lookups", type=int, default=10000)
    parser.add_argument("--processes", type=int, default=16)
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        server = start_server()
        url = server[2]
    prefix = f"bench-{os.getpid()}"
    try:
        entries = matmul_entries(args.entries)
        keys = [e.key for e in entries]
        remote = RemoteCache(url, prefix=prefix, timeout_s=5.0)
        for entry in entries:
            remote.publish(entry)
        assert remote.published == len(entries), remote.report()
        value_bytes = len(remote.client.get(remote.key_name(keys[0])))

        with tempfile.TemporaryDirectory() as tmp:
            directory = PerFusionDirectory(tmp, "update")
            for entry in entries:
                directory.store(entry)
            latency(directory.lookup, keys, 1000)  # warm the page cache
            file_ns, file_misses = latency(directory.lookup, keys,
                                           args.lookups)
        latency(remote.lookup, keys, 1000)  # connection made, code warm
        remote_ns, remote_misses = latency(remote.lookup, keys, args.lookups)
        assert file_misses == remote_misses == 0
        get_ns, _ = latency(lambda k: remote.client.get(remote.key_name(k)),
                            keys, args.lookups)
        p50, p99 = percentiles(file_ns)
        print(f"per-fusion file lookup: p50 {p50:.1f} us, p99 {p99:.1f} us "
              f"({args.lookups} lookups over {args.entries} entries)")
        p50, p99 = percentiles(remote_ns)
        print(f"remote hit (loopback):  p50 {p50:.1f} us, p99 {p99:.1f} us "
              f"({value_bytes}-byte values; GET + decode + validate)")
        p50, p99 = percentiles(get_ns)
        print(f"  of which the GET alone: p50 {p50:.1f} us, p99 {p99:.1f} us")

        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        start_at = time.time() + 2.0 + 0.2 * args.processes
        procs = [ctx.Process(target=fleet_worker, args=(
            url, prefix, keys, args.lookups, i, start_at, out))
            for i in range(args.processes)]
        for p in procs:
            p.start()
        results = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        wall = max(r[0] for r in results)
        total = args.processes * args.lookups
        errors = sum(r[1] + r[2] + r[3] for r in results)
        print(f"fleet: {args.processes} processes x {args.lookups} lookups "
              f"= {total} in {wall:.2f} s: {total / wall:,.0f} lookups/s, "
              f"median process {statistics.median(r[0] for r in results):.2f}"
              f" s, errors {errors} (misses, failed operations, bad values)")
        client = remote.client
        for start in range(0, len(keys), 1000):
            client.delete(*[remote.key_name(k)
                            for k in keys[start:start + 1000]])
        remote.close()
        return 1 if errors else 0
    finally:
        if server is not None:
            server[0].kill()
            server[0].wait()
            shutil.rmtree(server[1], ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
