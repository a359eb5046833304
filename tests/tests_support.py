"""Helpers shared by tests."""
from autotune.records import CacheKey, Candidate, Entry, Provenance


def entry_for(config, signature="n=1;dtypes=x:float32", device="cpu/test",
              kernel="axpb_kernel", run_time_us=10.0):
    return Entry(CacheKey(device, kernel, "00ff00ff00ff00ff", signature),
                 config, run_time_us, [Candidate(config, run_time_us)],
                 Provenance(triton_version="3.9.0", tuner="exhaustive"))
