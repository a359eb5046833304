import functools
import gzip
import json
import os
import statistics
import subprocess
import sys

import pytest

from autotune.records import Config
from autotune.search import evolutionary as ev
from autotune.cache import neighbours as reuse
from autotune.search import simulate
from autotune.runtime.parallel import ParallelEvaluator
from autotune.search.space import Space, SpaceError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_search import DEFAULT_DATA as HUB  # noqa: E402


def synthetic_table(path, failing=((4, 2),)):
    """A Kernel Tuner cache file: time = (x - 5)^2 + (y - 3)^2 + 1 ms."""
    params = {"x": list(range(10)), "y": list(range(6))}
    cache = {}
    for x in params["x"]:
        for y in params["y"]:
            t = float((x - 5) ** 2 + (y - 3) ** 2 + 1)
            cache[f"{x},{y}"] = {"x": x, "y": y, "time": (
                "RuntimeFailedConfig" if (x, y) in failing else t)}
    with gzip.open(path, "wt") as f:
        json.dump({"device_name": "synthetic", "tune_params": params,
                   "tune_params_keys": ["x", "y"], "cache": cache}, f)
    return str(path)


def measure_with(table, log=None):
    def measure(config):
        if log is not None:
            log.append(config)
        t = table(config)
        return ev.Measurement(config, t) if isinstance(t, float) else \
            ev.Measurement(config, None, t)
    return measure


def test_space_constraints_and_errors():
    space = Space({"A": [16, 32, 64], "B": [1, 2]},
                  constraints=["A * B <= 64", lambda v: v["A"] != 32])
    assert [c.kwargs for c in space.configs()] == [
        {"A": 16, "B": 1}, {"A": 16, "B": 2}, {"A": 64, "B": 1}]
    with pytest.raises(SpaceError, match="empty after applying 1"):
        Space({"A": [1, 2]}, constraints=["A > 5"]).configs()
    with pytest.raises(SpaceError, match="raised ZeroDivisionError"):
        Space({"A": [0, 1]}, constraints=["1 / A > 0"]).configs()
    with pytest.raises(SpaceError, match="not a Python expression"):
        Space({"A": [1]}, constraints=["A >"])
    with pytest.raises(SpaceError, match="has no values"):
        Space({"A": []})


def test_search_is_deterministic_unique_and_finds_the_optimum(tmp_path):
    table = simulate.TimingTable(synthetic_table(tmp_path / "t.json.gz"))
    runs = []
    for _ in range(2):
        log = []
        result = ev.EvolutionarySearch(table.space, budget=30, seed=7).run(
            measure_with(table, log))
        runs.append(log)
        assert len(log) == 30 and len(set(log)) == 30
        assert result.best.time == 1.0
    assert runs[0] == runs[1]
    other = []
    ev.EvolutionarySearch(table.space, budget=30, seed=8).run(
        measure_with(table, other))
    assert other != runs[0]


def test_failed_configs_never_win(tmp_path):
    table = simulate.TimingTable(synthetic_table(
        tmp_path / "t.json.gz", failing=((5, 3),)))  # the optimum fails
    result = ev.EvolutionarySearch(table.space, budget=60, seed=0).run(
        measure_with(table))
    assert any(m.failure == "RUNTIME_ERROR" for m in result.measurements)
    assert result.best.config != Config({"x": 5, "y": 3}, num_stages=2)
    assert result.best.time == 2.0


def test_seeds_are_measured_first(tmp_path):
    table = simulate.TimingTable(synthetic_table(tmp_path / "t.json.gz"))
    seeds = [Config({"x": 5, "y": 3}, num_stages=2),
             Config({"x": 0, "y": 0}, num_stages=2)]  # the space's stages
    log = []
    ev.EvolutionarySearch(table.space, budget=10, seed=0, seeds=seeds).run(
        measure_with(table, log))
    assert log[:2] == seeds


def synthetic_landscape(tmp_path, name, seed=0):
    from autotune.search import synthetic
    path = tmp_path / f"{name}-{seed}.json.gz"
    return simulate.TimingTable(synthetic.write(
        path, synthetic.LANDSCAPES[name](seed)))


def search_on(table, budget, seed, **options):
    return ev.EvolutionarySearch(table.space, budget=budget, seed=seed,
                                 **options).run(measure_with(table))


def test_categorical_basins_each_keep_a_leader(tmp_path):
    """Parameters of 3-4 string values, no order: the leaders (kept as
    parents and refined) include the best of each of two basins."""
    table = synthetic_landscape(tmp_path, "two_basin_categorical")
    search = ev.EvolutionarySearch(table.space, budget=50, seed=0)
    assert {search.enc.kinds[d] for d in search.enc.varying} == {
        ev.CATEGORICAL}
    ranked = [search.enc.encode(c) for c in table.ranked()]
    optimum = ranked[0]
    # The broad basin: every config far from the narrow optimum, best first.
    broad = [g for g in ranked if search.enc.distance(g, optimum) >= 5]
    leaders = search._leaders([broad[0], broad[1], optimum])
    assert leaders[:2] == [broad[0], optimum]


def test_categorical_two_basins_the_better_one_is_found(tmp_path):
    """3-4-valued string parameters, two basins whose centres differ in
    every parameter, the faster one narrow: most runs end at its optimum,
    and none sits at the broad basin's bottom without sweeping it (random
    sampling of the same budget: mean 1.09x the optimum)."""
    table = synthetic_landscape(tmp_path, "two_basin_categorical")
    runs = [search_on(table, 200, seed) for seed in range(16)]
    found = sum(r.best.time == 1.0 for r in runs)
    assert found >= 10, found
    mean = sum(r.best.time for r in runs) / len(runs)
    assert mean <= 1.04, mean
    for r in runs:
        assert table.faster_neighbour(r.best.config) is None


@pytest.mark.parametrize("name,budget", [("isolated_optimum", 50),
                                         ("isolated_optimum", 70),
                                         ("two_basin_categorical", 70),
                                         ("rugged_ordinal", 70),
                                         ("rugged_ordinal", 200)])
def test_returned_config_is_a_local_optimum(tmp_path, name, budget):
    """Budget is held back to sweep every parameter of the best config, and
    of any better one found doing so."""
    table = synthetic_landscape(tmp_path, name)
    for seed in range(3):
        best = search_on(table, budget, seed).best.config
        assert table.faster_neighbour(best) is None, (seed, best)


def test_stalled_search_tries_moves_of_two_ordinal_parameters(tmp_path):
    """When the best has not improved for a while, a generation also holds
    the model's best configs two ordinal parameters away from the best,
    which a one-parameter step cannot reach."""
    table = simulate.TimingTable(synthetic_table(tmp_path / "t.json.gz"))

    def generation(stall, **options):
        search = ev.EvolutionarySearch(table.space, budget=60, seed=1,
                                       **options)
        measure = measure_with(table)
        measured = {search.enc.encode(c): measure(c)
                    for c in table.space.configs()[::3]}
        ranked = sorted((g for g, m in measured.items() if m.ok),
                        key=lambda g: (measured[g].time, g))
        return ranked[0], measured, search._generation(
            ranked, measured, search._fit(measured), stall)
    best, measured, plain = generation(2, pair_moves=0)
    _, _, with_moves = generation(2)
    extra = with_moves[len(plain):]
    assert with_moves[:len(plain)] == plain and len(extra) == 2
    for g in extra:
        assert g not in measured
        assert sum(a != b for a, b in zip(g, best)) == 2
    # Not stalled: no such moves.
    assert generation(0)[2] == generation(0, pair_moves=0)[2]


def test_isolated_optimum_one_parameter_away_is_found(tmp_path):
    """The optimum sits at the far end of one parameter from the bottom of
    a smooth bowl, with slow configs around it: only a whole-parameter
    sweep of the bowl's best finds it."""
    table = synthetic_landscape(tmp_path, "isolated_optimum")
    for seed in range(3):
        assert search_on(table, 120, seed).best.time == 1.0


def test_seeds_from_a_poor_basin_do_not_trap(tmp_path):
    """Seeds from the broad basin (another GPU's favourites): the search
    still finds the narrow basin's optimum as often as unseeded."""
    table = synthetic_landscape(tmp_path, "two_basin_categorical")
    optimum = table.ranked()[0]
    far = [c for c in table.ranked()
           if sum(c.kwargs[k] != optimum.kwargs[k] for k in c.kwargs) == 6]
    seeds = far[:6]
    seeded = [search_on(table, 150, s, seeds=seeds).best.time
              for s in range(4)]
    unseeded = [search_on(table, 150, s).best.time for s in range(4)]
    assert sum(t == 1.0 for t in seeded) >= sum(t == 1.0 for t in unseeded)
    assert sum(seeded) <= sum(unseeded) + 1e-9


def test_only_part_of_the_population_is_seeded(tmp_path):
    table = simulate.TimingTable(synthetic_table(tmp_path / "t.json.gz"))
    seeds = [Config({"x": x, "y": y}, 4, 2) for x in range(10)
             for y in range(2)]
    log = []
    ev.EvolutionarySearch(table.space, budget=40, seed=0, seeds=seeds,
                          population=16).run(measure_with(table, log))
    assert log[:8] == seeds[:8]
    assert sum(c in seeds for c in log[8:24]) < 16


def test_budgets(tmp_path, monkeypatch):
    table = simulate.TimingTable(synthetic_table(tmp_path / "t.json.gz"))
    with pytest.raises(ev.SearchError, match="budget must be positive"):
        ev.EvolutionarySearch(table.space, budget=0)
    slow = []
    clock = [0.0]  # each measurement takes 0.05 s of the search's clock
    monkeypatch.setattr(ev.time, "perf_counter", lambda: clock[0])

    def measure(config):
        clock[0] += 0.05
        slow.append(config)
        return measure_with(table)(config)
    result = ev.EvolutionarySearch(table.space, budget=60,
                                   time_budget_s=0.3).run(measure)
    assert result.stopped_by == "time" and 6 <= len(slow) < 60


def test_table_without_the_asked_config(tmp_path):
    path = synthetic_table(tmp_path / "t.json.gz")
    table = simulate.TimingTable(path)
    with pytest.raises(simulate.TableMiss, match="no measurement for x=99"):
        table(Config({"x": 99, "y": 0}, 4, 2))


@pytest.mark.parametrize("argv,message", [
    (["--budget", "0"], "budget must be positive"),
    (["--constraint", "x > 100"], "empty after applying"),
    (["--constraint", "x / 0 > 1"], "raised ZeroDivisionError"),
])
def test_simulate_cli_bad_input(tmp_path, argv, message):
    path = synthetic_table(tmp_path / "t.json.gz")
    result = subprocess.run([sys.executable, "-m", "autotune.search.simulate",
                             path] + argv, cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_simulate_cli_table_missing_a_config(tmp_path):
    path = tmp_path / "holey.json.gz"
    synthetic_table(path)
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    del data["cache"]["5,3"]
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    result = subprocess.run([sys.executable, "-m", "autotune.search.simulate",
                             str(path), "--budget", "60"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no measurement for x=5 y=3" in result.stderr
    assert "--constraints T1.json" in result.stderr
    assert "--missing_as_failed" in result.stderr
    assert "Traceback" not in result.stderr


def test_optimum_is_the_fastest_config_the_constraints_allow(tmp_path):
    path = synthetic_table(tmp_path / "t.json.gz")
    assert simulate.TimingTable(path).optimum() == 1.0  # x=5, y=3
    # The constraint excludes it: the best allowed is x=4, y=3 (2 ms).
    assert simulate.TimingTable(path, ["x <= 4"]).optimum() == 2.0


def test_a_space_with_no_measured_config_is_an_error(tmp_path):
    path = synthetic_table(tmp_path / "t.json.gz", failing=((9, 5),))
    table = simulate.TimingTable(path, ["x >= 9", "y >= 5"])
    for call in (table.optimum, lambda: table.hill_climb(5, 0)):
        with pytest.raises(simulate.TableError,
                           match="no config of the space has a measured"):
            call()
    result = subprocess.run([sys.executable, "-m", "autotune.search.simulate",
                             path, "--landscape", "--constraint", "x >= 9",
                             "--constraint", "y >= 5"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_landscape_says_when_it_lists_only_the_fastest_optima():
    many = simulate.Landscape(20, 20, [(1.0 + i / 10, 1) for i in range(7)],
                              [1.0])
    assert "7 local optima (time / optimum, share of descents ending " \
        "there): the 5 fastest: 1.000x (5%)" in many.summary()
    few = simulate.Landscape(9, 9, [(1.0, 5), (1.5, 4)], [1.0])
    assert "fastest" not in few.summary()


def test_simulate_cli_counts_missing_configs_as_failed(tmp_path):
    path = tmp_path / "holey.json.gz"
    synthetic_table(path)
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    for key in ("5,3", "0,0", "9,5"):
        del data["cache"][key]
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    result = subprocess.run([sys.executable, "-m", "autotune.search.simulate",
                             str(path), "--budget", "60",
                             "--missing_as_failed"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    # The optimum (5, 3) is missing: the best the table holds is 2 ms.
    assert "best after 60 evaluations" in result.stdout
    assert " 2.0000 ms" in result.stdout
    measured_missing = int(result.stdout.split("missing from the table: ")[1]
                           .split()[0])
    assert 1 <= measured_missing <= 3
    assert "3 of the space's 60" in result.stdout


def test_diverse_top_takes_each_basin_first():
    ranked = [Config({"A": a, "F": f}) for a, f in
              [(1, 0), (2, 0), (3, 0), (9, 1)]]
    assert reuse.diverse_top(ranked, 2, ["F"]) == [ranked[0], ranked[3]]


def test_shape_distance_prefers_nearby_sizes():
    assert reuse.shape_distance("M=64,N=64;d", "M=128,N=64;d") == 1.0
    assert reuse.shape_distance("M=64;d", "M=64,N=1;d") == float("inf")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(HUB), reason="benchmark_hub data "
                    "not present")
def test_search_on_recorded_a100_table():
    tables = simulate.load_benchmark_hub(HUB)
    table = tables["A100"]
    assert len(table.space) == 4362
    # A run can end in the second basin (1.07x, one joint move from
    # nothing better): the figure of a search is its runs', not one run's.
    ratios = [ev.EvolutionarySearch(table.space, budget=200, seed=seed).run(
        measure_with(table)).best.time / table.optimum()
        for seed in range(5)]
    assert statistics.median(ratios) == 1.0, ratios
    assert statistics.mean(ratios) <= 1.05, ratios


# -- parallel workers (real processes) ------------------------------------

def crashing_objective(device, crash_on):
    def objective(config):
        if config.kwargs["x"] == crash_on:
            os._exit(3)  # the worker dies mid-candidate
        return ev.Measurement(config, float(config.kwargs["x"]) + 1.0)
    return objective


def test_parallel_worker_death_loses_nothing():
    configs = [Config({"x": i}) for i in range(8)]
    factory = functools.partial(crashing_objective, crash_on=5)
    with ParallelEvaluator(factory, devices=["cpu0", "cpu1"],
                           retries=1) as evaluator:
        results = evaluator.evaluate(configs)
        assert evaluator.lost_workers == 2  # first try and the retry
    assert [r.config for r in results] == configs
    for r in results:
        if r.config.kwargs["x"] == 5:
            assert r.failure == "RUNTIME_ERROR" and "died" in r.detail
        else:
            assert r.ok and r.time == r.config.kwargs["x"] + 1.0


def test_parallel_tuning_of_real_triton_candidates():
    from autotune.kernels import matmul
    space = matmul.search_space()
    factory = functools.partial(matmul.candidate_objective, M=32, N=32, K=32)
    with ParallelEvaluator(factory, devices=["cpu0", "cpu1"]) as evaluator:
        search = ev.EvolutionarySearch(space, budget=8, seed=0, batch=4)
        result = search.run(measure_many=evaluator.evaluate)
    assert len(result.measurements) == 8
    assert result.best is not None and result.best.time > 0


# -- --autotune_workers: the decorator's miss path in worker processes -----

PARENT_PID = os.getpid()


def dies_in_a_worker_on_block_64(n):
    import triton

    def grid(meta):
        if meta["BLOCK"] == 64 and os.getpid() != PARENT_PID:
            os._exit(3)  # the worker dies mid-candidate
        return (triton.cdiv(n, meta["BLOCK"]),)
    return grid


def tune_once(session_factory, tmp_path, name, workers, grid_of=None):
    import torch

    import tiny_kernels as tk
    report = tmp_path / f"{name}.json"
    sess = session_factory(autotune_workers=workers,
                           autotune_report_to=str(report))
    configs = tk.GOOD + [tk.WRONG, tk.CRASH,
                         Config({"BLOCK": 64, "BUG": 0}, num_warps=4)]
    tuned = tk.make_tuner(configs)
    x = torch.arange(40, dtype=torch.float32)
    y = torch.empty_like(x)
    grid = (grid_of or (lambda n: lambda meta: (-(-n // meta["BLOCK"]),)))(40)
    tuned[grid](x, y, 40, 2.0)
    assert torch.allclose(y, x * 2.0 + 1.0)
    entry = next(iter(sess.cache.memory.values()))
    stats = sess.stats.as_dict()
    sess.finish()
    return entry, stats, json.loads(report.read_text())


def test_workers_tune_a_miss_as_one_process_does(session_factory, tmp_path):
    one, one_stats, one_report = tune_once(session_factory, tmp_path, "one",
                                           1)
    two, two_stats, two_report = tune_once(session_factory, tmp_path, "two",
                                           2)
    # Same candidates, same verdicts, same counts; only timings differ.
    assert [(c.config, c.failure) for c in one.candidates] == \
        [(c.config, c.failure) for c in two.candidates]
    assert {c.config: c.failure for c in two.candidates}[
        Config({"BLOCK": 24, "BUG": 0}, num_warps=4)] == "COMPILE_ERROR"
    assert one_stats["candidate_benchmarks"] == \
        two_stats["candidate_benchmarks"] == 5
    assert two.best.kwargs["BUG"] == 0 and two.provenance.tuner == \
        one.provenance.tuner
    assert sorted(one_report) == sorted(two_report)


def test_a_dying_worker_loses_nothing_measured(session_factory, tmp_path):
    entry, stats, _ = tune_once(session_factory, tmp_path, "dies", 2,
                                dies_in_a_worker_on_block_64)
    verdicts = {c.config.kwargs["BLOCK"]: c for c in entry.candidates}
    assert verdicts[64].failure == "RUNTIME_ERROR"
    assert "died" in verdicts[64].failure_detail
    assert verdicts[16].ok and verdicts[32].ok
    assert verdicts[24].failure == "COMPILE_ERROR"
    assert entry.best.kwargs["BLOCK"] in (16, 32)


def test_workers_flag_is_checked():
    from autotune import flags
    assert flags.parse("--autotune_workers=3").autotune_workers == 3
    with pytest.raises(flags.AutotuneFlagsError, match="autotune_workers"):
        flags.parse("--autotune_workers=0")
    with pytest.raises(flags.AutotuneFlagsError, match="whole number"):
        flags.resolve_options(flags.Options(autotune_workers="2"))


def two_optima_table(path):
    """a, b in 0..2: local optima at (0, 0) (1 ms) and (2, 2) (1.5 ms);
    (1, 1) fails."""
    times = [[1.0, 5.0, 6.0], [5.0, "RuntimeFailedConfig", 8.0],
             [6.0, 8.0, 1.5]]
    cache = {f"{a},{b}": {"a": a, "b": b, "time": times[a][b]}
             for a in range(3) for b in range(3)}
    with gzip.open(path, "wt") as f:
        json.dump({"device_name": "two optima",
                   "tune_params": {"a": [0, 1, 2], "b": [0, 1, 2]},
                   "tune_params_keys": ["a", "b"], "cache": cache}, f)
    return str(path)


def test_landscape_finds_local_optima_and_their_basins(tmp_path):
    table = simulate.TimingTable(two_optima_table(tmp_path / "t.json.gz"))
    land = table.landscape()
    # Steepest descents: (0,1) (1,0) (0,2) (2,0) end at (0,0); (1,2) and
    # (2,1) at (2,2). The failed (1,1) is neither a start nor an end.
    assert land.optima == [(1.0, 5), (1.5, 3)]
    assert (land.size, land.measured) == (9, 8)
    assert land.optimum_basin() == 5 / 8
    assert land.within(1.01) == 1 and land.within(1.5) == 2
    for key in [(0, 0), (2, 2)]:
        assert table.faster_neighbour(table.config_of(key)) is None


def test_hill_climb_reference_ends_at_a_verified_local_optimum(tmp_path):
    table = simulate.TimingTable(two_optima_table(tmp_path / "t.json.gz"))
    ends = set()
    for seed in range(12):
        key, verified = table.hill_climb(9, seed)
        assert verified and key in [(0, 0), (2, 2)], (seed, key)
        assert table.hill_climb(9, seed) == (key, verified)  # deterministic
        ends.add(key)
        # Two evaluations cannot measure the four neighbours of any end.
        key, verified = table.hill_climb(2, seed)
        assert not verified and isinstance(table.times[key], float)
    assert ends == {(0, 0), (2, 2)}  # starts differ with the seed


def test_simulate_cli_landscape(tmp_path):
    path = two_optima_table(tmp_path / "t.json.gz")
    result = subprocess.run([sys.executable, "-m", "autotune.search.simulate",
                             path, "--landscape"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "9 configs, 8 measured" in result.stdout
    assert "2 local optima" in result.stdout
    assert "1.000x (62%), 1.500x (38%)" in result.stdout


def test_model_learns_an_interaction_of_two_parameters():
    """Fast exactly when a and b differ: no sum of one-parameter effects
    says so (every value of a, and of b, is fast as often as slow), the
    surrogate's pair terms do."""
    space = Space({"a": ["p", "q", "r"], "b": ["p", "q", "r"],
                   "c": [1, 2, 3]})
    search = ev.EvolutionarySearch(space, budget=10)
    names = search.enc.names

    def time_of(genome):
        v = dict(zip(names, genome))
        return 1.0 if v["a"] != v["b"] else 2.0
    # Main effects first (the lighter penalty), then one cell per pair of
    # values of every two parameters: 3 pairs of 9 cells here.
    assert search.enc.features(search.valid_list[:1]).shape[1] == \
        search.enc.main_width + 27
    held_out = [g for g in search.valid_list if g[names.index("c")] == 0]
    measured = {g: ev.Measurement(search.valid[g], time_of(g))
                for g in search.valid_list if g not in held_out}
    weights = search._fit(measured)
    ranked = search._rank(weights, held_out)
    assert sorted(time_of(g) for g in ranked[:6]) == [1.0] * 6
    assert [time_of(g) for g in ranked[6:]] == [2.0] * 3


def test_refinement_reserve_is_bounded_by_the_budget(tmp_path):
    """A neighbourhood of 27 configs would hold back most of a budget of
    100 (an unmeasured sweep, a share of a sweep more, the joint moves):
    the evolutionary phase keeps at least 40 % of it."""
    table = synthetic_landscape(tmp_path, "joint_move_trap")
    for seed in range(3):
        result = search_on(table, 100, seed)
        assert result.refine_started is not None
        assert 40 <= result.refine_started < 100, result.refine_started


@pytest.mark.slow
def test_joint_move_trap_is_left_by_refinement(tmp_path):
    """About half the steepest descents end in a basin whose bottom is two
    sizes away from the optimum, each size changed alone 1.2-1.3x slower:
    the joint moves tried while refining leave it."""
    table = synthetic_landscape(tmp_path, "joint_move_trap")
    land = table.landscape()
    assert len(land.optima) == 2 and 0.4 <= land.optima[1][1] / \
        land.measured <= 0.6
    found = sum(search_on(table, 200, seed).best.time == table.optimum()
                for seed in range(20))
    assert found >= 18, found


def test_seeds_from_the_trap_do_not_decide(tmp_path):
    """Seeds from a device whose fastest basin is the target's trap beat
    the random configs there: they take no part in the search, so the
    seeded runs leave the trap about as often as the unseeded ones (with
    the seeds steering the search from the start, most runs stay in it)."""
    from autotune.search import synthetic
    source_table, target_table = synthetic.TRANSFERS["joint_move_trap"](0)
    source = simulate.TimingTable(synthetic.write(
        tmp_path / "source.json.gz", source_table))
    target = simulate.TimingTable(synthetic.write(
        tmp_path / "target.json.gz", target_table))
    seeds = reuse.diverse_top(source.ranked(), 6, ["swizzle", "vector"])
    trap_bottom = min(target(c) for c in seeds)
    assert trap_bottom > 1.05 * target.optimum()

    def left_the_trap(**options):
        return sum(search_on(target, 100, s, **options).best.time
                   < trap_bottom for s in range(10))
    unseeded = left_the_trap()
    assert unseeded >= 5, unseeded
    assert left_the_trap(seeds=seeds) >= unseeded - 1


def test_a_seed_wins_when_measured_fastest(tmp_path):
    table = synthetic_landscape(tmp_path, "joint_move_trap")
    optimum = table.ranked()[0]
    result = search_on(table, 30, 0, seeds=[optimum])
    assert result.best.config == optimum


def test_a_faster_seed_at_a_poor_bottom_costs_a_few_tries(tmp_path):
    """A seed faster than anything the search finds, at the bottom of the
    trap: refinement tries a few of its neighbours (none is faster) and
    leaves the rest of the budget to the search's own best."""
    table = synthetic_landscape(tmp_path, "joint_move_trap")
    trap_bottom = next(c for c in table.ranked()[1:]
                       if table.faster_neighbour(c) is None)
    assert table(trap_bottom) > 1.05 * table.optimum()

    def seed_neighbours_measured(seed, **options):
        search = ev.EvolutionarySearch(table.space, budget=60, seed=seed,
                                       seeds=[trap_bottom], **options)
        around = {search.valid[g] for g in search._neighbours(
            search.enc.encode(trap_bottom), full=True)}
        result = search.run(measure_with(table))
        assert result.best.time <= table(trap_bottom)
        return sum(m.config in around for m in result.measurements)
    few = [seed_neighbours_measured(seed) for seed in range(1, 4)]
    every = [seed_neighbours_measured(seed, seed_tries=1000)
             for seed in range(1, 4)]
    # (The search measures some of them on its own too.)
    assert sum(few) + 6 <= sum(every), (few, every)
