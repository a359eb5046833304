"""Tunes the tiny kernel at the given sizes into a per-fusion directory and
prints the config used for each fusion, as JSON."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotune  # noqa: E402
import tiny_kernels as tk  # noqa: E402

cache_dir, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
autotune.configure(per_fusion_autotune_cache_dir=cache_dir)
tuned = tk.make_tuner()
used = tk.run_sizes(tuned, sizes)
print(json.dumps(used))
