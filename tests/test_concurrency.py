"""Real processes sharing caches."""
import json
import os
import random
import signal
import subprocess
import sys
import time

from autotune import codec
from autotune.cache.tiers import PerFusionDirectory

HERE = os.path.dirname(os.path.abspath(__file__))


def test_eight_processes_tune_overlapping_fusions(tmp_path):
    sizes = [8, 16, 24, 40, 56, 72]
    procs = []
    for i in range(8):
        mine = [str(s) for s in random.Random(i).sample(sizes, 4)]
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "workers", "tune_worker.py"),
             str(tmp_path)] + mine,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, TRITON_INTERPRET="1")))
    used = {}
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        for n, config in json.loads(out.splitlines()[-1]).items():
            used.setdefault(n, set()).add(config)
    # Every process launched each fusion with the same config.
    assert all(len(configs) == 1 for configs in used.values()), used
    names = sorted(os.listdir(tmp_path))
    assert not [n for n in names if n.endswith(".tmp")], names
    entries = PerFusionDirectory(tmp_path, "read").entries()  # all parse
    assert len(entries) == len(names) == len(used)
    by_size = {e.key.signature.split(";")[0]: e.best.short() for e in entries}
    for n, configs in used.items():
        assert by_size[f"n={n}"] in configs


def test_sigkill_during_dump_leaves_old_or_new_file(tmp_path):
    from test_results_io import make_entries
    path = tmp_path / "cache.textproto"
    n = 20000
    valid = {codec.encode(make_entries(n, seed=s), str(path))
             for s in (1, 2)}
    rng = random.Random(0)
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "workers", "dump_loop.py"),
             str(path), str(n)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert path.read_bytes() in valid
        codec.load_results(path)
    leftovers = [p for p in tmp_path.iterdir() if p.name != "cache.textproto"]
    # A killed writer may leave its temporary file, never a partial cache.
    assert all(p.name.startswith(".cache.textproto.") for p in leftovers)
