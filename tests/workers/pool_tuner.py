"""Tunes the tiny kernel at a size the interpreter takes seconds over,
with --autotune_workers=2 (forked workers), and no cache: the test kills
this process while its workers measure."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotune  # noqa: E402
from autotune import Config  # noqa: E402
import tiny_kernels as tk  # noqa: E402

autotune.configure(autotune_workers=2)
configs = [Config({"BLOCK": b, "BUG": 0}, num_warps=w)
           for b in (16, 32, 64) for w in (1, 2, 4, 8)]
tuned = tk.make_tuner(configs)
print("READY", flush=True)
tk.run(tuned, int(sys.argv[1]))
