"""One rank of a torch.distributed job (gloo on 127.0.0.1) that tunes the
tiny kernel at two sizes, then, in a fresh session on the same per-fusion
directory, runs them again as hits. Prints one JSON line: the winners,
its candidate_benchmarks and the exchanges of each phase.

argv: rank world port outdir mode timeout_s
mode: ok | diverge (rank 1 tunes another size) | kill (rank 1 dies before
tuning) | fail (rank 1's measurements raise) | hitmiss (rank 0 has the
first size in its own cache, rank 1 misses it) | timebudget (a search with
time_budget_s whose generations are slower on rank 1, so that the ranks'
own clocks would stop it at different points) | othercode (rank 1's
kernel of the same name and signature has another body, computing the
same values) | pickle (rank 1 writes, under the key of its first exchange,
a pickled object whose unpickling creates the file CANARY in outdir, and
then leaves)"""
import datetime
import json
import os
import signal
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import autotune  # noqa: E402
from autotune import Config  # noqa: E402
from autotune.runtime import distributed  # noqa: E402
import tiny_kernels as tk  # noqa: E402

rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
outdir, mode, timeout_s = sys.argv[4], sys.argv[5], float(sys.argv[6])
SIZES = [int(s) for s in os.environ.get("DIST_SIZES", "40,72").split(",")]
CONFIGS = [Config({"BLOCK": b, "BUG": 0}, num_warps=w)
           for b in (16, 32, 64, 128) for w in (2, 4)]


@triton.jit
def axpb_kernel(x, y, n, alpha, BLOCK: tl.constexpr, BUG: tl.constexpr):
    # tiny_kernels.axpb_kernel's values, written another way: another
    # fingerprint for one name and signature.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    out = tl.load(x + offs, mask=m) * alpha + 1.0
    if BUG:
        out = out + 0.5
    tl.store(y + offs, out, mask=m)


class Canary:
    """Unpickling it creates the file `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def reference(x, y, n, alpha, **_):
    y.copy_(x * alpha + 1.0)


def out(**fields):
    print(json.dumps(dict(rank=rank, **fields)), flush=True)
    sys.stdout.flush()
    os._exit(0)


dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                        rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))
cache = os.path.join(outdir, "cache")
if mode == "hitmiss":
    cache = os.path.join(outdir, f"cache{rank}")
os.makedirs(cache, exist_ok=True)
if mode == "hitmiss" and rank == 0:
    autotune.configure(per_fusion_autotune_cache_dir=cache,
                       autotune_distributed="off")
    tk.run(tk.make_tuner(CONFIGS, reference=reference, outputs=["y"]),
           SIZES[0])
sess = autotune.configure(
    per_fusion_autotune_cache_dir=cache,
    autotune_report_to=os.path.join(outdir, "report.json"),
    autotune_distributed_timeout_s=timeout_s)
tuned = tk.make_tuner(CONFIGS, reference=reference, outputs=["y"])
if mode == "timebudget":
    from autotune.search import evolutionary
    tuned = autotune.tune(
        tk.axpb_kernel, None, key=["n"], reference=reference, outputs=["y"],
        space=autotune.Space({"BLOCK": [16, 32, 64, 128, 256, 512],
                              "BUG": [0]}, num_warps=[1, 2, 4, 8],
                             num_stages=[1, 2, 3]),
        search="evolutionary", budget=72, time_budget_s=3.0)
    if rank == 1:
        generation = evolutionary.EvolutionarySearch._generation

        def slow_generation(self, *args):
            time.sleep(1.5)
            return generation(self, *args)
        evolutionary.EvolutionarySearch._generation = slow_generation
if mode == "othercode" and rank == 1:
    tuned = autotune.tune(axpb_kernel, CONFIGS, key=["n"],
                          reference=reference, outputs=["y"])
if mode == "pickle" and rank == 1:
    import pickle
    store = dist.distributed_c10d._get_default_store()
    store.set(f"{distributed._KEY_PREFIX}/0/1",
              pickle.dumps(Canary(os.path.join(outdir, "CANARY"))))
    store.set(f"{distributed._KEY_PREFIX}/0/read/1", b"1")
    out(posted="pickle")
sizes = list(SIZES)
if rank == 1 and mode == "diverge":
    sizes[0] += 8
if rank == 1 and mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if rank == 1 and mode == "fail":
    from autotune.measure import tuner

    def broken(self, config):
        raise RuntimeError("this rank's device is broken")
    tuner.CandidateEvaluator.__call__ = broken
start = time.monotonic()
try:
    for n in sizes:
        tk.run(tuned, n)
except autotune.AutotuneError as e:
    out(error=str(e), seconds=time.monotonic() - start,
        fingerprint=tuned.fingerprint)
tune_s = time.monotonic() - start
winners = {}
for n in sizes:
    x = torch.zeros(n)
    winners[n] = tuned.lookup_config(x, x, n, 2.0).short()
benchmarks = sess.stats.candidate_benchmarks
exchanges_tune = sum(distributed.EXCHANGES.values())
sess.finish()
dist.barrier()  # rank 0 has written the per-fusion directory
hit_sess = autotune.configure(per_fusion_autotune_cache_dir=cache,
                              autotune_distributed_timeout_s=timeout_s)
for n in sizes:
    tk.run(tuned, n)
out(winners=winners, benchmarks=benchmarks, tune_s=tune_s,
    exchanges_tune=exchanges_tune,
    exchanges_hit=sum(distributed.EXCHANGES.values()) - exchanges_tune,
    hits=hit_sess.stats.hits, hit_tuned=hit_sess.stats.tuned,
    dirfiles=len(os.listdir(cache)))
