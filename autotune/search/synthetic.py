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

TRANSFERS builds pairs (source, target) of tables of one space for
seeding from another device: the source's fastest basin is a poor basin of
the target (its best configs beat random ones there, but the target's
optimum lies elsewhere).
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


LANDSCAPES = {"two_basin_categorical": two_basin_categorical,
              "isolated_optimum": isolated_optimum,
              "rugged_ordinal": rugged_ordinal,
              "joint_move_trap": joint_move_trap}

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
}


def write(path, table):
    """Writes a table as a (gzipped when the name ends in .gz) JSON file."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(table, f)
    return str(path)
