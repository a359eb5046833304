"""The decorator (autotune/runtime/autotuner.py): its arguments are
checked when a kernel is decorated, and what they return when used."""
import pytest

from autotune.errors import AutotuneError

import tiny_kernels as tk


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

