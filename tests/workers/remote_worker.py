"""Runs the tiny kernel at the given sizes with a remote cache (and a
per-fusion directory, unless it is "-") and prints, as JSON, the config
used for each fusion and the run's statistics."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotune  # noqa: E402
import tiny_kernels as tk  # noqa: E402

url, cache_dir, sizes = sys.argv[1], sys.argv[2], [int(s) for s in
                                                     sys.argv[3:]]
# A generous timeout: eight of these share two loaded cores with the server.
options = {"autotune_remote_cache": url + "?timeout_s=10"}
if cache_dir != "-":
    options["per_fusion_autotune_cache_dir"] = cache_dir
sess = autotune.configure(**options)
tuned = tk.make_tuner()
used = tk.run_sizes(tuned, sizes)
print(json.dumps({"used": used, "stats": sess.stats.as_dict(),
                  "remote": sess.cache.remote.report()}))
