"""The miss path (autotune.runtime.tuning), driven without a kernel: a fake
launch that writes its output with plain tensor arithmetic and advances a
fake clock by the time each config is set to take, measured by a backend
that reads that clock. What is measured, in which order, what wins and
what is recorded follow from the table of times alone."""
import logging

import pytest
import torch

from autotune import keys
from autotune.errors import AutotuneError
from autotune.measure import fake_backend
from autotune.records import Config
from autotune.runtime import session as runtime_session
from autotune.runtime import tuning
from autotune.search.space import Space

KEY = keys.make_key("fake/device", "fake_kernel", "0123456789abcdef", "n=64")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def FakeBackend(clock):
    """Times a run by the fake clock: each repetition takes what the launch
    advanced it by."""
    return fake_backend.FakeBackend(clock=clock)


def config(block, warps=4):
    return Config({"BLOCK": block}, num_warps=warps)


class FakeKernel:
    """y = 2 * x. ms: {config: milliseconds per launch}; a config in
    `crash` raises, one in `wrong` writes 3 * x."""

    def __init__(self, clock, ms, crash=(), wrong=()):
        self.clock = clock
        self.ms = ms
        self.crash = set(crash)
        self.wrong = set(wrong)
        self.first_runs = []  # the configs in the order they were measured
        self.launches = 0
        self.x = torch.arange(64, dtype=torch.float32)
        self.y = torch.zeros(64)

    def run(self, config, after_kernel=None):
        self.launches += 1
        if after_kernel is not None:
            self.first_runs.append(config)
        self.clock.now += self.ms.get(config, 1.0) / 1000.0
        if config in self.crash:
            raise RuntimeError(f"launch failed for {config.short()}")
        self.y.copy_(self.x * (3.0 if config in self.wrong else 2.0))
        if after_kernel is not None:
            after_kernel()

    def launch(self):
        return tuning.Launch(self.run, {"x": self.x, "y": self.y, "n": 64},
                             make_setup=self.make_setup)

    def make_setup(self):
        """Triton's default hooks stand here: made once per miss, called
        before every launch."""
        self.setups_made = getattr(self, "setups_made", 0) + 1
        self.setups = 0

        def setup():
            self.setups += 1
        return setup


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def sess(clock, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()
    return runtime_session.Session(backend=FakeBackend(clock))


def reference(x, y, n):
    y.copy_(2.0 * x)


def miss(sess, kernel, **options):
    options.setdefault("reference", reference)
    return tuning.Tuning(sess, KEY, kernel.launch(),
                         tuning.TuningOptions("fake_kernel", **options))


def test_a_miss_measures_every_config_once_and_records_the_fastest(sess,
                                                                   clock):
    a, b, c = config(16), config(32), config(64)
    kernel = FakeKernel(clock, {a: 3.0, b: 1.0, c: 2.0})
    tuning_ = miss(sess, kernel, configs=[a, b, c])
    entry = tuning_.run()
    assert kernel.first_runs == [a, b, c]
    assert entry.key == KEY and entry.best == b
    assert entry.run_time_us == pytest.approx(1000.0)
    assert [x.config for x in entry.candidates] == sorted(
        [a, b, c], key=lambda cfg: cfg.sort_key)
    assert {x.config: x.run_time_us for x in entry.candidates} == \
        pytest.approx({a: 3000.0, b: 1000.0, c: 2000.0})
    assert entry.provenance.tuner == "exhaustive"
    assert tuning_.result.best.config == b
    assert sess.stats.candidate_benchmarks == 3
    # The arguments are left as they were before the miss.
    assert torch.equal(kernel.y, torch.zeros(64))


def test_configs_that_fail_or_compute_wrong_values_never_win(sess, clock):
    good, crash, wrong = config(16), config(32), config(64)
    kernel = FakeKernel(clock, {good: 5.0, crash: 0.1, wrong: 0.1},
                        crash=[crash], wrong=[wrong])
    entry = miss(sess, kernel, configs=[crash, wrong, good]).run()
    assert entry.best == good
    failures = {x.config: x.failure for x in entry.candidates}
    assert failures == {good: "NONE", crash: "RUNTIME_ERROR",
                        wrong: "WRONG_RESULT"}


def test_a_miss_where_nothing_runs_raises_and_says_so(sess, clock):
    a, b = config(16), config(32)
    kernel = FakeKernel(clock, {}, crash=[a, b])
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("autotune.tuning")
    logger.addHandler(handler)
    try:
        with pytest.raises(AutotuneError, match="no config ran correctly"):
            miss(sess, kernel, configs=[a, b]).run()
    finally:
        logger.removeHandler(handler)
    assert any("tuning fake_kernel [n=64]: 2 candidates" in line
               for line in lines)
    assert any("tuning fake_kernel [n=64] failed: no config ran" in line
               for line in lines)


def test_a_seeded_miss_measures_the_seeds_then_a_short_list(sess, clock):
    configs = [config(2 ** i) for i in range(4, 10)]  # 16 ... 512
    seed = configs[3]
    kernel = FakeKernel(clock, {c: 1.0 + i for i, c in enumerate(configs)})
    entry = miss(sess, kernel, configs=configs).run(seeds=[seed])
    # The seed first, then half of the other five.
    assert kernel.first_runs == [seed, configs[0], configs[1]]
    assert entry.best == configs[0]
    assert entry.provenance.tuner == "seeded"


def test_seeds_not_among_the_pruned_configs_are_dropped(sess, clock):
    a, b = config(16), config(32)
    kernel = FakeKernel(clock, {a: 2.0, b: 1.0})
    entry = miss(sess, kernel, configs=[a, b]).run(seeds=[config(999)])
    assert kernel.first_runs == [a, b]
    assert entry.provenance.tuner == "exhaustive"


@pytest.mark.parametrize("challenger_ms,kept", [(0.95, True), (0.5, False)])
def test_the_incumbent_is_kept_unless_clearly_beaten(sess, clock, monkeypatch,
                                                     challenger_ms, kept):
    incumbent, challenger, other = config(64), config(16), config(32)
    monkeypatch.setattr(sess, "incumbent_config",
                        lambda key: incumbent if key == KEY else None)
    kernel = FakeKernel(clock, {incumbent: 1.0, challenger: challenger_ms,
                                other: 3.0})
    configs = [challenger, other, config(128), config(256), incumbent]
    entry = miss(sess, kernel, configs=configs).run(seeds=[other])
    # A seeded miss's short list keeps the incumbent.
    assert kernel.first_runs == [other, challenger, config(128), incumbent]
    assert entry.best == (incumbent if kept else challenger)


def test_pruned_to_one_config_is_recorded_without_a_launch(sess, clock):
    only = config(16)
    kernel = FakeKernel(clock, {})
    tuning_ = miss(sess, kernel, configs=[only, only])
    entry = tuning_.run()
    assert entry.best == only and entry.candidates == ()
    assert entry.provenance.tuner == "pruned"
    assert kernel.launches == 0 and tuning_.result is None
    # Nothing measured: the hooks' snapshot is not even taken.
    assert getattr(kernel, "setups_made", 0) == 0


def test_the_launch_setup_runs_before_every_launch(sess, clock):
    a, b = config(16), config(32)
    kernel = FakeKernel(clock, {a: 1.0, b: 2.0})
    miss(sess, kernel, configs=[a, b]).run()
    assert kernel.setups_made == 1
    assert kernel.setups == kernel.launches == 8  # 2 x (checked + 3 timed)


def without_reference(sess, kernel, configs, **options):
    """A miss of `kernel` over `configs` with no reference to check the
    results against; returns it and the list of (what, text) warnings it
    gives."""
    said = []
    tuning_ = miss(sess, kernel, configs=configs, reference=None,
                   warn_once=lambda what, text: said.append((what, text)),
                   **options)
    return tuning_, said


def three_configs_without_reference(sess, clock, times_ms, wrong):
    """Tunes FakeKernel over BLOCK=16, 32, 64, taking `times_ms` each, with
    no reference; the config at index `wrong` computes a wrong result.
    Returns the configs, the kernel, the entry and the warnings."""
    configs = [config(16), config(32), config(64)]
    kernel = FakeKernel(clock, dict(zip(configs, times_ms)),
                        wrong=[configs[wrong]])
    tuning_, said = without_reference(sess, kernel, configs)
    return configs, kernel, tuning_.run(), said


def test_without_a_reference_a_minority_that_differs_is_dropped(sess, clock):
    (a, b, c), kernel, entry, said = three_configs_without_reference(
        sess, clock, (2.0, 1.0, 3.0), wrong=1)
    assert entry.best == a
    failures = {x.config: x.failure for x in entry.candidates}
    assert failures == {a: "NONE", b: "WRONG_RESULT", c: "NONE"}
    assert [what for what, _ in said] == ["reference", "wrong"]
    assert "checked against each other" in said[0][1]
    # The first config's group is a majority: nothing is run again.
    assert kernel.launches == 3 + 2 * 3


def test_without_a_reference_a_wrong_first_config_is_outvoted(sess, clock):
    (wrong, a, b), _, entry, said = three_configs_without_reference(
        sess, clock, (0.5, 2.0, 1.0), wrong=0)
    assert entry.best == b
    candidates = {x.config: x for x in entry.candidates}
    assert candidates[wrong].failure == "WRONG_RESULT"
    assert "y: max abs error" in candidates[wrong].failure_detail
    assert "2 of 3 configs agree" in candidates[wrong].failure_detail
    assert candidates[a].ok and candidates[a].run_time_us == \
        pytest.approx(2000.0)
    assert [what for what, _ in said] == ["reference", "wrong"]


class ScratchKernel(FakeKernel):
    """y = 2 * x (3 * x for a config in `wrong`), and one partial sum of
    y per block of BLOCK elements in `partials`: how many are written,
    and what, depends on BLOCK."""

    def __init__(self, clock, ms, wrong=()):
        super().__init__(clock, ms, wrong=wrong)
        self.partials = torch.zeros(64)

    def run(self, config, after_kernel=None):
        block = config.kwargs["BLOCK"]
        self.partials.zero_()
        super().run(config, None)
        sums = self.y.reshape(-1, block).sum(dim=1)
        self.partials[:sums.numel()] = sums
        if after_kernel is not None:
            self.first_runs.append(config)
            after_kernel()

    def launch(self):
        return tuning.Launch(self.run, {"x": self.x, "y": self.y,
                                        "partials": self.partials, "n": 64},
                             make_setup=self.make_setup)


def test_scratch_that_differs_by_config_keeps_every_config(sess, clock):
    configs = [config(4), config(8), config(16), config(32), config(64)]
    kernel = ScratchKernel(clock, {c: 5.0 - i for i, c in
                                   enumerate(configs)})
    tuning_, said = without_reference(sess, kernel, configs)
    entry = tuning_.run()
    assert all(x.ok for x in entry.candidates)
    assert entry.best == configs[-1]
    assert tuning_.result.consensus.scratch == ("partials",)
    assert [what for what, _ in said] == ["reference", "scratch"]
    assert "into partials and no majority" in said[1][1]
    # Each config: its first run and 3 timed; then the review: each run
    # twice more (no comparison of every pair), and the 4 configs the
    # first pass took for wrong timed as the first pass times.
    assert kernel.launches == 5 * 4 + 2 * 5


def test_configs_that_differ_only_in_launch_options_are_one_witness(sess,
                                                                    clock):
    # Three of four configs set BLOCK=32: they run one program, so their
    # equal partial sums are no majority against BLOCK=16's.
    configs = [config(16, 1), config(32, 2), config(32, 4), config(32, 8)]
    kernel = ScratchKernel(clock, {})
    tuning_ = miss(sess, kernel, configs=configs, reference=None,
                   warn_once=lambda what, text: None)
    entry = tuning_.run()
    assert all(x.ok for x in entry.candidates)
    assert tuning_.result.consensus.scratch == ("partials",)


def test_a_real_output_is_still_judged_beside_scratch(sess, clock):
    configs = [config(4), config(8), config(16), config(32)]
    kernel = ScratchKernel(clock, {}, wrong=[configs[2]])
    tuning_ = miss(sess, kernel, configs=configs, reference=None,
                   warn_once=lambda what, text: None)
    entry = tuning_.run()
    failures = {x.config: x.failure for x in entry.candidates}
    assert failures[configs[2]] == "WRONG_RESULT"
    assert [c for c, f in failures.items() if f == "NONE"] == \
        [configs[0], configs[1], configs[3]]
    assert tuning_.result.consensus.scratch == ("partials",)
    detail = next(x.failure_detail for x in entry.candidates
                  if x.config == configs[2])
    assert detail.startswith("y: ") and "3 of 4 configs agree" in detail


def test_a_search_keeps_every_config_that_writes_scratch(sess, clock):
    blocks = Space({"BLOCK": [2, 4, 8, 16, 32, 64]}, num_warps=(4,),
                   num_stages=(2,))
    kernel = ScratchKernel(clock, {})
    tuning_ = miss(sess, kernel, space=blocks, search="evolutionary",
                   budget=6, reference=None,
                   warn_once=lambda what, text: None)
    entry = tuning_.run()
    assert len(entry.candidates) == 6
    assert all(x.ok for x in entry.candidates)
    assert tuning_.result.consensus.scratch == ("partials",)


def test_a_config_that_fails_when_run_again_is_recorded_as_failed(sess,
                                                                   clock):
    configs = [config(4), config(8), config(16), config(32)]
    flaky = configs[1]

    class FlakyKernel(ScratchKernel):
        runs = 0

        def run(self, config_, after_kernel=None):
            if config_ == flaky and after_kernel is not None:
                self.runs += 1
                if self.runs > 1:
                    raise RuntimeError("launch failed the second time")
            super().run(config_, after_kernel)

    kernel = FlakyKernel(clock, {})
    tuning_ = miss(sess, kernel, configs=configs, reference=None,
                   warn_once=lambda what, text: None)
    entry = tuning_.run()
    failures = {x.config: x.failure for x in entry.candidates}
    assert failures == {configs[0]: "NONE", flaky: "RUNTIME_ERROR",
                        configs[2]: "NONE", configs[3]: "NONE"}
    assert tuning_.result.consensus.scratch == ("partials",)


def test_with_outputs_named_the_first_config_stays_the_reference(sess,
                                                                 clock):
    wrong, a, b = config(16), config(32), config(64)
    kernel = FakeKernel(clock, {}, wrong=[wrong])
    tuning_, said = without_reference(sess, kernel, [wrong, a, b],
                                      outputs=["y"])
    entry = tuning_.run()
    assert entry.best == wrong
    assert [what for what, _ in said] == ["reference"]
    assert "its first config that ran (BLOCK=16" in said[0][1]


def space():
    return Space({"BLOCK": [16, 32, 64, 128, 256, 512, 1024, 2048],
                  "SPLIT": [1, 2, 4, 8]}, num_warps=(2, 4), num_stages=(2,))


def space_ms(cfg):
    """A bowl with its bottom at BLOCK=256, SPLIT=2, num_warps=4."""
    block, split = cfg.kwargs["BLOCK"], cfg.kwargs["SPLIT"]
    return (1.0 + abs(block.bit_length() - 9) + abs(split.bit_length() - 2)
            + (cfg.num_warps == 2))


class SpaceKernel(FakeKernel):
    def run(self, config, after_kernel=None):
        self.ms.setdefault(config, space_ms(config))
        super().run(config, after_kernel)


def test_a_search_measures_at_most_its_budget(sess, clock):
    kernel = SpaceKernel(clock, {})
    entry = miss(sess, kernel, space=space(), search="evolutionary",
                 budget=20, seed=3).run()
    assert len(kernel.first_runs) == len(set(kernel.first_runs)) <= 20
    assert entry.provenance.tuner == "evolutionary"
    assert entry.run_time_us == pytest.approx(
        min(space_ms(c) for c in kernel.first_runs) * 1000.0)


def test_a_search_stops_at_its_time_budget_on_the_given_clock(sess, clock):
    # Each candidate: one checked run and three timed ones, 4 launches of
    # 1 ms or more by the fake clock; 30 ms of budget is a handful of them.
    kernel = SpaceKernel(clock, {})
    miss(sess, kernel, space=space(), search="evolutionary", budget=40,
         seed=3, time_budget_s=0.030, clock=clock).run()
    assert 1 <= len(kernel.first_runs) < 10
    unlimited = SpaceKernel(clock, {})
    miss(sess, unlimited, space=space(), search="evolutionary", budget=40,
         seed=3, time_budget_s=100.0, clock=clock).run()
    assert len(unlimited.first_runs) > 20


def test_an_exhaustive_tuning_of_a_space_measures_all_of_it(sess, clock):
    kernel = SpaceKernel(clock, {})
    entry = miss(sess, kernel, space=space(), search="exhaustive").run()
    assert len(kernel.first_runs) == len(space().configs())
    assert entry.best.kwargs == {"BLOCK": 256, "SPLIT": 2}
    assert entry.best.num_warps == 4


def test_the_device_is_taken_for_the_miss_and_released(sess, clock):
    a, b = config(16), config(32)
    kernel = FakeKernel(clock, {a: 1.0, b: 2.0})
    turns = []
    real_turn = sess.device_turn

    def device_turn(key):
        turns.append(key)
        return real_turn(key)
    sess.device_turn = device_turn
    miss(sess, kernel, configs=[a, b]).run()
    assert turns == [KEY]
    assert sess._device_turn is None
    assert set(sess.tuning_notes[KEY]) >= {"tuning_start", "tuning_end"}


def test_candidates_are_compiled_ahead_before_the_device_is_taken(sess,
                                                                  clock):
    """Compile-ahead is CPU work: it runs before the device's turn, so
    another tuner's measurement on that GPU does not wait on it; the
    candidates it is handed are those then measured."""
    a, b, c = config(16), config(32), config(64)
    kernel = FakeKernel(clock, {a: 3.0, b: 1.0, c: 2.0})
    events = []
    real_turn = sess.device_turn

    def device_turn(key):
        events.append("turn")
        return real_turn(key)
    sess.device_turn = device_turn
    tuning_ = miss(sess, kernel, configs=[a, b, c])
    tuning_.compile_ahead = lambda configs: events.append(
        ("compile", list(configs)))
    entry = tuning_.run()
    assert events == [("compile", [a, b, c]), "turn"]
    assert entry.best == b
