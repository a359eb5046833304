"""The decorator's own part of a miss (autotune.runtime.autotuner): what
it hands the miss path (autotune.runtime.tuning) and what it keeps of the
result, checked with the miss path replaced by a recorder. The miss path
itself is tests/test_tuning.py; Triton's meaning of the arguments, end to
end, is tests/test_dropin_api.py."""
import math
import warnings

import pytest
import torch
import triton

import autotune
import tiny_kernels
import tiny_kernels as tk
from autotune.errors import AutotuneError, AutotuneWarning
from autotune.measure import selection, tuner
from autotune.records import Candidate, Config, Entry
from autotune.runtime import tuning


class RecordedMiss:
    """Stands for tuning.Tuning: remembers what it was given and answers
    with `winner`, the other configs failed."""
    made = []

    def __init__(self, session, key, launch, options):
        self.session, self.key = session, key
        self.launch, self.options = launch, options
        self.result = None
        self.nargs_while_tuning = None
        RecordedMiss.made.append(self)

    def run(self, seeds=()):
        kernel = self.launch.kernel
        self.nargs_while_tuning = kernel.nargs
        winner = self.options.configs[0]
        candidates = [Candidate(winner, 2000.0)] + [
            Candidate(c, 0.0, "RUNTIME_ERROR", "boom")
            for c in self.options.configs[1:]]
        self.result = selection.TuneResult(candidates, candidates[0], 0.0, 1.5,
                                       "exhaustive")
        return Entry(self.key, winner, 2000.0, candidates,
                     tuner.provenance_for(self.session.backend, self.result))


@pytest.fixture
def recorded(monkeypatch, session_factory):
    session_factory()
    RecordedMiss.made = []
    monkeypatch.setattr(tuning, "Tuning", RecordedMiss)
    return RecordedMiss.made


THREE = [triton.Config({"BLOCK": 16, "BUG": 0}, num_warps=2),
         triton.Config({"BLOCK": 32, "BUG": 0}, num_warps=4),
         triton.Config({"BLOCK": 64, "BUG": 0}, num_warps=4)]


def reference(x, y, n, alpha):
    y.copy_(x * alpha + 1.0)


def test_a_miss_gets_the_pruned_configs_and_the_decorators_options(recorded):
    tuned = autotune.autotune(
        configs=THREE, key=["n"], reference=reference, outputs=["y"],
        rtol=0.1, atol=0.2, timeout_s=7.0,
        prune_configs_by={"early_config_prune":
                          lambda configs, nargs, **kw: configs[1:]},
    )(tiny_kernels.axpb_kernel)
    x, y = tiny_kernels.run(tuned, 20)
    (miss,) = recorded
    options = miss.options
    assert options.configs == [Config.from_triton(c) for c in THREE[1:]]
    assert (options.name, options.reference, options.outputs) == (
        "axpb_kernel", reference, ["y"])
    assert (options.rtol, options.atol, options.timeout_s) == (0.1, 0.2, 7.0)
    assert options.space is None and options.search == "exhaustive"
    assert miss.key.kernel == "axpb_kernel" and "n=20" in miss.key.signature
    assert miss.launch.kernel is tuned
    assert miss.launch.named["x"] is x and miss.launch.named["n"] == 20
    # Triton's nargs: the call's arguments while tuning, None after.
    assert miss.nargs_while_tuning["n"] == 20 and tuned.nargs is None
    # The winner launched for real: y = 2x + 1.
    assert torch.allclose(y, x * 2.0 + 1.0)


def test_a_search_gets_the_space_and_its_budgets(recorded):
    space = autotune.Space({"BLOCK": [16, 32], "BUG": [0]},
                           num_warps=(2, 4))
    tuned = autotune.tune(tiny_kernels.axpb_kernel, None, key=["n"],
                          space=space, search="evolutionary", budget=3,
                          seed=5, time_budget_s=9.0)
    miss = tuned._miss(autotune.runtime.session.session(), None,
                       {"n": 20}, None, (), {})
    options = miss.options
    assert options.configs is None and options.space is space
    assert (options.search, options.budget, options.seed,
            options.time_budget_s) == ("evolutionary", 3, 5, 9.0)


def test_after_a_miss_the_object_holds_what_tritons_autotuner_holds(recorded):
    resets = []

    def pre_hook(nargs, reset_only=False):
        resets.append((nargs["BLOCK"], reset_only))
    tuned = autotune.autotune(configs=THREE, key=["n"],
                              pre_hook=pre_hook)(tiny_kernels.axpb_kernel)
    tiny_kernels.run(tuned, 20)
    # Keyed by the configs the user gave, in milliseconds; inf: failed.
    assert tuned.configs_timings == {THREE[0]: [2.0], THREE[1]: [math.inf],
                                     THREE[2]: [math.inf]}
    assert tuned.bench_time == 1.5
    assert tuned.best_config is THREE[0]
    # Triton resets once more, for the winner, before the real launch;
    # then the real launch calls no hook of the autotuner's.
    assert resets == [(16, True)]


def test_configs_pruned_to_one_go_to_the_miss_path_as_one(recorded):
    tuned = autotune.autotune(
        configs=THREE, key=["n"],
        prune_configs_by={"early_config_prune":
                          lambda configs, nargs, **kw: configs[:1]},
    )(tiny_kernels.axpb_kernel)
    tiny_kernels.run(tuned, 20)
    # Handed over (the miss path records the one config without a launch).
    (miss,) = recorded
    assert miss.options.configs == [Config.from_triton(THREE[0])]


def test_a_miss_outside_a_launch_is_refused_in_one_line(recorded):
    tuned = autotune.autotune(configs=THREE, key=["n"])(
        tiny_kernels.axpb_kernel)
    x = torch.arange(20.0)
    with pytest.raises(AutotuneError, match="in lookup_config\\(\\); call "
                       "the kernel to tune it"):
        tuned.lookup_config(x, x, 20, 2.0)
    assert recorded == []


def test_warnings_of_the_miss_path_come_once_per_kernel_at_the_caller(
        recorded):
    tuned = autotune.autotune(configs=THREE, key=["n"])(
        tiny_kernels.axpb_kernel)
    tiny_kernels.run(tuned, 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            recorded[0].options.warn_once("reference", "first of its kind")
    assert [str(w.message) for w in caught] == ["first of its kind"]
    assert caught[0].category is AutotuneWarning
    assert caught[0].filename == __file__


# -- the decorator's arguments, checked when a kernel is decorated and
# when used (autotune/runtime/autotuner.py) --------------------------------

def test_perf_model_returning_none_names_kernel_and_argument(
        session_factory):
    session_factory()
    tuned = tk.make_tuner(prune_configs_by={
        "perf_model": lambda **_: None, "top_k": 1})
    with pytest.raises(AutotuneError, match="axpb_kernel: prune_configs_by "
                       "perf_model returned None for BLOCK=16"):
        tk.run(tuned, 40)


@pytest.mark.parametrize("options, message", [
    (dict(prune_configs_by={"perf_model": lambda **_: 1.0, "top_k": 0}),
     "prune_configs_by top_k=0; expected a fraction"),
    (dict(prune_configs_by={"perf_model": lambda **_: 1.0, "top_k": 0.0}),
     "prune_configs_by top_k=0.0"),
    (dict(prune_configs_by={"perf_model": "fast", "top_k": 1}),
     "prune_configs_by perf_model must be callable, got str"),
    (dict(reference=42), "reference= must be callable"),
    (dict(reference=lambda x, y: None), "reference= is called with the "
     "kernel's arguments by name (x, y, n, alpha), but takes no n, alpha"),
    (dict(reference=lambda x, y, n, alpha, expected: None),
     "but requires expected"),
])
def test_bad_decorator_arguments_fail_at_decoration(options, message):
    with pytest.raises(AutotuneError) as info:
        tk.make_tuner(**options)
    assert str(info.value).startswith("axpb_kernel: ")
    assert message in str(info.value)


@pytest.mark.parametrize("reference", [
    lambda x, y, n, alpha: None, lambda **_: None,
    lambda x, y, alpha, **_: None, lambda x, *, y, n, alpha, BLOCK=1: None])
def test_fitting_references_are_accepted(reference):
    tk.make_tuner(reference=reference)

