"""Triton's behaviour where code written against triton.autotune relies on
it: the error pruning raises, wrappers that are not kernels, and
knobs.autotuning.listener."""
import pytest
import triton
from triton.runtime import autotuner as triton_autotuner

import autotune
from autotune.runtime import triton_patch

import tiny_kernels as tk


def test_pruning_to_nothing_raises_tritons_error_naming_the_kernel(
        session_factory):
    session_factory()
    tuned = tk.make_tuner(tk.GOOD, prune_configs_by={
        "early_config_prune": lambda configs, nargs, **kw: []})
    errors = pytest.importorskip("triton.runtime.errors")
    with pytest.raises(errors.AutotunerError,
                       match="axpb_kernel: early_config_prune returned no "
                       "config") as info:
        tk.run(tuned, 40)
    assert isinstance(info.value, autotune.AutotuneError)


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
    assert "not a @triton.jit kernel; left to Triton's own autotuner" in \
        capfd.readouterr().err


def test_a_kernel_under_tritons_autotuner_is_still_ours():
    tuner = triton_autotuner.Autotuner(
        tk.axpb_kernel, ["x", "y", "n", "alpha"], tk.GOOD, ["n"], None, None)
    assert triton_patch.wraps_a_triton_kernel(tuner)
    assert not triton_patch.wraps_a_triton_kernel(
        triton_autotuner.Autotuner(_Launcher(), ["x", "n"], tk.GOOD, ["n"],
                                   None, None))


def test_the_autotuning_listener_hears_every_decision(session_factory,
                                                      tmp_path, monkeypatch):
    knobs = pytest.importorskip("triton.knobs")
    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no autotuning listener")
    heard = []
    monkeypatch.setattr(knobs.autotuning, "listener",
                        lambda **fields: heard.append(fields))
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
