import json
import re
import warnings
import types

import pytest
import torch
import triton
import triton.language as tl

import autotune
from autotune import codec
from autotune.records import Config

import tiny_kernels as tk


def test_miss_tunes_then_hit_does_no_benchmarking(session_factory, tmp_path):
    dump = tmp_path / "dump.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tuned = tk.make_tuner()
    x, y = tk.run(tuned, 40)
    assert torch.allclose(y, x * 2.0 + 1.0)
    assert sess.stats.tuned == 1
    assert sess.stats.candidate_benchmarks == 4
    entry = sess.cache.memory[next(iter(sess.cache.memory))]
    failures = {c.config: c.failure for c in entry.candidates}
    assert failures[tk.WRONG] == "WRONG_RESULT"
    assert failures[tk.CRASH] == "COMPILE_ERROR"  # arange of 24
    assert entry.best in tk.GOOD
    sess.finish()

    sess2 = session_factory(load_autotune_results_from=[str(dump)])
    x, y = tk.run(tk.make_tuner(), 40)
    assert torch.allclose(y, x * 2.0 + 1.0)
    assert sess2.stats.candidate_benchmarks == 0
    assert sess2.stats.hits == 1 and sess2.stats.tuned == 0
    assert sess2.stats.saved_seconds > 0


def test_outputs_are_restored_between_candidates(session_factory):
    session_factory()

    @autotune.autotune(configs=tk.GOOD, key=["n"])
    @triton.jit
    def accumulate(x, y, n, alpha, BLOCK: tl.constexpr,
                   BUG: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(y + offs, mask=m) + 1.0, mask=m)

    dev = autotune.device()
    y = torch.zeros(32, device=dev)
    accumulate[lambda meta: (triton.cdiv(32, meta["BLOCK"]),)](
        torch.zeros(32, device=dev), y, 32, 1.0)
    # Each candidate ran several times, but the real launch saw zeros.
    assert torch.equal(y, torch.ones(32, device=dev))


def test_reference_function_rejects_a_wrong_first_candidate(session_factory):
    sess = session_factory()

    def reference(x, y, n, alpha, **_):
        y.copy_(x * alpha + 1.0)
    tuned = tk.make_tuner([tk.WRONG] + tk.GOOD, reference=reference)
    x, y = tk.run(tuned, 20)
    assert torch.allclose(y, x * 2.0 + 1.0)
    entry = next(iter(sess.cache.memory.values()))
    assert entry.best != tk.WRONG


def test_require_complete_lists_every_miss(session_factory):
    session_factory(require_complete_autotune_results=True)
    tuned = tk.make_tuner()
    with pytest.raises(autotune.AutotuneCacheMissError) as first:
        tk.run(tuned, 10)
    with pytest.raises(autotune.AutotuneCacheMissError) as second:
        tk.run(tuned, 70)
    assert "1 fusion(s)" in str(first.value)
    text = str(second.value)
    assert "2 fusion(s)" in text and "n=10" in text and "n=70" in text
    assert "axpb_kernel" in text


def test_cache_of_another_device_is_reported_not_used(session_factory,
                                                      tmp_path, capsys):
    sess = session_factory()
    tk.run(tk.make_tuner(), 12)
    entry = next(iter(sess.cache.memory.values()))
    foreign = entry.replace(key=entry.key._replace(
        device="NVIDIA H100/sm_90/sms=132/triton-3.9.0"))
    path = tmp_path / "h100.textproto"
    codec.dump_results([foreign], path)
    capsys.readouterr()
    sess2 = session_factory(load_autotune_results_from=[str(path)])
    err = capsys.readouterr().err
    assert "1 entries (NVIDIA H100" in err
    assert "usable on cpu/triton-interpreter" in err and ": 0" in err
    assert "none for this device" in err
    tk.run(tk.make_tuner(), 12)
    assert sess2.stats.tuned == 1 and sess2.stats.hits == 0
    assert sess2.report()["loaded"][0]["usable"] == 0


def test_conflicting_files_name_both_sources(session_factory, tmp_path):
    sess = session_factory()
    tk.run(tk.make_tuner(), 12)
    entry = next(iter(sess.cache.memory.values()))
    other = entry.replace(best=tk.GOOD[0] if entry.best != tk.GOOD[0]
                          else tk.GOOD[1])
    a, b = tmp_path / "a.textproto", tmp_path / "b.pb"
    codec.dump_results([entry], a)
    codec.dump_results([other], b)
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(load_autotune_results_from=[str(a), str(b)])
    assert str(a) in str(err.value) and str(b) in str(err.value)


def test_report_json_in_undeclared_outputs(session_factory, tmp_path,
                                           monkeypatch):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    sess = session_factory()
    tk.run(tk.make_tuner(), 12)
    sess.finish()
    report = json.loads((tmp_path / "autotune_report.json").read_text())
    assert report["tuned"] == 1 and report["candidate_benchmarks"] == 4
    assert report["fusions"][0]["status"] == "tuned"
    assert report["tuning_seconds"] > 0


def test_dump_path_in_missing_directory(session_factory, tmp_path):
    with pytest.raises(autotune.AutotuneError, match="does not exist"):
        session_factory(dump_autotune_results_to=str(tmp_path / "x" / "c.pb"))


def test_dump_refuses_to_run_sharded(session_factory, monkeypatch):
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "4")
    monkeypatch.setenv("TEST_SHARD_INDEX", "1")
    monkeypatch.setenv("TEST_TARGET", "//examples:suite_autotune_dump")
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(autotune_fail_if_sharded=True)
    assert "shard 2 of 4" in str(err.value)
    assert "--test_sharding_strategy=disabled" in str(err.value)


def test_expected_gpu_mismatch(session_factory):
    """Names the attribute that set the flag and what fixes it; a
    regenerate cannot (the dump target runs anywhere)."""
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(autotune_expected_gpu="H200")
    message = str(err.value)
    assert 'gpu_type = "H200"' in message
    assert "may only run on a H200, and this run is on cpu/" in message
    assert "regenerate" not in message


def test_unknown_option(session_factory):
    with pytest.raises(autotune.AutotuneError, match="unknown option"):
        session_factory(no_such_flag=1)


def test_lookup_config_reports_hit_config(session_factory):
    sess = session_factory()
    tuned = tk.make_tuner()
    tk.run(tuned, 33)
    x = torch.zeros(33, device=autotune.device())
    config = tuned.lookup_config(x, x, 33, 2.0)
    assert config == next(iter(sess.cache.memory.values())).best


def test_miss_policy_nearest_reuses_the_nearest_shape(session_factory):
    sess = session_factory()
    tuned = tk.make_tuner()
    tk.run(tuned, 64)
    tuned_entry = next(iter(sess.cache.memory.values()))
    sess.finish()
    dump = list(sess.cache.memory.values())
    nearest = session_factory(autotune_miss_policy="nearest")
    nearest.cache.loaded.update({e.key: e for e in dump})
    nearest.cache.sources.update({e.key: "test" for e in dump})
    x, y = tk.run(tk.make_tuner(), 100)
    assert torch.allclose(y, x * 2.0 + 1.0)
    assert nearest.stats.nearest == 1 and nearest.stats.candidate_benchmarks == 0
    report = nearest.report()
    status = [f for f in report["fusions"] if "n=100" in f["signature"]][0]
    assert status["status"] == "nearest" and "n=64" in status["source"]
    new_entry = [e for e in nearest.cache.memory.values()
                 if "n=100" in e.key.signature][0]
    assert new_entry.best == tuned_entry.best
    assert new_entry.provenance.tuner == "nearest"


def test_miss_policy_seeded_measures_neighbour_configs_first(session_factory):
    sess = session_factory()
    tk.run(tk.make_tuner(), 64)
    dump = list(sess.cache.memory.values())
    seeded = session_factory(autotune_miss_policy="seeded")
    seeded.cache.loaded.update({e.key: e for e in dump})
    seeded.cache.sources.update({e.key: "test" for e in dump})
    tk.run(tk.make_tuner(), 100)
    entry = [e for e in seeded.cache.memory.values()
             if "n=100" in e.key.signature][0]
    assert seeded.stats.tuned == 1
    assert entry.best in tk.GOOD
    assert entry.provenance.tuner == "seeded"
    # The neighbour's winner was measured first, and the search was short.
    assert entry.candidates and len(entry.candidates) < 4
    assert seeded.stats.candidate_benchmarks == len(entry.candidates)


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


def test_failures_are_classified():
    from autotune.measure.backends import classify_failure
    from triton.runtime.errors import InterpreterError

    def wrapped(cause):
        try:
            try:
                raise cause
            except Exception as inner:
                raise InterpreterError(repr(inner)) from inner
        except InterpreterError as e:
            return e

    # Raised by the interpreter while the kernel's own code runs.
    assert classify_failure(wrapped(IndexError("bad offset"))) == \
        "RUNTIME_ERROR"
    assert classify_failure(RuntimeError("CUDA error: out of memory")) == \
        "OUT_OF_RESOURCES"
    # Triton's own class (a look-alike of the same name is not one).
    from triton.runtime.errors import OutOfResources
    assert classify_failure(OutOfResources(1 << 20, 232448,
                                           "shared memory")) == \
        "OUT_OF_RESOURCES"


def test_slow_first_run_is_a_timeout_and_never_wins(monkeypatch):
    from autotune.measure import backends
    from autotune.measure import tuner
    x = torch.arange(8.0)
    y = torch.zeros(8)
    # The tuner's clock advances only by what each launch says it took.
    clock = [0.0]
    monkeypatch.setattr(tuner, "time", types.SimpleNamespace(
        perf_counter=lambda: clock[0]))

    def launch(config):
        clock[0] += config.kwargs["SLEEP"]
        y.copy_(x * 2)

    slow, fast = Config({"SLEEP": 0.3}), Config({"SLEEP": 0.0})
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(repetitions=1), launch, {"y": y},
        reference=lambda y: y.copy_(x * 2), timeout_s=0.1)
    result = tuner.run_candidates(evaluator, [slow, fast])
    kinds = {c.config: c.failure for c in result.candidates}
    assert kinds == {slow: "TIMEOUT", fast: "NONE"}
    assert result.best.config == fast
    assert "limit 0.1 s" in result.candidates[0].failure_detail


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


def test_reference_that_returns_its_result_is_told_what_to_do(
        session_factory):
    session_factory()
    tuned = tk.make_tuner(tk.GOOD, reference=lambda x, alpha, **_: x * alpha
                          + 1.0)
    # y starts as zeros, not as tk.run's empty_like: reused memory could
    # already hold the right values, and then nothing would differ.
    x = torch.arange(40, dtype=torch.float32, device=autotune.device())
    y = torch.zeros_like(x)
    with pytest.warns(autotune.AutotuneWarning,
                      match="reference= returned a Tensor, which is ignored"):
        with pytest.raises(autotune.AutotuneError):
            tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](
                x, y, 40, 2.0)
    # Returning the output it wrote (y.copy_() returns y) is fine.
    tuned = tk.make_tuner(tk.GOOD, name="writes_and_returns",
                          reference=lambda x, y, alpha, **_:
                          y.copy_(x * alpha + 1.0))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*returned a Tensor.*")
        x, y = tk.run(tuned, 40)
    assert torch.allclose(y, x * 2.0 + 1.0)


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
