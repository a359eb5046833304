"""triton.autotune's arguments, Config fields and protocol, one behaviour
per test, on small kernels."""
import inspect
import os
import subprocess
import sys
import warnings

import pytest
import torch
import triton
import triton.language as tl

import autotune
from autotune import codec
from autotune.errors import AutotuneWarning
from autotune.runtime import triton_patch
from autotune.records import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@triton.jit
def count_kernel(x, y, counter, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2.0, mask=offs < n)
    tl.atomic_add(counter, 1)


@triton.jit
def copy_kernel(x, y, scratch, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    tl.store(y + offs, v, mask=offs < n)
    if scratch is not None:
        # One partial value per program: how many there are depends on BLOCK.
        tl.store(scratch + tl.program_id(0), tl.sum(v, axis=0))


@triton.jit
def checked_kernel(x, y, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 32, "BLOCK too large")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1.0, mask=offs < n)


TWO = [triton.Config({"BLOCK": 16}, num_warps=1),
       triton.Config({"BLOCK": 32}, num_warps=2)]


@pytest.fixture(autouse=True)
def tensors_on_the_backends_device():
    """The tensors these tests create live where the session's backend
    runs kernels (CUDA tensors under the GPU check): autotune.device(),
    asked of the backends without starting a session here."""
    from autotune.measure import backends
    with torch.device("cuda" if backends.gpu_available() else "cpu"):
        yield


def grid_for(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def test_signature_has_every_triton_autotune_argument():
    ours = inspect.signature(autotune.autotune).parameters
    theirs = inspect.signature(triton.autotune).parameters
    assert list(ours)[:len(theirs)] == list(theirs)
    for name, param in theirs.items():
        if param.default is not inspect.Parameter.empty:
            assert ours[name].default == param.default, name
    config_theirs = inspect.signature(triton.Config).parameters
    config_ours = inspect.signature(Config).parameters
    assert list(config_ours) == list(config_theirs)
    for name, param in config_theirs.items():
        if param.default is not inspect.Parameter.empty:
            assert config_ours[name].default == param.default, name


def test_triton_config_fields_round_trip_through_both_formats(tmp_path):
    original = triton.Config({"BLOCK": 16, "ACC": tl.float16, "MODE": "a b"},
                             num_warps=8, num_stages=4, num_ctas=2,
                             maxnreg=128, ir_override="k.ttgir",
                             pre_hook=print)
    config = Config.from_triton(original)
    assert config.all_kwargs() == original.all_kwargs()
    from tests_support import entry_for
    for path in (tmp_path / "c.textproto", tmp_path / "c.pb"):
        codec.dump_results([entry_for(config)], path)
        (loaded,) = codec.load_results(path)
        assert loaded.best == config
        assert loaded.best.kwargs["ACC"] is tl.float16
        assert loaded.best.all_kwargs() == original.all_kwargs()
    text = (tmp_path / "c.textproto").read_text()
    assert 'params: "ACC=tl.float16 BLOCK=16 MODE=\\"a b\\" maxnreg=128 ' \
        'ir_override=\\"k.ttgir\\"" num_warps: 8 num_stages: 4 num_ctas: 2' \
        in text
    with pytest.raises(TypeError, match="only bool, int, float, str"):
        Config({"BLOCK": object()})


def test_reset_to_zero_and_hooks_have_triton_meaning(session_factory):
    sess = session_factory()
    seen = []
    tuned = autotune.autotune(
        configs=TWO, key=["n"], reset_to_zero=["counter"], outputs=["y"],
        post_hook=lambda kwargs, exception: seen.append(exception))(
            count_kernel)
    x, y = torch.arange(40.0), torch.empty(40)
    counter = torch.tensor([5], dtype=torch.int32)
    with pytest.warns(AutotuneWarning, match="no reference"):
        tuned[grid_for(40)](x, y, counter, 40)
    programs = 40 // tuned.best_config.kwargs["BLOCK"] + \
        (40 % tuned.best_config.kwargs["BLOCK"] > 0)
    # Zeroed before each tuning launch and once more before the real one.
    assert counter.item() == programs
    assert seen and all(e is None for e in seen)
    # A hit launches as Triton does: no reset.
    counter.fill_(5)
    seen.clear()
    tuned[grid_for(40)](x, y, counter, 40)
    assert counter.item() == 5 + programs and not seen
    assert sess.stats.tuned == 1


def test_config_pre_hook_runs_before_every_launch_and_on_hits(
        session_factory, tmp_path):
    dump = tmp_path / "d.textproto"
    session_factory(dump_autotune_results_to=str(dump))
    calls = []

    def hook(nargs):
        calls.append(nargs["BLOCK"])
        nargs["counter"].zero_()
    configs = [triton.Config({"BLOCK": b}, pre_hook=hook) for b in (16, 32)]
    make = lambda: autotune.autotune(configs=configs, key=["n"],  # noqa
                                     outputs=["y"])(
        count_kernel)
    x, y = torch.arange(40.0), torch.empty(40)
    counter = torch.tensor([9], dtype=torch.int32)
    tuned = make()
    tuned[grid_for(40)](x, y, counter, 40)
    assert set(calls) == {16, 32}
    autotune.session().finish()
    session_factory(load_autotune_results_from=[str(dump)],
                    require_complete_autotune_results=True)
    calls.clear()
    counter.fill_(9)
    tuned = make()
    tuned[grid_for(40)](x, y, counter, 40)
    assert calls == [tuned.best_config.kwargs["BLOCK"]]
    assert tuned.best_config is configs[calls[0] // 16 - 1]
    assert counter.item() == triton.cdiv(40, calls[0])


def test_tuned_name_from_the_caller_is_refused_before_benchmarking(
        session_factory):
    sess = session_factory()
    tuned = autotune.autotune(configs=TWO, key=["n"])(count_kernel)
    x, y, c = torch.arange(8.0), torch.empty(8), torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="BLOCK is set by the autotuned"):
        tuned[(1,)](x, y, c, 8, BLOCK=8)
    assert sess.stats.candidate_benchmarks == 0 and not sess.stats.fusions


def test_single_config_launches_without_benchmark_or_cache_entry(
        session_factory):
    sess = session_factory(require_complete_autotune_results=True)
    tuned = autotune.autotune(configs=TWO[:1], key=["n"])(count_kernel)
    x, y, c = torch.arange(20.0), torch.empty(20), torch.zeros(1, dtype=torch.int32)
    tuned[grid_for(20)](x, y, c, 20)
    assert torch.equal(y, x * 2) and tuned.best_config is TWO[0]
    assert sess.stats.candidate_benchmarks == 0 and not sess.stats.fusions


def test_pruned_to_one_config_is_stored_without_benchmarking(
        session_factory, tmp_path):
    dump = tmp_path / "pruned.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tuned = autotune.autotune(
        configs=TWO, key=["n"],
        prune_configs_by={"early_config_prune":
                          lambda configs, nargs, **kw: configs[1:]})(
        count_kernel)
    x, y, c = torch.arange(20.0), torch.empty(20), torch.zeros(1, dtype=torch.int32)
    tuned[grid_for(20)](x, y, c, 20)
    (entry,) = sess.cache.memory.values()
    assert sess.stats.candidate_benchmarks == 0
    assert entry.best == Config.from_triton(TWO[1])
    assert entry.provenance.tuner == "pruned"
    sess.finish()
    (loaded,) = codec.load_results(dump)
    assert loaded.best == entry.best and not loaded.candidates


def test_protocol_attributes_and_warmup(session_factory):
    session_factory()
    tuned = autotune.autotune(configs=TWO, key=["n"])(count_kernel)
    assert tuned.fn is count_kernel and tuned.configs == TWO
    assert tuned.arg_names == ["x", "y", "counter", "n", "BLOCK"]
    assert tuned.keys == ["n"] and tuned.best_config is None
    x, y, c = torch.arange(20.0), torch.empty(20), torch.zeros(1, dtype=torch.int32)
    # Triton's interpreter warms up from 3.6 on (a JITFunction always
    # does): before, Triton's own Autotuner.warmup fails there as well.
    if hasattr(count_kernel, "warmup"):
        assert len(tuned.warmup(x, y, c, 20, grid=(1,))) == 2
        assert len(tuned.run(x, y, c, 20, grid=(1,), warmup=True)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutotuneWarning)
        tuned.run(x, y, c, 20, grid=grid_for(20), warmup=False)
    assert torch.equal(y, x * 2) and tuned.best_config in TWO


def test_static_assert_failure_is_a_compile_error(session_factory):
    sess = session_factory()
    tuned = autotune.autotune(
        configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 16})],
        key=["n"])(checked_kernel)
    x, y = torch.arange(30.0), torch.empty(30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutotuneWarning)
        tuned[grid_for(30)](x, y, 30)
    (entry,) = sess.cache.memory.values()
    kinds = {c.config.kwargs["BLOCK"]: c.failure for c in entry.candidates}
    assert kinds == {64: "COMPILE_ERROR", 16: "NONE"}
    assert torch.equal(y, x + 1)


def test_scratch_that_differs_by_config_keeps_every_config_with_a_note(
        session_factory):
    sess = session_factory()
    x = torch.arange(64.0)
    tuned = autotune.autotune(configs=TWO, key=["n"])(copy_kernel)
    with pytest.warns(AutotuneWarning) as record:
        tuned[grid_for(64)](x, torch.empty(64), torch.zeros(4), 64)
    notes = [str(w.message) for w in record]
    assert any("no reference" in note for note in notes)
    (scratch,) = [n for n in notes if "different values into" in n]
    assert "into scratch and no majority" in scratch
    assert "outputs=[...]" in scratch
    # Both configs ran and were timed, as Triton's autotune keeps them.
    (entry,) = sess.cache.memory.values()
    assert all(c.ok and c.run_time_us > 0 for c in entry.candidates)
    # outputs= names the real output; a None argument is tolerated.
    tuned = autotune.autotune(configs=TWO, key=["n"], outputs=["y", "scratch"],
                              name="copy_outputs")(copy_kernel)
    y = torch.empty(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AutotuneWarning)
        tuned[grid_for(64)](x, y, None, 64)
    entry = [e for e in sess.cache.memory.values()
             if e.key.kernel == "copy_outputs"][0]
    assert all(c.ok for c in entry.candidates) and torch.equal(y, x)


def test_reference_warning_once_per_kernel(session_factory):
    session_factory()
    tuned = autotune.autotune(configs=TWO, key=["n"])(count_kernel)
    c = torch.zeros(1, dtype=torch.int32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (20, 40):
            tuned[grid_for(n)](torch.arange(float(n)), torch.empty(n), c, n)
    assert sum("no reference" in str(w.message) for w in record) == 1


def test_configure_starts_from_autotune_flags(session_factory, tmp_path,
                                              monkeypatch):
    dump = tmp_path / "d.textproto"
    monkeypatch.setenv("AUTOTUNE_FLAGS",
                       f"--dump_autotune_results_to={dump} "
                       "--autotune_miss_policy=nearest")
    sess = session_factory(autotune_miss_policy="seeded")
    assert sess.options.dump_autotune_results_to == str(dump)
    assert sess.options.autotune_miss_policy == "seeded"


def test_install_routes_kernels_decorated_before_and_after(session_factory):
    sess = session_factory()
    before = triton.autotune(configs=TWO, key=["n"])(count_kernel)
    assert not triton_patch.installed()
    autotune.install()
    try:
        after = triton.autotune(configs=TWO, key=["n"])(count_kernel)
        assert isinstance(after, autotune.Autotuner)
        c = torch.zeros(1, dtype=torch.int32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneWarning)
            for kernel, n in ((before, 24), (after, 40)):
                x, y = torch.arange(float(n)), torch.empty(n)
                kernel[grid_for(n)](x, y, c, n)
                assert torch.equal(y, x * 2)
        assert before.best_config in TWO
        assert sess.stats.tuned == 2
    finally:
        autotune.uninstall()
    assert triton.autotune is triton.runtime.autotuner.autotune
    assert not isinstance(triton.autotune(configs=TWO, key=["n"])(
        count_kernel), autotune.Autotuner)


def test_autotune_dropin_flag_installs_at_import():
    code = ("import triton, autotune; "
            "print(triton.autotune is autotune.runtime.autotuner.autotune)")
    env = dict(os.environ, AUTOTUNE_FLAGS="--autotune_dropin",
               PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, timeout=300)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_triton_knobs_print_and_configs_timings_through_the_drop_in(
        session_factory, monkeypatch, capsys):
    session_factory()
    monkeypatch.setattr(triton.knobs.autotuning, "print", True)
    theirs = triton.autotune(configs=TWO, key=["n"])(copy_kernel)
    autotune.install()
    try:
        n = 24
        x, y = torch.arange(float(n)), torch.empty(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AutotuneWarning)
            theirs[grid_for(n)](x, y, None, n)
    finally:
        autotune.uninstall()
    # Triton's attributes after a tuning launch, keyed by Triton's configs.
    assert set(theirs.configs_timings) == set(TWO)
    assert all(len(t) == 1 and t[0] > 0
               for t in theirs.configs_timings.values())
    assert theirs.bench_time is not None and theirs.best_config in TWO
    printed = capsys.readouterr().out
    assert "Triton autotuning for function copy_kernel" in printed
    assert "best config selected" in printed


def test_cuda_graph_with_restore_value_is_refused_in_one_line():
    with pytest.raises(autotune.AutotuneArgumentError,
                       match="use_cuda_graph=True with restore_value") as e:
        autotune.autotune(configs=TWO, key=["n"], restore_value=["y"],
                          use_cuda_graph=True)(count_kernel)
    assert "\n" not in str(e.value)
    # Through the drop-in: Triton's own autotuner with the same arguments.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = triton.autotune(configs=TWO, key=["n"], restore_value=["y"],
                                 use_cuda_graph=True)(count_kernel)
    with pytest.raises(autotune.AutotuneArgumentError,
                       match="use_cuda_graph=True with restore_value"):
        triton_patch.from_triton_autotuner(theirs)
