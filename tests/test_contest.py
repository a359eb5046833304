"""The fresh selection's contest (selection.contest, ContestRule): a short
screen, rounds that go to the candidates the screen cannot separate, and a
tie-break to the smaller config only where the timings cannot tell configs
apart. Timed on a gpu backend whose do_bench is a seeded fake: each
config's true time times lognormal noise that grows as a call gets
shorter."""
import math
import random

import pytest
import torch

from autotune.measure import backends, selection, tuner
from autotune.measure.fake_backend import gpu_backend_without_a_gpu
from autotune.records import Config

FULL_CALL_MS = 25.0 + 100.0


class FakeDoBench:
    def __init__(self, true_us, noise, seed):
        self.true_us = true_us
        self.noise = noise
        self.rng = random.Random(seed)
        self.current = None
        self.requested_ms = 0.0
        self.calls = []

    def __call__(self, fn, warmup=25, rep=100, quantiles=None):
        fn()
        self.requested_ms += warmup + rep
        self.calls.append((self.current, warmup, rep))
        sigma = self.noise * math.sqrt(100.0 / rep)
        median = self.true_us[self.current] / 1e3 * math.exp(
            self.rng.gauss(0.0, sigma))
        # quartiles: 0.674 standard deviations either side of the median
        return [median * math.exp(-0.674 * self.noise), median,
                median * math.exp(0.674 * self.noise)]


def configs(n):
    return [Config({"BLOCK": 16 * (i + 1)}, num_warps=4) for i in range(n)]


def evaluator_of(monkeypatch, bench, time_fn=None):
    """An evaluator on a GPU backend whose do_bench is `bench`: launching a
    config makes it the one `bench` times."""
    import triton.testing
    monkeypatch.setattr(triton.testing, "do_bench", bench)
    y = torch.zeros(4)

    def launch(config):
        bench.current = config
        y.fill_(1.0)
    return tuner.CandidateEvaluator(gpu_backend_without_a_gpu(), launch,
                                    {"y": y}, time_fn=time_fn)


def tune(monkeypatch, true_us, noise, seed, time_fn=None,
         contest_rule=selection.DEFAULT_CONTEST):
    bench = FakeDoBench(true_us, noise, seed)
    evaluator = evaluator_of(monkeypatch, bench, time_fn)
    result = tuner.run_candidates(evaluator, list(true_us),
                                  contest_rule=contest_rule)
    return result, bench


def near_tie(n, rng):
    """Times 100, 102, 104, 106, then 110-200, in a shuffled order."""
    times = [100.0, 102.0, 104.0, 106.0] + [
        110.0 * (200.0 / 110.0) ** (i / (n - 5)) for i in range(n - 4)]
    cs = configs(n)
    rng.shuffle(cs)
    return dict(zip(cs, times))


@pytest.fixture(autouse=True)
def _context(monkeypatch):
    monkeypatch.setattr(tuner, "_context_lost", None)


def test_a_miss_requests_under_half_of_one_full_call_per_config(monkeypatch):
    costs = []
    for seed in range(10):
        true_us = near_tie(20, random.Random(seed))
        _, bench = tune(monkeypatch, true_us, 0.02, seed)
        costs.append(bench.requested_ms)
    # Triton: one full call (25 + 100 ms) per config.
    assert max(costs) <= 0.5 * 20 * FULL_CALL_MS, costs


def test_the_first_pass_is_a_short_screen(monkeypatch):
    true_us = near_tie(20, random.Random(0))
    _, bench = tune(monkeypatch, true_us, 0.02, 0)
    first = bench.calls[:20]
    assert all(w <= 0.25 * 25.0 and r <= 0.25 * 100.0 for _, w, r in first)
    assert {c for c, _, _ in first} == set(true_us)


def test_a_clear_winner_is_settled_by_the_screen(monkeypatch):
    true_us = dict(zip(configs(8), [100.0, 200.0, 210.0, 220.0, 230.0,
                                    240.0, 250.0, 260.0]))
    result, bench = tune(monkeypatch, true_us, 0.01, 0)
    assert result.best.config == configs(8)[0]
    assert len(bench.calls) == 8
    assert bench.requested_ms == pytest.approx(
        8 * FULL_CALL_MS * selection.DEFAULT_CONTEST.screen_share)


def test_a_config_8_percent_faster_than_the_smaller_one_wins(monkeypatch):
    cs = configs(8)
    picks = 0
    for seed in range(100):
        rng = random.Random(seed)
        rest = cs[1:]
        rng.shuffle(rest)
        # The smallest config is 8 % slower than the fastest, a larger one.
        true_us = {rest[0]: 100.0, cs[0]: 108.0}
        true_us.update(zip(rest[1:], [130.0, 140.0, 150.0, 160.0, 170.0,
                                      180.0]))
        result, _ = tune(monkeypatch, true_us, 0.02, seed)
        picks += result.best.config == rest[0]
    assert picks >= 99


def test_near_ties_go_to_the_measured_fastest_more_often_than_one_call_each(
        monkeypatch):
    """At 1 % noise one full call per config (Triton's autotuner) picks the
    fastest of 100, 102, 104, 106 about 90 % of the time."""
    picked = 0
    for seed in range(40):
        true_us = near_tie(8, random.Random(seed))
        result, _ = tune(monkeypatch, true_us, 0.01, seed)
        picked += true_us[result.best.config] == 100.0
    assert picked >= 38, picked


def test_configs_shown_equivalent_go_to_the_smallest(monkeypatch):
    cs = configs(3)
    for seed in range(20):
        result, _ = tune(monkeypatch, {cs[2]: 100.0, cs[1]: 100.0,
                                       cs[0]: 100.0}, 0.002, seed)
        assert result.best.config == cs[0]


def test_a_callers_timing_is_always_asked_for_full_calls(monkeypatch):
    """Triton's do_bench arguments (a caller's time_fn) are not shortened:
    every call, screen and rounds, goes through the caller's function."""
    seen = []

    def time_fn(run, setup=None):
        seen.append(1)
        run()
        current = bench_holder[0].current
        return backends.Timing([bench_holder[0].true_us[current]] * 3)
    bench_holder = []
    true_us = near_tie(8, random.Random(1))
    bench = FakeDoBench(true_us, 0.02, 1)
    bench_holder.append(bench)
    evaluator = evaluator_of(monkeypatch, bench, time_fn)
    assert not evaluator.scalable
    result = tuner.run_candidates(evaluator, list(true_us))
    assert bench.calls == []
    assert len(seen) >= 8
    assert true_us[result.best.config] == 100.0


def test_gpu_backend_short_call_scales_warmup_and_repetitions(monkeypatch):
    import triton.testing
    calls = []

    def fake_do_bench(fn, warmup, rep, quantiles):
        calls.append((warmup, rep))
        return [0.010, 0.011, 0.012]
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    timing = gpu_backend_without_a_gpu().time(lambda: None, share=0.1)
    assert calls == [(2.5, 10.0)]
    assert timing.share == 0.1
    assert gpu_backend_without_a_gpu().time(lambda: None).share == 1.0


def test_contest_weighs_a_call_by_the_share_it_asked_for():
    """One long call that says A is faster outweighs a short one that says
    the opposite."""
    a, b = configs(2)
    board = selection._Contest({a: (100.0, 4.0), b: (100.0, 4.0)}, [0.01, 0.01],
                           selection.DEFAULT_CONTEST)
    board.add(a, backends.Timing([90.0], share=4.0))
    board.add(b, backends.Timing([110.0], share=4.0))
    board.add(a, backends.Timing([200.0], share=0.1))
    best, gaps, _ = board.standing([a, b])
    assert best == a and gaps[b][0] > 0


def test_configs_the_interpreter_runs_alike_go_to_the_smallest():
    """The interpreter ignores num_warps and num_stages: configs that differ
    only there run the same code, whatever their timings say."""
    times = {}
    rng = random.Random(0)
    y = torch.zeros(4)
    small = Config({"BLOCK": 32}, num_warps=2, num_stages=2)
    alike = [small, Config({"BLOCK": 32}, num_warps=4, num_stages=2),
             Config({"BLOCK": 32}, num_warps=8, num_stages=3)]
    slower = Config({"BLOCK": 64}, num_warps=2, num_stages=2)

    class Wallclock(backends.InterpreterBackend):
        def time(self, run, setup=None):
            run()
            # The same code: 100 us with 10 % noise per timing.
            base = 150.0 if times["current"] == slower else 100.0
            return backends.Timing([base * rng.lognormvariate(0.0, 0.1)
                                    for _ in range(3)])

    def launch(config):
        times["current"] = config
        y.fill_(1.0)
    picks = []
    for _ in range(30):
        evaluator = tuner.CandidateEvaluator(Wallclock(), launch, {"y": y})
        picks.append(tuner.run_candidates(evaluator, alike[::-1] + [slower])
                     .best.config)
    assert picks == [small] * 30
