"""What a tuned launch moves and computes (autotune/runtime/work.py): the
tensor arguments' bytes and precision, the user's work model, the Work an
entry records and the copy bandwidth it is held against."""
import pytest
import torch

from autotune.errors import WorkModelError
from autotune.measure.fake_backend import FakeBackend
from autotune.records import Config, Work
from autotune.runtime import work as work_module

from test_results_io import make_entries

H100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"


def test_argument_bytes_count_each_tensor_once():
    x = torch.zeros(100, dtype=torch.float32)
    y = torch.zeros(10, dtype=torch.bfloat16)
    named = {"x": x, "y": y, "inplace": x, "n": 100, "alpha": 2.0}
    assert work_module.argument_bytes(named) == 400 + 20
    assert work_module.tensor_precision(named) == "bf16"
    assert work_module.tensor_precision({"x": x}) == "tf32"
    assert work_module.tensor_precision({"n": 3}) == ""


def test_a_model_gets_the_arguments_it_names():
    config = Config({"BLOCK": 32}, num_warps=4)
    named = {"x": torch.zeros(8), "n": 8}

    def flops_only(n, BLOCK):
        return 3 * n + BLOCK
    assert work_module.launch_work(named, config, flops_only) == Work(
        32.0, 56.0, "arguments", "tf32", 0.0)
    assert work_module.launch_work(
        named, config, lambda **kw: {"bytes": 1e3, "flops": 2.0,
                                     "precision": "fp32"}) == Work(
        1e3, 2.0, "model", "fp32", 0.0)


@pytest.mark.parametrize("model,needle", [
    (lambda **_: 1 / 0, "raised ZeroDivisionError"),
    (lambda **_: {"flop": 1}, "'flop'"),
    (lambda **_: float("inf"), "flops=inf"),
    (lambda **_: {"flops": 1, "precision": "int8"}, "precision='int8'"),
])
def test_a_bad_model_is_said(model, needle):
    with pytest.raises(WorkModelError, match=needle):
        work_module.launch_work({"n": 1}, Config({}), model)


def test_copy_bandwidth_is_measured_once_a_device_and_never_on_the_cpu(
        monkeypatch):
    def Backend(name, key):
        return FakeBackend(name=name, device_key=key, device="cuda:0")
    measured = []
    monkeypatch.setattr(work_module, "_COPY_BANDWIDTH", {})
    monkeypatch.setattr(work_module, "_measure_copy",
                        lambda device: measured.append(device) or 2.5e12)
    assert work_module.copy_bandwidth(Backend("interpreter", "cpu")) == 0.0
    gpu = Backend("gpu", H100)
    assert work_module.copy_bandwidth(gpu) == 2.5e12
    assert work_module.copy_bandwidth(gpu) == 2.5e12
    assert measured == ["cuda:0"]



def test_argument_bytes_count_views_of_one_buffer_by_their_size():
    x = torch.zeros(64, dtype=torch.float16)
    # Same start, different size: a different tensor to count.
    named = {"x": x, "head": x[:16], "again": x}
    assert work_module.argument_bytes(named) == 128 + 32
    assert work_module.argument_bytes({"n": 1, "s": "text"}) == 0


def test_the_narrowest_precision_wins_and_integers_have_none():
    named = {"a": torch.zeros(2, dtype=torch.float32),
             "b": torch.zeros(2, dtype=torch.float16),
             "i": torch.zeros(2, dtype=torch.int32)}
    assert work_module.tensor_precision(named) == "fp16"
    assert work_module.tensor_precision(
        {"i": torch.zeros(2, dtype=torch.int64)}) == ""


def test_call_model_passes_meta_parameters_and_launch_options():
    config = Config({"BLOCK": 16}, num_warps=8)
    seen = {}

    def model(n, BLOCK, num_warps):
        seen.update(n=n, BLOCK=BLOCK, num_warps=num_warps)
        return {"flops": n * BLOCK, "bytes": 7}
    assert work_module.call_model(model, {"n": 4, "x": object()},
                                  config) == (64.0, 7.0, None)
    assert seen == {"n": 4, "BLOCK": 16, "num_warps": 8}


def test_call_model_gives_everything_to_a_model_taking_kwargs():
    got = {}
    work_module.call_model(lambda **kw: got.update(kw) or 0,
                           {"n": 2}, Config({"BLOCK": 8}))
    assert got["n"] == 2 and got["BLOCK"] == 8 and "num_stages" in got


@pytest.mark.parametrize("value,needle", [
    ({"bytes": -1}, "bytes=-1"),
    (True, "flops=True"),
    ("12", "flops='12'"),
    ({"flops": float("nan")}, "flops=nan"),
])
def test_call_model_rejects_numbers_that_are_not_counts(value, needle):
    with pytest.raises(WorkModelError, match=needle):
        work_module.call_model(lambda **_: value, {}, Config({}))


def test_without_flops_the_work_has_no_precision():
    named = {"x": torch.zeros(4, dtype=torch.bfloat16)}
    assert work_module.launch_work(named, Config({}), None, 1e12) == Work(
        8.0, 0.0, "arguments", "", 1e12)
    # The model's precision is preferred to the tensors'.
    assert work_module.launch_work(
        named, Config({}), lambda **_: {"flops": 5, "precision": "fp32"}
    ).precision == "fp32"


class _Tuner:
    name = "axpb"

    def __init__(self, work_model):
        self.work_model = work_model
        self.warned = []

    def _warn_once(self, what, message):
        self.warned.append((what, message))


def test_with_work_records_the_models_work():
    entry = make_entries(1)[0]
    named = {"x": torch.zeros(10), "n": 10}
    tuner = _Tuner(lambda n, **_: {"flops": 2.0 * n})
    got = work_module.with_work(entry, named, tuner,
                                FakeBackend(name="interpreter"))
    assert got.work == Work(40.0, 20.0, "arguments", "tf32", 0.0)
    assert got.key == entry.key and tuner.warned == []


def test_with_work_says_a_failing_model_and_records_the_arguments():
    entry = make_entries(1)[0]
    tuner = _Tuner(lambda **_: 1 / 0)
    got = work_module.with_work(entry, {"x": torch.zeros(10)}, tuner,
                                FakeBackend(name="interpreter"))
    assert got.work == Work(40.0, 0.0, "arguments", "", 0.0)
    (what, message), = tuner.warned
    assert what == "work_model"
    assert "axpb: work_model raised ZeroDivisionError" in message
    assert "tensor arguments' bytes instead" in message
