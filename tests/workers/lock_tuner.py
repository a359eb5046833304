"""Tunes the tiny kernel at the given sizes (no cache: every size is a
miss) once a line arrives on stdin, and writes the JSON report to
argv[1]."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotune  # noqa: E402
from autotune import Config  # noqa: E402
import tiny_kernels as tk  # noqa: E402

report, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
autotune.configure(autotune_report_to=report)
configs = [Config({"BLOCK": b, "BUG": 0}, num_warps=w)
           for b in (16, 32, 64) for w in (2, 4)]
tuned = tk.make_tuner(configs)
print("READY", flush=True)
sys.stdin.readline()  # GO: the test starts every tuner at once
for n in sizes:
    tk.run(tuned, n)
