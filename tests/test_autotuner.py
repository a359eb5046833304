"""The decorator's own part of a miss (autotune.runtime.autotuner): what
it hands the miss path (autotune.runtime.tuning) and what it keeps of the
result, checked with the miss path replaced by a recorder. The miss path
itself is tests/test_tuning.py; Triton's meaning of the arguments, end to
end, is tests/test_dropin_api.py."""
import math
import re
import warnings

import pytest
import torch
import triton

from autotune.errors import AutotuneError, AutotuneWarning
from autotune.measure import selection, tuner
from autotune.records import Candidate, Config, Entry
from autotune.runtime import tuning
import autotune

import tiny_kernels
import tiny_kernels as tk


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


# -- end to end: what a decoration refuses, and its searches -------------

def test_lookup_config_reports_hit_config(session_factory):
    sess = session_factory()
    tuned = tk.make_tuner()
    tk.run(tuned, 33)
    x = torch.zeros(33, device=autotune.device())
    config = tuned.lookup_config(x, x, 33, 2.0)
    assert config == next(iter(sess.cache.memory.values())).best


def test_evolutionary_search_over_a_space(session_factory):
    sess = session_factory()
    space = autotune.Space({"BLOCK": [16, 32, 64], "BUG": [0, 1]},
                           num_warps=[2, 4])
    def reference(x, y, n, alpha, **_):
        y.copy_(x * alpha + 1.0)
    # With a reference: the search's first candidate may be a wrong one.
    tuned = autotune.tune(tk.axpb_kernel, None, key=["n"], space=space,
                          search="evolutionary", budget=6, seed=1,
                          reference=reference)
    x, y = tk.run(tuned, 40)
    assert torch.allclose(y, x * 2.0 + 1.0)
    entry = next(iter(sess.cache.memory.values()))
    assert entry.provenance.tuner == "evolutionary"
    assert len(entry.candidates) == 6 == sess.stats.candidate_benchmarks
    assert entry.best.kwargs["BUG"] == 0


def test_keyword_tensors_in_another_order_are_another_fusion(session_factory):
    """The launch memo must not mistake x=float32, y=float16 for
    y=float32, x=float16: the dtypes belong to different arguments."""
    sess = session_factory()
    tuned = tk.make_tuner(configs=tk.GOOD)
    n = 40
    dev = autotune.device()
    x32 = torch.arange(n, dtype=torch.float32, device=dev)
    y16 = torch.empty(n, device=dev).half()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    tuned[grid](x=x32, y=y16, n=n, alpha=2.0)
    assert sess.stats.tuned == 1
    # The same fusion, however the arguments are passed.
    config = tuned.lookup_config(x=x32, y=y16, n=n, alpha=2.0)
    assert tuned.lookup_config(y=y16, x=x32, n=n, alpha=2.0) == config
    assert tuned.lookup_config(x32, y16, n, 2.0) == config
    with pytest.raises(autotune.AutotuneError, match="x:float16,y:float32"):
        tuned.lookup_config(y=x32, x=y16, n=n, alpha=2.0)


@pytest.mark.parametrize("options, message", [
    (dict(configs=None, space=autotune.Space({"BLOCK": [16, 32],
                                              "BUG": [0]}),
          search="genetic"),
     "search='genetic'; expected one of 'exhaustive', 'evolutionary'"),
    (dict(configs=None, space=autotune.Space({"BLOCK": [16, 32],
                                              "BUG": [0]}),
          search="evolutionary", budget=0),
     "budget=0; expected a number > 0"),
    (dict(time_budget_s=-1.0), "time_budget_s=-1.0; expected a number > 0"),
    (dict(configs=None, space=autotune.Space({"BLOCK": [16, 32],
                                              "BUG": [0]}),
          search="evolutionary", budget="10"),
     "budget='10'; expected a number > 0"),
])
def test_arguments_that_could_only_fail_later_fail_at_decoration(
        options, message):
    configs = options.pop("configs", tk.GOOD)
    with pytest.raises(autotune.AutotuneError) as err:
        autotune.tune(tk.axpb_kernel, configs, key=["n"], **options)
    assert message in str(err.value)


def test_config_keys_that_are_not_kernel_arguments_are_allowed():
    """Triton passes such keys on as backend options (waves_per_eu on AMD)
    or leaves them to a pre_hook: they are not an error at decoration."""
    autotune.tune(tk.axpb_kernel, [Config({"BLOCK": 16, "BUG": 0,
                                           "waves_per_eu": 2})], key=["n"])


@pytest.mark.parametrize("params, constraints, message", [
    ({}, (), "nothing to search"),
    ({"A": [1, 2]}, ["A * B <= 64"],
     "constraint 'A * B <= 64' names B, not parameters of the space "
     "(A, num_stages, num_warps)"),
])
def test_space_mistakes_fail_when_the_space_is_built(params, constraints,
                                                     message):
    with pytest.raises(autotune.AutotuneError, match=re.escape(message)):
        autotune.Space(params, constraints=constraints)
    # A space with only launch options to choose is a space.
    assert len(autotune.Space({}, num_warps=[2, 4])) == 2
    assert len(autotune.Space({"A": [1, 2]},
                              constraints=["A <= max(num_warps, 1)"])) == 2
    # Names the expression binds itself are not parameters.
    assert len(autotune.Space({"A": [16, 32], "B": [32, 64]}, constraints=[
        "min(b for b in (A, B)) >= 32", "(t := A * 2) <= 64"])) == 2


def test_search_that_finds_no_working_config_says_why(session_factory):
    """The search path reports the failure kinds and the first detail, as
    the config-list path does: here a misspelt space key."""
    session_factory()
    tuned = autotune.tune(tk.axpb_kernel, None, key=["n"],
                          space=autotune.Space({"BLOCKK": [16, 32],
                                                "BUG": [0]}),
                          search="evolutionary", budget=2)
    with pytest.raises(autotune.AutotuneError) as err:
        tk.run(tuned, 40)
    assert "no config ran correctly (2 tried; failures: RUNTIME_ERROR); " \
        "first: TypeError:" in str(err.value)
    assert "'BLOCK'" in str(err.value)
