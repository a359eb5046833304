"""Dumps two different large results sets to one path, alternately, until
killed; prints READY after the first complete dump."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune import codec  # noqa: E402
from test_results_io import make_entries  # noqa: E402

path, n = sys.argv[1], int(sys.argv[2])
sets = [make_entries(n, seed=1), make_entries(n, seed=2)]
i = 0
while True:
    codec.dump_results(sets[i % 2], path)
    if i == 0:
        print("READY", flush=True)
    i += 1
