"""Triton's behaviour where code written against triton.autotune relies on
it: the error pruning raises, wrappers that are not kernels, and
knobs.autotuning.listener."""
import pytest
import triton
from triton.runtime import autotuner as triton_autotuner

import autotune
from autotune import errors as autotune_errors
from autotune.runtime import triton_patch

import tiny_kernels as tk


def _launch(x, n, BLOCK):
    """What Triton's autotuner finds under the double's .fn."""


class _Launcher:
    """A test double under Triton's autotuner: not a @triton.jit kernel."""

    def __init__(self):
        self.calls = []
        self.fn = _launch
        self.arg_names = ["x", "n"]

    def run(self, *args, **kwargs):
        self.calls.append(kwargs.get("BLOCK"))


def test_a_wrapper_that_is_not_a_kernel_stays_with_tritons_autotuner(
        session_factory, capfd):
    session_factory()
    launcher = _Launcher()
    timings = {16: 2.0, 32: 1.0}
    tuner = triton_autotuner.Autotuner(
        launcher, ["x", "n"],
        [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
        ["n"], None, None,
        do_bench=lambda fn, quantiles: (fn(), [timings[launcher.calls[-1]]]
                                        * 3)[1])
    triton_patch.install()
    try:
        tuner.run(None, 8, grid=(1,))
    finally:
        triton_patch.uninstall()
    # Triton's own run benchmarked both and launched its pick.
    assert launcher.calls[-1] == 32
    assert "_rules_autotune" not in tuner.__dict__
    err = capfd.readouterr().err
    assert "not a @triton.jit kernel; left to Triton's own autotuner" in err
    # The double has no __name__: its class alone, no stray space.
    assert "Triton's autotuner wraps _Launcher, not a @triton.jit" in err


def test_a_kernel_under_tritons_autotuner_is_still_ours():
    tuner = triton_autotuner.Autotuner(
        tk.axpb_kernel, ["x", "y", "n", "alpha"], tk.GOOD, ["n"], None, None)
    assert triton_patch.wraps_a_triton_kernel(tuner)
    assert not triton_patch.wraps_a_triton_kernel(
        triton_autotuner.Autotuner(_Launcher(), ["x", "n"], tk.GOOD, ["n"],
                                   None, None))


@pytest.fixture
def heard(monkeypatch):
    """The fields of every call to Triton's autotuning listener (skips on a
    Triton that has none)."""
    knobs = pytest.importorskip("triton.knobs")
    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no autotuning listener")
    calls = []
    monkeypatch.setattr(knobs.autotuning, "listener",
                        lambda **fields: calls.append(fields))
    return calls


def test_the_autotuning_listener_hears_every_decision(session_factory,
                                                      tmp_path, heard):
    dump = tmp_path / "c.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(tk.GOOD), 40)
    sess.finish()
    session_factory(load_autotune_results_from=[str(dump)])
    tuned = tk.make_tuner(tk.GOOD)
    tk.run(tuned, 40)
    tk.run(tuned, 40)  # the autotuner's own memo: no new decision
    assert [h["cache_hit"] for h in heard] == [False, True]
    miss, hit = heard
    assert set(miss) == {"fn", "key", "best_config", "configs_timings",
                         "duration", "cache_hit"}
    assert miss["key"] == (40, "torch.float32", "torch.float32")
    assert len(miss["configs_timings"]) == 2 and miss["duration"] > 0
    assert hit["duration"] is None and hit["configs_timings"] == {}
    assert hit["best_config"] is tuned.best_config
    assert miss["fn"] is tk.axpb_kernel


def test_pruning_to_nothing_keeps_tritons_sentence_and_notes_the_kernel(
        session_factory):
    session_factory()
    errors = pytest.importorskip("triton.runtime.errors")
    tuned = tk.make_tuner(tk.GOOD, prune_configs_by={
        "early_config_prune": lambda configs, nargs, **kw: []})
    with pytest.raises(autotune.AutotuneError) as info:
        tk.run(tuned, 40)
    assert any("axpb_kernel" in note
               for note in getattr(info.value, "__notes__", []))
    if not hasattr(errors, "AutotunerError"):
        # Triton before 3.6 has no such type and says nothing of its own:
        # this project's error, in the words 3.7 later chose.
        assert str(info.value) == autotune_errors.NO_CONFIG_AFTER_PRUNING
        return
    assert isinstance(info.value, errors.AutotunerError)
    # Triton's own words, as its autotuner raises them.
    tritons = triton_autotuner.Autotuner(
        tk.axpb_kernel, ["x", "y", "n", "alpha"], tk.GOOD, ["n"], None, None,
        prune_configs_by={
            "early_config_prune": lambda configs, nargs, **kw: []})
    tritons.nargs = {}
    with pytest.raises(errors.AutotunerError) as theirs:
        tritons.prune_configs({})
    assert str(info.value) == str(theirs.value)
    assert "No valid autotuner configs after pruning." in str(info.value)


def test_pruned_to_one_config_calls_no_listener_and_prints_nothing(
        session_factory, heard, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    session_factory()
    one = {"early_config_prune": lambda configs, nargs, **kw: configs[:1]}
    # Through this project's decorator and through the drop-in routing a
    # kernel that Triton's own autotune decorated.
    tk.run(tk.make_tuner(tk.GOOD, prune_configs_by=one), 40)
    tritons = triton_autotuner.Autotuner(
        tk.axpb_kernel, ["x", "y", "n", "alpha"], tk.GOOD, ["n"], None, None,
        prune_configs_by=one)
    triton_patch.install()
    try:
        tk.run(tritons, 48)
    finally:
        triton_patch.uninstall()
    # Triton benchmarks nothing for a list pruned to one: no listener
    # call, no "finished after" line.
    assert heard == []
    assert "finished after" not in capsys.readouterr().out
    assert tritons.best_config is tk.GOOD[0]
