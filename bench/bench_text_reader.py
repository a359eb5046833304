"""Load time of 2,000-entry text caches that the writer produces: plain, and
with the strings that once sent the reader to protobuf's text_format (a
string-valued param such as EVICTION="evict_last", quotes and backslashes in
params, escaped key strings). Each file is loaded as written (crc line
present) and as after a hand edit (crc line gone, every line checked).

    python3 bench/bench_text_reader.py [--entries 2000] [--repeat 5]
"""
import argparse
import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from autotune import codec  # noqa: E402
from autotune.records import (CacheKey, Candidate, Config, Entry,  # noqa: E402
                              Provenance)
from bench_runtime import machine_speed  # noqa: E402

KINDS = ("plain", "string param", "quote+backslash param",
         "escaped key strings")


def make_entries(kind, count):
    out = []
    for i in range(count):
        params = {"BLOCK": 32 * (1 + i % 4), "GROUP_M": 8}
        detail = ""
        signature = f"M={64 * (i + 1)},N=128;dtypes=a:float16"
        device = "NVIDIA H200/sm_90"
        if kind == "string param":
            params["EVICTION"] = "evict_last"
        elif kind == "quote+backslash param":
            params["ACT"] = 'leaky "re\\lu"'
        elif kind == "escaped key strings":
            signature += ';NOTE="a\\b"'
            device = 'dev "x"'
            detail = 'shared memory "128 KB" > limit\\n'
        candidates = [Candidate(Config(dict(params, BLOCK=b), num_warps=w),
                                1.0 + b / 100 + w)
                      for b in (32, 64, 128) for w in (4, 8)]
        candidates.append(Candidate(Config(dict(params, BLOCK=256)), 0.0,
                                    "OUT_OF_RESOURCES", detail))
        best = min((c for c in candidates if c.ok),
                   key=lambda c: (c.run_time_us, c.config.sort_key))
        out.append(Entry(
            CacheKey(device, "matmul", "0123456789abcdef", signature),
            best.config, best.run_time_us, candidates,
            Provenance("3.9.0", "2.13.0", "12.8", "2026-11-29T10:00:00Z",
                       0.02, "exhaustive", 1.5)))
    return out


def best_seconds(fn, repeat):
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    machine_speed()
    for kind in KINDS:
        entries = make_entries(kind, args.entries)
        data = codec.encode(entries, "c.textproto")
        hand_edited = data[:data.rindex(b"# crc32: ")]
        for label, blob in (("crc", data), ("no crc", hand_edited)):
            loaded = codec.decode(blob, "c.textproto")
            if len(loaded) != len(entries):
                raise SystemExit(f"{kind}: loaded {len(loaded)} of "
                                 f"{len(entries)} entries")
            load = best_seconds(
                lambda: codec.decode(blob, "c.textproto"), args.repeat)
            full = best_seconds(
                lambda: [e.candidates for e in
                         codec.decode(blob, "c.textproto")], args.repeat)
            print(f"{kind:<24} {label:<7} load {load * 1e3:8.1f} ms   "
                  f"load + all candidates {full * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
