"""Synthetic timing tables with known structure, in Kernel Tuner's cache
format (what simulate.TimingTable reads), for tests and the search bench.

Each landscape is built from a seed, so a table is the same on every
machine; times are milliseconds, failed configs carry Kernel Tuner's
failure strings.

- two_basin_categorical: 3- and 4-valued string parameters (no order), a
  broad basin and a narrow, slightly faster one whose centres differ in
  every parameter.
- isolated_optimum: ordinal parameters with a smooth bowl; the optimum is a
  single config one parameter away from the bowl's bottom, at the far end
  of a long parameter, with slow configs around it.
- rugged_ordinal: ordinal and two-valued parameters, a two-valued switch
  that changes which block sizes are good, a failing region and per-config
  noise.
- joint_move_trap: ordinal parameters, two bowls that hold about half the
  steepest descents each; the second bowl's bottom is two parameters away
  from the optimum, and changing either of them alone is 1.2-1.3x slower
  (only a move of both at once leaves it).
- triton_matmul: a Triton matmul space (BLOCK_M/N/K powers of two, warps,
  stages, GROUP_M; 9,600 configs) timed by a model of waves over the
  streaming multiprocessors, accumulators a thread, operand traffic and
  latency hidden by stages. Tiles and stages beyond the device's shared
  memory fail to compile, too many accumulators a thread fail to run
  (about a fifth of the space); the optimum sits next to the shared-memory
  edge; a dozen local optima, the three fastest within 1 % of each other,
  split the descents.
  Tests failures near the optimum and wave-quantized ruggedness.
- heavy_tailed: an AMD-like space (BLOCK_M/N/K, warps, waves_per_eu,
  matrix_instr_nonkdim, kpack; 8,000 configs, LDS overflow failing) whose
  times multiply per parameter off a centre, so the median config is
  3.5-4x the optimum and almost nothing is within 10 % of it; a narrow,
  steep bowl holds the optimum and about a fifth of the descents, a broad
  one 1.3x slower the rest. Tests finding a narrow region when random
  samples are very poor.
- plateau_ties: a bandwidth-bound kernel (block, items, unroll, vector,
  cache_hint; 2,880 configs): most configs lie on a plateau within 1-2.5 %
  of the optimum, where 1 % noise makes dozens of local optima; a small
  region (a few configs) of one cache hint, full vectors and one items
  count is 2 % faster. Tests not settling for a near-tie.
- algorithm_switch: a reduction with a categorical algorithm (atomic,
  two_pass, tree, persistent) and sizes whose best values differ per
  algorithm (4,800 configs, each algorithm's own failures); another
  device's fastest algorithm is a second basin here, left only by changing
  the algorithm and its sizes together. Tests seeds whose categorical
  switch is wrong for the target.

TRANSFERS builds pairs (source, target) of tables of one space for
seeding from another device: the source's fastest basin is a poor basin of
the target (its best configs beat random ones there, but the target's
optimum lies elsewhere). The other device of triton_matmul has fewer
multiprocessors and less shared memory (its best tiles are larger and
shallower); of heavy_tailed, the broad bowl is its faster one; of
plateau_ties, the small region is not faster there, so its best is a
plateau config; of algorithm_switch, two_pass is its fastest algorithm.
"""
import gzip
import itertools
import json
import random


def _table(name, params, time_of):
    keys = list(params)
    cache = {}
    for values in itertools.product(*params.values()):
        t = time_of(dict(zip(keys, values)))
        record = dict(zip(keys, values))
        record["time"] = t
        cache[",".join(str(v) for v in values)] = record
    return {"device_name": name, "kernel_name": name,
            "problem_size": [1], "objective": "time",
            "tune_params_keys": keys, "tune_params": params, "cache": cache}


def two_basin_categorical(seed=0, broad_first=False):
    rng = random.Random(seed)
    letters = "abcd"
    params = {f"p{i}": list(letters[:3 if i % 2 else 4]) for i in range(6)}
    broad = {k: rng.choice(v) for k, v in params.items()}
    narrow = {k: rng.choice([x for x in v if x != broad[k]])
              for k, v in params.items()}
    noise = {}

    def time_of(values):
        key = tuple(values.values())
        noise.setdefault(key, rng.uniform(0.0, 0.02))
        far_broad = sum(values[k] != broad[k] for k in params)
        far_narrow = sum(values[k] != narrow[k] for k in params)
        # Broad: gentle slope from 1.08; narrow: steeper slope from 1.00.
        if broad_first:  # the same centres, the broad basin the faster
            t = min(1.00 + 0.05 * far_broad, 1.10 + 0.09 * far_narrow)
            if far_broad == 0:
                return 1.0
            return round(t * (1.0 + noise[key]), 6)
        t = min(1.08 + 0.05 * far_broad, 1.00 + 0.09 * far_narrow)
        if far_narrow == 0:
            return 1.0
        return round(t * (1.0 + noise[key]), 6)
    return _table("two_basin_categorical", params, time_of)


def isolated_optimum(seed=0):
    rng = random.Random(seed)
    params = {"block": [16 * i for i in range(1, 17)], "rows": [1, 2, 4, 8],
              "tile_x": [1, 2, 3, 4], "tile_y": [1, 2, 3, 4],
              "vector": [0, 1]}
    bottom = {"block": rng.choice(params["block"][3:8]),
              "rows": rng.choice([2, 4]), "tile_x": rng.choice([2, 3]),
              "tile_y": rng.choice([2, 3]), "vector": 1}
    spike = dict(bottom, block=params["block"][-1])

    def time_of(values):
        if values == spike:
            return 1.0
        if values["block"] == spike["block"] \
                and sum(values[k] != spike[k] for k in params) == 1:
            return 1.6  # the spike stands alone
        t = 1.05
        t += 0.0008 * abs(values["block"] - bottom["block"])
        t += 0.06 * abs(values["rows"].bit_length() - bottom["rows"]
                        .bit_length())
        t += 0.05 * abs(values["tile_x"] - bottom["tile_x"])
        t += 0.05 * abs(values["tile_y"] - bottom["tile_y"])
        t += 0.07 * (values["vector"] != bottom["vector"])
        return round(t * rng.uniform(1.0, 1.01), 6)
    return _table("isolated_optimum", params, time_of)


def rugged_ordinal(seed=0, prefer_plain=False):
    rng = random.Random(seed)
    params = {"block_x": [16 * i for i in range(1, 17)],
              "block_y": [1, 2, 4, 8, 16], "unroll": [1, 2, 4, 8],
              "shared": [0, 1], "prefetch": [0, 1]}
    good_x = {0: rng.choice(range(2, 6)), 1: rng.choice(range(10, 15))}

    def time_of(values):
        if values["block_x"] * values["block_y"] > 1024:
            return "RuntimeFailedConfig"
        if values["shared"] and values["unroll"] == 8 \
                and values["block_y"] >= 8:
            return "CompilationFailedConfig"
        ix = values["block_x"] // 16 - 1
        t = 1.0 + 0.04 * abs(ix - good_x[values["shared"]])
        t += 0.05 * abs(values["block_y"].bit_length() - 3)
        t += 0.03 * abs(values["unroll"].bit_length() - 3)
        t += 0.08 * (values["prefetch"] != values["shared"])
        if prefer_plain:  # another device: the switch's other side wins
            t *= 1.0 if values["shared"] else 0.93
        else:
            t *= 0.93 if values["shared"] else 1.0
        return round(t * rng.uniform(1.0, 1.03), 6)
    return _table("rugged_ordinal", params, time_of)


def joint_move_trap(seed=0, trap_first=False):
    rng = random.Random(seed)
    params = {"block_x": [8 * 2 ** i for i in range(8)],
              "block_y": [2 ** i for i in range(8)],
              "split": [1, 2, 3, 4, 6, 8], "stages": [1, 2, 3, 4],
              "unroll": [1, 2, 4, 8], "swizzle": [0, 1], "vector": [0, 1]}
    names = list(params)
    optimum = [rng.randrange(1, 4), rng.randrange(2, 6)]
    # The trap: block_x four times larger and block_y half; either size
    # changed back alone is 1.2-1.3x slower. Its bowl (in the two sizes) is
    # gentle, the optimum's steep: the trap holds about half the descents.
    trap = [optimum[0] + 2, optimum[1] - 1]
    others = [rng.randrange(len(params[n])) for n in names[2:]]
    noise = {}

    def sizes(index, centre, slope):
        return slope * (abs(index[0] - centre[0]) + abs(index[1] - centre[1]))

    def time_of(values):
        index = [params[n].index(values[n]) for n in names]
        key = tuple(index)
        noise.setdefault(key, rng.uniform(1.0, 1.01))
        if trap_first:
            shape = min(1.0 + sizes(index, trap, 0.15),
                        1.06 + sizes(index, optimum, 0.2))
        else:
            shape = min(1.0 + sizes(index, optimum, 0.2),
                        1.06 + sizes(index, trap, 0.15))
        rest = 1.0 + sum(s * abs(i - c) for s, i, c in zip(
            (0.03, 0.04, 0.03, 0.05, 0.04), index[2:], others))
        return round(shape * rest * noise[key], 6)
    return _table("joint_move_trap", params, time_of)


# Devices of the matmul space: streaming multiprocessors and the shared
# memory one block may use (bytes), like an A100 and a smaller card.
MATMUL_DEVICES = {"large": {"sms": 108, "shared": 166912, "bandwidth": 1.0},
                  "small": {"sms": 48, "shared": 101376, "bandwidth": 0.45}}


def triton_matmul(seed=0, device="large"):
    rng = random.Random(seed)
    gpu = MATMUL_DEVICES[device]
    m, n, k = rng.choice([(4096, 4096, 4096), (8192, 2048, 4096),
                          (3072, 5120, 2048), (6144, 6144, 1024)])
    params = {"BLOCK_M": [16, 32, 64, 128, 256],
              "BLOCK_N": [16, 32, 64, 128, 256],
              "BLOCK_K": [16, 32, 64, 128], "warps": [1, 2, 4, 8],
              "stages": [1, 2, 3, 4, 5, 6], "GROUP_M": [1, 2, 4, 8]}
    noise = {}

    def time_of(v):
        bm, bn, bk = v["BLOCK_M"], v["BLOCK_N"], v["BLOCK_K"]
        shared = v["stages"] * (bm * bk + bk * bn) * 2  # fp16 tiles
        if shared > gpu["shared"]:
            return "CompilationFailedConfig"  # out of shared memory
        accumulators = bm * bn // (32 * v["warps"])
        if accumulators > 256:
            return "RuntimeFailedConfig"  # out of registers
        key = tuple(v.values())
        noise.setdefault(key, rng.uniform(1.0, 1.015))
        tiles = -(-m // bm) * -(-n // bn)
        resident = max(1, min(gpu["shared"] // shared,
                              2048 // (32 * v["warps"]), 16))
        slots = gpu["sms"] * resident
        waves = -(-tiles // slots)
        # Tensor cores want 32-128 accumulators a thread and tiles of at
        # least 64 on a side.
        per_thread = accumulators.bit_length() - 1
        compute = 1.0 + 0.12 * abs(per_thread - 6) ** 1.5
        compute *= 1.0 + 0.25 * (bm < 64) + 0.25 * (bn < 64)
        # Operand traffic of a tile, shared through L2 by grouped launch.
        traffic = (1.0 / bm + 1.0 / bn) * 64.0
        traffic /= 1.0 + 0.35 * (v["GROUP_M"].bit_length() - 1) \
            * (tiles > slots)
        work = max(compute, traffic / gpu["bandwidth"])
        # Stages hide memory latency; so do other resident blocks.
        exposed = 0.6 / v["stages"] ** 1.3 / resident ** 0.5
        loop = 1.0 + 2.0 / bk
        blocks = waves * slots  # quantized to whole waves
        t = blocks * bm * bn * k * work * (1.0 + exposed) * loop
        t /= gpu["sms"] * 2.0e9
        return round(t * noise[key], 6)
    return _table(f"triton_matmul_{device}", params, time_of)


def heavy_tailed(seed=0, other_device=False):
    rng = random.Random(seed)
    params = {"BLOCK_M": [16, 32, 64, 128, 256],
              "BLOCK_N": [16, 32, 64, 128, 256],
              "BLOCK_K": [16, 32, 64, 128], "warps": [1, 2, 4, 8],
              "waves_per_eu": [0, 1, 2, 3, 4],
              "matrix_instr_nonkdim": [16, 32], "kpack": [1, 2]}
    names = list(params)
    # Centres (value indices) of a narrow, steep bowl and of a broad one
    # with gentler walls that most descents fall into.
    narrow = [rng.choice([3, 4]), rng.choice([2, 3]), rng.choice([1, 2]),
              rng.choice([2, 3]), rng.choice([1, 2]), 1, 1]
    broad = [narrow[0] - 2, narrow[1] - 1, narrow[2] + 1,
             narrow[3] - 1, (narrow[4] + 2) % 5, 0, 0]
    shifted = [narrow[0] - 1, narrow[1] - 1] + narrow[2:]
    # Factor per step away from a centre, per parameter.
    steep = (1.5, 1.5, 1.4, 1.45, 1.3, 1.6, 1.3)
    gentle = (1.2, 1.2, 1.15, 1.2, 1.1, 1.2, 1.1)
    noise = {}

    def time_of(v):
        bm, bn, bk = v["BLOCK_M"], v["BLOCK_N"], v["BLOCK_K"]
        if (bm * bk + bk * bn) * v["kpack"] * 2 > 65536:
            return "CompilationFailedConfig"  # beyond the 64 KiB LDS
        index = [params[n].index(v[n]) for n in names]
        key = tuple(index)
        noise.setdefault(key, rng.uniform(1.0, 1.02))

        def bowl(centre, factors, floor):
            t = floor
            for i, c, f in zip(index, centre, factors):
                t *= f ** abs(i - c)
            return t
        if other_device:  # the broad bowl is the faster one there, and
            # the narrow one sits at smaller tiles
            t = min(bowl(shifted, steep, 1.3), bowl(broad, gentle, 1.0))
        else:
            t = min(bowl(narrow, steep, 1.0), bowl(broad, gentle, 1.3))
        return round(0.05 * t * noise[key], 6)
    return _table("heavy_tailed", params, time_of)


def plateau_ties(seed=0, other_device=False):
    rng = random.Random(seed)
    params = {"block": [64 * i for i in range(1, 17)],
              "items": [1, 2, 4, 8, 16], "unroll": [1, 2, 4, 8],
              "vector": [1, 2, 4], "cache_hint": ["none", "cg", "cs"]}
    # A small region (a few dozen configs) about 2 % faster than the best
    # of the plateau; on the other device the hint does not pay off.
    region_block = rng.randrange(3, 9)
    region_items = rng.choice([4, 8])
    hint = rng.choice(["cg", "cs"])
    noise = {}

    def time_of(v):
        key = tuple(v.values())
        noise.setdefault(key, rng.uniform(1.0, 1.012))
        per_block = v["block"] * v["items"] * v["vector"]
        if per_block < 1024:  # too little work to hide memory latency
            t = 1.0 + 0.6 * (1024 / per_block - 1) ** 0.7
        else:  # bandwidth bound: everything within a few per cent
            t = 1.0 + 0.004 * abs(v["unroll"].bit_length() - 3) \
                + 0.003 * (v["cache_hint"] == "none") \
                + 0.006 * (per_block > 32768)
        in_region = (abs(v["block"] // 64 - 1 - region_block) <= 1
                     and v["items"] == region_items and v["vector"] == 4
                     and v["cache_hint"] == hint and v["unroll"] >= 2)
        if in_region and not other_device:
            t *= 0.98
        return round(0.2 * t * noise[key], 6)
    return _table("plateau_ties", params, time_of)


def algorithm_switch(seed=0, other_device=False):
    rng = random.Random(seed)
    params = {"algorithm": ["atomic", "two_pass", "tree", "persistent"],
              "block": [32, 64, 128, 256, 512, 1024],
              "items": [1, 2, 4, 8, 16], "split": [1, 2, 4, 8, 16],
              "unroll": [1, 2, 4, 8], "vector": [0, 1]}
    names = list(params)[1:]
    # Each algorithm has its own best sizes (value indices of block,
    # items, split, unroll), far apart for the two fastest.
    centres = {"atomic": [rng.choice([1, 2]), 1, rng.choice([3, 4]), 1],
               "two_pass": [rng.choice([3, 4]), rng.choice([3, 4]),
                            rng.choice([2, 3]), 2],
               "tree": [rng.choice([2, 3]), 2, 1, 1],
               "persistent": [rng.choice([1, 2]), rng.choice([0, 1]), 0,
                              3]}
    # The fastest algorithm on each device: persistent here, two-pass on
    # the other.
    if other_device:
        floors = {"atomic": 1.3, "two_pass": 1.0, "tree": 1.2,
                  "persistent": 1.12}
    else:
        floors = {"atomic": 1.3, "two_pass": 1.1, "tree": 1.2,
                  "persistent": 1.0}
    steps = (0.09, 0.07, 0.06, 0.03)
    noise = {}

    def time_of(v):
        if v["algorithm"] == "tree" and v["block"] * v["items"] > 8192:
            return "RuntimeFailedConfig"  # its shared-memory tree
        if v["algorithm"] == "persistent" and v["split"] >= 8:
            return "RuntimeFailedConfig"  # more blocks than stay resident
        key = tuple(v.values())
        noise.setdefault(key, rng.uniform(1.0, 1.01))
        index = [params[n].index(v[n]) for n in names]
        centre = centres[v["algorithm"]]
        t = floors[v["algorithm"]]
        t *= 1.0 + sum(s * abs(i - c) ** 1.3
                       for s, i, c in zip(steps, index, centre))
        t *= 1.0 if v["vector"] else 1.06
        return round(0.3 * t * noise[key], 6)
    return _table("algorithm_switch", params, time_of)


LANDSCAPES = {"two_basin_categorical": two_basin_categorical,
              "isolated_optimum": isolated_optimum,
              "rugged_ordinal": rugged_ordinal,
              "joint_move_trap": joint_move_trap,
              "triton_matmul": triton_matmul,
              "heavy_tailed": heavy_tailed,
              "plateau_ties": plateau_ties,
              "algorithm_switch": algorithm_switch}

# (source, target) pairs whose source's fastest basin is a poor one of the
# target.
TRANSFERS = {
    "two_basin_categorical": lambda seed: (
        two_basin_categorical(seed, broad_first=True),
        two_basin_categorical(seed)),
    "rugged_ordinal": lambda seed: (rugged_ordinal(seed, prefer_plain=True),
                                    rugged_ordinal(seed)),
    "joint_move_trap": lambda seed: (joint_move_trap(seed, trap_first=True),
                                     joint_move_trap(seed)),
    "triton_matmul": lambda seed: (triton_matmul(seed, device="small"),
                                   triton_matmul(seed)),
    "heavy_tailed": lambda seed: (heavy_tailed(seed, other_device=True),
                                  heavy_tailed(seed)),
    "plateau_ties": lambda seed: (plateau_ties(seed, other_device=True),
                                  plateau_ties(seed)),
    "algorithm_switch": lambda seed: (
        algorithm_switch(seed, other_device=True), algorithm_switch(seed)),
}


def write(path, table):
    """Writes a table as a (gzipped when the name ends in .gz) JSON file."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(table, f)
    return str(path)
