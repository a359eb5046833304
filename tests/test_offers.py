"""A cached winner is used only while the decoration offers it
(autotune/runtime/offers.py, Session.resolve); every miss has a reason;
entries tuned under another Triton are hits in loose version matching and
stale in strict."""
import os

import pytest

import autotune
from autotune import codec
from autotune.errors import AutotuneCacheMissError
from autotune.records import Config
from autotune.runtime import offers
from autotune.search.space import Space

import triton
import triton.language as tl

import tiny_kernels as tk

pytest_plugins = ["pytester"]

A, B = tk.GOOD  # BLOCK=16 (num_warps=2), BLOCK=32
C = Config({"BLOCK": 64, "BUG": 0}, num_warps=4)


@triton.jit
def _eps_kernel(x, y, n, alpha, BLOCK: tl.constexpr, BUG: tl.constexpr,
                EPS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * alpha + 1.0, mask=m)


def tuned_cache(session_factory, tmp_path, configs, n=40):
    """A dump of one fusion tuned over `configs`; (path, its entry)."""
    dump = tmp_path / "cache.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(configs), n)
    sess.finish()
    [entry] = codec.load_results(str(dump), parse_all=True)
    return dump, entry


def test_a_winner_deleted_from_the_list_is_stale(session_factory, tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    remaining = [c for c in (A, B) if c != entry.best] + [C]
    sess = session_factory(load_autotune_results_from=[str(dump)],
                           require_complete_autotune_results=True)
    with pytest.raises(AutotuneCacheMissError) as info:
        tk.run(tk.make_tuner(remaining), 40)
    text = str(info.value)
    assert "1 fusion(s) stale" in text
    assert f"stale: config no longer offered ({entry.best.short()})" in text
    assert sess.stats.miss_reasons == {"config no longer offered": 1}


def test_a_stale_winner_is_retuned_among_the_configs_offered(
        session_factory, tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    remaining = [c for c in (A, B) if c != entry.best] + [C]
    sess = session_factory(load_autotune_results_from=[str(dump)])
    tuned = tk.make_tuner(remaining)
    tk.run(tuned, 40)
    assert sess.stats.tuned == 1 and sess.stats.hits == 0
    assert tuned.best_config in remaining
    assert "1 missed (1 config no longer offered)" in sess.summary_line()


def test_two_decorations_never_share_a_winner_one_does_not_offer(
        session_factory):
    sess = session_factory()
    wide = Config({"BLOCK": 128, "BUG": 0}, num_warps=4)
    first, second = tk.make_tuner([A, wide]), tk.make_tuner([B, C])
    tk.run(first, 40)
    assert first.best_config in (A, wide)
    tk.run(second, 40)
    assert second.best_config in (B, C)
    assert sess.stats.miss_reasons == {"missing": 1,
                                       "config no longer offered": 1}
    tk.run(first, 40)
    assert first.best_config in (A, wide)


def test_added_configs_keep_the_hit_and_are_counted(session_factory,
                                                    tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    sess = session_factory(load_autotune_results_from=[str(dump)],
                           require_complete_autotune_results=True)
    tk.run(tk.make_tuner([A, B, C]), 40)
    assert sess.stats.hits == 1 and sess.stats.candidate_benchmarks == 0
    assert sess.stats.unmeasured_configs == 1
    assert "1 offered config(s) never measured" in sess.summary_line()


def test_a_config_added_for_two_fusions_is_counted_per_fusion(
        session_factory, tmp_path):
    dump = tmp_path / "cache.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner([A, B]), 40)
    tk.run(tk.make_tuner([A, B]), 80)
    sess.finish()
    sess = session_factory(load_autotune_results_from=[str(dump)])
    tuner = tk.make_tuner([A, B, C])
    tk.run(tuner, 40)
    tk.run(tuner, 80)
    assert (sess.stats.hits, sess.stats.unmeasured_configs,
            sess.stats.unmeasured_fusions) == (2, 2, 2)
    assert "2 offered config(s) never measured, counted per fusion: 2 " \
        "fusion(s) (a config added to a list counts once for each fusion " \
        "it serves)" in sess.summary_line()


def test_an_update_measures_the_added_configs_and_what_the_entry_compares(
        session_factory, tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    before = dump.read_bytes()
    sess = session_factory(autotune_incumbents_from=[str(dump)],
                           dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner([A, B, C]), 40)
    # C, the incumbent, its runner-up and the first offered config (here
    # the whole list: with more configs, the rest keep their stored times).
    assert sess.stats.candidate_benchmarks == 3
    # The report explains it as the selection decided it: with the hit's
    # winner as the incumbent.
    [record] = sess.report()["fusions"]
    assert record["incumbent_config"] == entry.best.short()
    assert (record["incumbent"], record["reason"]) in (
        ("kept", "incumbent_kept"), ("replaced", "incumbent_beaten"))
    sess.finish()
    [after] = codec.load_results(str(dump), parse_all=True)
    assert {c.config for c in after.candidates} == {A, B, C}
    assert dump.read_bytes() != before
    # A second update finds nothing left to measure.
    sess = session_factory(autotune_incumbents_from=[str(dump)],
                           dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner([A, B, C]), 40)
    assert sess.stats.candidate_benchmarks == 0 and sess.stats.hits == 1


def test_configs_with_other_meta_parameters_are_never_launched(
        session_factory, tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    other = [Config({"BLOCK": 16}, num_warps=2)]  # no BUG parameter
    offer = offers.Offer(lambda: other)
    why = offer.why_not(entry.best)
    assert why.startswith("config parameters changed")
    assert "set BLOCK" in why


def test_a_search_space_offers_its_points_only():
    space = Space({"BLOCK": [16, 32]}, constraints=["BLOCK * num_warps <= 64"],
                  num_warps=[2, 4], num_stages=[2])
    offer = offers.Offer(space=space)
    assert offer.why_not(Config({"BLOCK": 16}, num_warps=4, num_stages=2)) \
        is None
    assert offer.why_not(Config({"BLOCK": 32}, num_warps=4, num_stages=2)) \
        .startswith("config no longer offered")  # the constraint
    assert offer.why_not(Config({"BLOCK": 64}, num_warps=2, num_stages=2))
    assert offer.why_not(Config({"BLOCK": 16}, num_warps=2, num_stages=3))
    assert offer.unmeasured(None) == []


def _retag(dump, version):
    """The cache as if tuned under Triton `version`."""
    text = dump.read_text()
    current = autotune.runtime.session.session().versions["triton_version"]
    text = text.replace(f"triton-{current}", f"triton-{version}")
    text = text.replace(f'triton_version: "{current}"',
                        f'triton_version: "{version}"')
    text = "\n".join(line for line in text.splitlines()
                     if not line.startswith("# crc32"))
    dump.write_text(text + "\n")


def test_another_triton_is_a_counted_hit_in_loose_matching(session_factory,
                                                           tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    _retag(dump, "2.1.0")
    sess = session_factory(load_autotune_results_from=[str(dump)],
                           require_complete_autotune_results=True)
    tk.run(tk.make_tuner([A, B]), 40)
    assert sess.stats.hits == 1
    running = sess.versions["triton_version"].rsplit(".", 1)[0]
    assert (f"1 entries tuned with Triton 2.1, running {running}: "
            "regenerate --retune refreshes them") in sess.summary_line()
    [drift] = sess.report()["version_drift"]
    assert drift["tuned_with"] == "2.1" and drift["entries"] == 1


def test_another_triton_is_stale_in_strict_matching(session_factory,
                                                    tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    _retag(dump, "2.1.0")
    session_factory(load_autotune_results_from=[str(dump)],
                    require_complete_autotune_results=True,
                    autotune_version_match="strict")
    with pytest.raises(AutotuneCacheMissError,
                       match=r"stale: tuned with Triton 2\.1, running"):
        tk.run(tk.make_tuner([A, B]), 40)


def test_every_miss_has_a_reason(session_factory, tmp_path):
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    text = dump.read_text()
    other = tmp_path / "other.textproto"
    other.write_text("\n".join(
        line.replace(entry.key.device, "NVIDIA H200/sm_90/sms=132/triton-9")
        .replace(entry.key.fingerprint, "0" * 16)
        if not line.startswith("# crc32") else ""
        for line in text.splitlines()) + "\n")
    sess = session_factory(load_autotune_results_from=[str(other)])
    tk.run(tk.make_tuner([A, B]), 40)   # same fusion on another device
    tk.run(tk.make_tuner([A, B]), 8)    # a shape nobody tuned
    assert sess.stats.miss_reasons == {"other device": 1, "missing": 1}
    fusions = {f["signature"].split(";")[0]: f
               for f in sess.report()["fusions"]}
    assert fusions["n=40"]["miss_reason"] == "other device"
    assert [m["reason"] for m in sess.report()["missing"]] == [
        "other device", "missing"]

    edited = tmp_path / "edited.textproto"
    edited.write_text("\n".join(
        line.replace(entry.key.fingerprint, "0" * 16)
        if not line.startswith("# crc32") else ""
        for line in text.splitlines()) + "\n")
    sess = session_factory(load_autotune_results_from=[str(edited)])
    tk.run(tk.make_tuner([A, B]), 40)
    assert sess.stats.miss_reasons == {"kernel changed": 1}
    assert "1 missed (1 kernel changed)" in sess.summary_line()


def test_the_pytest_ini_key_sets_version_matching(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    pytester.makeini("[pytest]\nautotune_cache = c.textproto\n"
                     "autotune_version_match = exact\n")
    result = pytester.runpytest_subprocess("-p", "pytest_autotune")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*autotune_version_match = 'exact'*expected "
                                 "one of loose, strict*"])


def test_verify_names_a_winner_no_longer_offered_and_configs_never_measured(
        tmp_path, monkeypatch, capsys):
    from autotune.cli import cache_tool
    dump, module = _tree_cache(
        tmp_path, monkeypatch, "kernels_v",
        provenance=autotune.records.Provenance(triton_version="2.1.0"))
    assert cache_tool.main(["verify", str(dump), "--kernel_module",
                            "kernels_v"]) == 0
    out = capsys.readouterr().out
    assert "[n=1] on cpu/test: 1 offered config(s) never measured" in out
    assert "verify: ok (2 offered config(s) never measured" in out
    assert "2 entries tuned with Triton 2.1, running " in out
    status, out = _verify_without_b(dump, module, capsys)
    assert status == 1
    assert "[n=2] on cpu/test: stale: config no longer offered (" in out
    assert "1 stale: regenerate" in out


def test_waiting_for_the_device_is_not_tuning_time(session_factory, tmp_path,
                                                   monkeypatch):
    import signal
    import subprocess
    import sys
    import threading
    from autotune.host import device_lock
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path))
    dump = tmp_path / "c.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    holder = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "workers",
                                      "hold_lock.py"), str(tmp_path),
         device_lock.device_identity(sess.backend)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HELD"
        threading.Timer(2.0, holder.send_signal, (signal.SIGKILL,)).start()
        tk.run(tk.make_tuner(tk.GOOD), 40)
    finally:
        holder.kill()
        holder.wait()
    [fusion] = sess.report()["fusions"]
    assert fusion["device_wait_s"] >= 1.5
    sess.finish()
    [entry] = codec.load_results(str(dump), parse_all=True)
    assert entry.provenance.tuning_seconds < fusion["device_wait_s"] - 1.0
    assert sess.stats.tuning_seconds == pytest.approx(
        entry.provenance.tuning_seconds, abs=1e-3)


def test_a_call_prunes_its_configs_once(session_factory, tmp_path):
    """The lookup holds the cached winner against the pruned list; the
    miss that follows tunes that same list instead of pruning again (a
    perf_model may be costly)."""
    dump, entry = tuned_cache(session_factory, tmp_path, [A, B])
    calls = []

    def prune(configs, nargs, **kwargs):
        calls.append(len(configs))
        return [c for c in configs if c != entry.best]
    session_factory(load_autotune_results_from=[str(dump)])
    tuned = tk.make_tuner([A, B, C], prune_configs_by={
        "early_config_prune": prune})
    tk.run(tuned, 40)
    assert tuned.best_config != entry.best
    assert calls == [3]


def test_an_update_replaces_a_stored_winner_no_longer_offered(
        session_factory, tmp_path):
    """The per-fusion file whose winner the decoration no longer offers is
    refused, the fusion re-tuned, and the new entry takes the file's place:
    the refused winner is never launched, and the next run hits."""
    from autotune import keys as keys_module
    cache_dir = tmp_path / "dir"
    cache_dir.mkdir()
    session_factory(per_fusion_autotune_cache_dir=str(cache_dir))
    first = tk.make_tuner([A, B])
    tk.run(first, 40)
    old = first.best_config
    remaining = [c for c in (A, B) if c != old] + [C]
    sess = session_factory(per_fusion_autotune_cache_dir=str(cache_dir))
    tuned = tk.make_tuner(remaining)
    x, y = tk.run(tuned, 40)
    assert sess.stats.miss_reasons == {"config no longer offered": 1}
    assert tuned.best_config in remaining
    assert tuned.lookup_config(x, y, 40, 2.0) in remaining
    [name] = os.listdir(cache_dir)
    [stored] = codec.load_results(str(cache_dir / name), parse_all=True)
    assert stored.best in remaining and name == keys_module.file_name(
        stored.key)
    sess = session_factory(per_fusion_autotune_cache_dir=str(cache_dir))
    tk.run(tk.make_tuner(remaining), 40)
    assert (sess.stats.hits, sess.stats.tuned) == (1, 0)


def test_a_refused_winner_is_not_adopted_from_another_process(
        session_factory, tmp_path):
    """Storing finds another entry that this call would refuse as well (a
    process that still offers the old winner stored it meanwhile): the
    fresh entry is used, never the refused one."""
    cache_dir = tmp_path / "dir"
    cache_dir.mkdir()
    sess = session_factory(per_fusion_autotune_cache_dir=str(cache_dir))
    tuned = tk.make_tuner([B, C])
    real_store = sess.cache.per_fusion_dir._store

    def store_after_another(entry, path, *args, **kwargs):
        if not os.path.exists(path):
            other = entry.replace(best=A, candidates=(
                autotune.records.Candidate(A, 1.0),))
            codec.dump_results([other], path)
        return real_store(entry, path, *args, **kwargs)
    sess.cache.per_fusion_dir._store = store_after_another
    x, y = tk.run(tuned, 40)
    assert tuned.best_config in (B, C)
    assert tuned.lookup_config(x, y, 40, 2.0) in (B, C)


def _tree_cache(tmp_path, monkeypatch, name, provenance=None, device=None):
    """A cache of two entries of the module `name`'s kernel (winners A and
    B), the module importable; (path, the module)."""
    import importlib
    dump = tmp_path / "c.textproto"
    (tmp_path / f"{name}.py").write_text(
        "import tiny_kernels as tk\nTUNED = tk.make_tuner(tk.GOOD)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    entries = []
    for n, best in enumerate((A, B), 1):
        key = autotune.records.CacheKey(
            device or "cpu/test", "axpb_kernel", module.TUNED.fingerprint,
            f"n={n}")
        entries.append(autotune.records.Entry(
            key, best, 1.0, [autotune.records.Candidate(best, 1.0)],
            provenance or autotune.records.Provenance(
                triton_version=autotune.records.major_minor(
                    __import__("triton").__version__) + ".0")))
    codec.dump_results(entries, str(dump))
    return dump, module


def _verify_without_b(dump, module, capsys):
    """Deletes B from the configs the module's kernel offers, then verifies
    the cache against the module; returns verify's status and output."""
    from autotune.cli import cache_tool
    module.TUNED.configs[:] = [A, C]
    status = cache_tool.main(["verify", str(dump), "--kernel_module",
                              module.__name__])
    return status, capsys.readouterr().out


def test_the_prune_verify_advises_drops_a_winner_no_longer_offered(
        tmp_path, monkeypatch, capsys):
    from autotune.cli import cache_tool
    dump, module = _tree_cache(tmp_path, monkeypatch, "kernels_p")
    status, out = _verify_without_b(dump, module, capsys)
    assert status == 1
    assert "[n=2] on cpu/test: stale: config no longer offered (" in out
    assert "--stale --kernel_module M" in out
    pruned = tmp_path / "pruned.textproto"
    assert cache_tool.main(["prune", str(dump), "-o", str(pruned), "--stale",
                            "--kernel_module", "kernels_p"]) == 0
    out = capsys.readouterr().out
    assert "drop: axpb_kernel [n=2] on cpu/test: stale: config no longer " \
        "offered (" in out
    assert [e.best for e in codec.load_results(str(pruned))] == [A]
    assert cache_tool.main(["verify", str(pruned), "--kernel_module",
                            "kernels_p"]) == 0


def test_verify_counts_a_triton_version_held_only_in_the_device_key(
        tmp_path, monkeypatch, capsys):
    """Older caches name the Triton they were tuned with only in the
    device key; strict matching refuses them by it, and verify says so."""
    from autotune.cli import cache_tool
    dump, _ = _tree_cache(tmp_path, monkeypatch, "kernels_d",
                          provenance=autotune.records.Provenance(),
                          device="cpu/triton-interpreter/triton-2.1.0")
    assert cache_tool.main(["verify", str(dump), "--kernel_module",
                            "kernels_d"]) == 0
    out = capsys.readouterr().out
    assert "2 entries tuned with Triton 2.1, running " in out, out
    assert "strict treats them as stale" in out


def test_an_update_of_a_per_fusion_file_keeps_the_added_measurements(
        session_factory, tmp_path):
    """The hit came from the per-fusion directory and an update measured
    the configs it never had: the updated entry takes the file's place
    (the file's old entry, the one topped up, is not adopted back)."""
    cache_dir = tmp_path / "dir"
    cache_dir.mkdir()
    dump = tmp_path / "cache.textproto"
    session_factory(per_fusion_autotune_cache_dir=str(cache_dir),
                    dump_autotune_results_to=str(dump)).finish()
    sess = session_factory(per_fusion_autotune_cache_dir=str(cache_dir),
                           dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner([A, B]), 40)
    sess.finish()
    sess = session_factory(per_fusion_autotune_cache_dir=str(cache_dir),
                           autotune_incumbents_from=[str(dump)])
    tuned = tk.make_tuner([A, B, C])
    x, y = tk.run(tuned, 40)
    # C, the incumbent and its runner-up (the first offered config, A, is
    # one of them).
    assert sess.stats.candidate_benchmarks == 3
    [name] = os.listdir(cache_dir)
    [stored] = codec.load_results(str(cache_dir / name), parse_all=True)
    assert {c.config for c in stored.candidates} == {A, B, C}
    assert tuned.lookup_config(x, y, 40, 2.0) == stored.best


def test_a_nan_config_value_is_offered_after_a_round_trip(session_factory,
                                                          tmp_path):
    # float("nan") never equals itself; a config holding one is the same
    # config when it comes back from a cache file.
    nan_a = Config({"BLOCK": 16, "BUG": 0, "EPS": float("nan")})
    nan_b = Config({"BLOCK": 32, "BUG": 0, "EPS": float("nan")})
    assert Config.from_params_text(nan_a.params_text) == nan_a
    assert hash(Config.from_params_text(nan_a.params_text)) == hash(nan_a)
    assert nan_a != nan_b and sorted([nan_b, nan_a]) == [nan_a, nan_b]
    assert Config({"EPS": float("nan")}) != Config({"EPS": 1e-5})
    offer = offers.Offer(lambda: [nan_a, nan_b])
    assert offer.why_not(Config.from_params_text(nan_a.params_text)) is None
    space = Space({"EPS": [1e-5, float("nan")]})
    assert space.offers(Config({"EPS": float("nan")}, num_stages=2))
    # Tuned, stored and loaded: a hit, not "no longer offered".
    kernel = autotune.tune(_eps_kernel, [nan_a, nan_b], key=["n"])
    dump = tmp_path / "cache.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(kernel, 40)
    sess.finish()
    sess = session_factory(load_autotune_results_from=[str(dump)],
                           require_complete_autotune_results=True)
    tk.run(autotune.tune(_eps_kernel, [nan_a, nan_b], key=["n"]), 40)
    assert sess.stats.hits == 1 and not sess.stats.miss_reasons


def test_a_top_up_compares_times_of_one_run_and_keeps_the_baseline():
    """The entry after a top-up: every config this run measured carries
    this run's time (the winner and its runner-up among them), the others
    their stored ones; with the first offered config not measured again,
    its stored baseline stays."""
    from autotune.records import Candidate, CacheKey, Entry, Provenance
    from autotune.runtime import session as runtime_session
    D = Config({"BLOCK": 128})
    key = CacheKey("cpu/test", "k", "f" * 16, "n=1")
    old = Entry(key, A, 10.0, [Candidate(A, 10.0), Candidate(B, 12.0),
                                Candidate(D, 30.0)],
                Provenance(timestamp="01:49", default_run_time_us=30.0))
    configs = runtime_session.top_up_configs(old, [C])
    assert configs == [A, C, B]  # the winner, the added, the runner-up
    run = Entry(key, C, 14.0, [Candidate(A, 20.0), Candidate(B, 24.0),
                                Candidate(C, 14.0)],
                Provenance(timestamp="01:52"))
    new = runtime_session.topped_up(old, run)
    times = {c.config: c.run_time_us for c in new.candidates}
    assert times == {A: 20.0, B: 24.0, C: 14.0, D: 30.0}
    assert (new.best, new.run_time_us) == (C, 14.0)
    assert new.provenance.default_run_time_us == 30.0
    assert new.provenance.timestamp == "01:52"
