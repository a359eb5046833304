"""The synthetic timing tables have the structure their docstrings claim,
read back from the tables themselves (through simulate.TimingTable)."""
import math
import statistics

import pytest

from autotune.search import simulate, synthetic

NEW_KINDS = ["triton_matmul", "heavy_tailed", "plateau_ties",
             "algorithm_switch"]

_tables = {}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """(target, source) TimingTables of each kind, seed 0, built once."""
    if not _tables:
        directory = tmp_path_factory.mktemp("synthetic")
        for name in NEW_KINDS:
            source, target = synthetic.TRANSFERS[name](0)
            _tables[name] = tuple(
                simulate.TimingTable(synthetic.write(
                    directory / f"{name}-{role}.json", table))
                for role, table in (("target", target), ("source", source)))
            _tables[name, "raw"] = target
    return _tables


def time_of(table, key):
    t = table.times.get(key)
    return t if isinstance(t, float) else math.inf


def descent_end(table, key):
    """Where a steepest descent of one-parameter moves from `key` ends."""
    while True:
        neighbours = [key[:i] + (value,) + key[i + 1:]
                      for i, name in enumerate(table.keys)
                      for value in table.params[name] if value != key[i]]
        best = min(neighbours, key=lambda k: time_of(table, k))
        if time_of(table, best) >= time_of(table, key):
            return key
        key = best


def measured(table):
    return sorted(t for t in table.times.values() if isinstance(t, float))


@pytest.mark.parametrize("name", NEW_KINDS)
def test_built_the_same_from_a_seed_and_paired_with_the_bench_table(
        tables, name):
    table = synthetic.LANDSCAPES[name](0)
    assert 2000 <= len(table["cache"]) <= 30000
    # The same from a seed; the bench seeds the LANDSCAPES table with the
    # TRANSFERS source, so the pair's target is that table.
    assert table == tables[name, "raw"]
    assert synthetic.LANDSCAPES[name](1)["cache"] != table["cache"]


@pytest.mark.parametrize("name", NEW_KINDS)
def test_source_best_configs_are_a_poor_basin_of_the_target(tables, name):
    """Another device's six fastest configs beat the target's median, and a
    steepest descent from its fastest and from most of the others ends at
    a local optimum that is not the target's optimum."""
    target, source = tables[name]
    optimum = target.key_of(target.ranked()[0])
    median = statistics.median(measured(target))
    elsewhere = []
    for config in source.ranked()[:6]:
        key = target.key_of(config)
        assert time_of(target, key) < median, target.describe(config)
        end = descent_end(target, key)
        elsewhere.append(end != optimum and time_of(target, end)
                         > 1.01 * time_of(target, optimum))
    assert elsewhere[0] and sum(elsewhere) >= 4, elsewhere


def test_matmul_fails_big_tiles_with_many_stages_and_peaks_at_the_edge(
        tables):
    target, source = tables["triton_matmul"]
    limit = synthetic.MATMUL_DEVICES["large"]["shared"]
    index = {name: i for i, name in enumerate(target.keys)}

    def shared(key):
        return key[index["stages"]] * 2 * key[index["BLOCK_K"]] * (
            key[index["BLOCK_M"]] + key[index["BLOCK_N"]])
    over = [k for k in target.times if shared(k) > limit]
    assert len(over) >= 0.1 * len(target.times)
    assert all(target.times[k] == "COMPILE_ERROR" for k in over)
    assert all(target.times[k] != "COMPILE_ERROR"
               for k in target.times if shared(k) <= limit)
    # The optimum uses more than half the shared memory, and one more
    # stage or a tile twice as deep no longer fits.
    optimum = target.key_of(target.ranked()[0])
    assert shared(optimum) > limit / 2
    stages, depth = index["stages"], index["BLOCK_K"]
    deeper = list(optimum)
    deeper[depth] *= 2
    more = list(optimum)
    more[stages] += 1
    assert any(target.times.get(tuple(k)) == "COMPILE_ERROR"
               for k in (deeper, more))
    # The smaller device fails more configs (less shared memory).
    assert sum(t == "COMPILE_ERROR" for t in source.times.values()) > len(
        over)
    land = target.landscape()
    assert len(land.optima) >= 5 and land.optimum_basin() < 0.5


def test_heavy_tailed_random_configs_are_several_times_slower(tables):
    target, _ = tables["heavy_tailed"]
    times = measured(target)
    best = times[0]
    assert statistics.median(times) >= 3.0 * best
    assert sum(t >= 2.5 * best for t in times) >= 0.6 * len(times)
    assert sum(t <= 1.1 * best for t in times) <= 0.001 * len(times)
    land = target.landscape()
    # A narrow good basin; most descents end in a broad one 1.2-1.4x slower.
    assert land.optimum_basin() <= 0.3
    assert 1.2 <= land.optima[1][0] <= 1.4
    assert land.optima[1][1] >= 0.6 * land.measured


def test_plateau_has_many_near_ties_and_a_small_faster_region(tables):
    target, _ = tables["plateau_ties"]
    land = target.landscape()
    best = measured(target)[0]
    # The plateau: most configs within 1-5 % of the optimum, its many
    # noisy local optima 1-2.5 % slower; the region within 1 % is small.
    plateau = [r for r, n in land.optima if r > 1.01]
    assert len(plateau) >= 20 and all(r <= 1.025 for r in plateau[:10])
    assert land.within(1.05) >= 0.6 * land.measured
    assert land.within(1.01) <= 0.01 * land.measured
    assert land.optimum_basin() <= 0.2
    assert min(plateau) > 1.01 and best == target.optimum()


def test_algorithm_switch_source_best_needs_more_than_the_switch(tables):
    """The other device's best uses another algorithm: on the target it is
    a local optimum, switching its algorithm alone is slower."""
    target, source = tables["algorithm_switch"]
    optimum = target.ranked()[0]
    seed = source.ranked()[0]
    assert seed.kwargs["algorithm"] != optimum.kwargs["algorithm"]
    assert target.faster_neighbour(seed) is None
    switched = target.key_of(seed)[:0] + (optimum.kwargs["algorithm"],) \
        + target.key_of(seed)[1:]
    assert time_of(target, switched) > time_of(target, target.key_of(seed))
