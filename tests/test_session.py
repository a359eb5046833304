"""The autotuning session (autotune/runtime/session.py): options checked
at start, loading, and what it writes at exit (the dump, merged into an
existing file by autotune/cache/update.py, and the report)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from autotune import codec
from autotune.errors import AutotuneError, CacheFileError
import autotune

from tests_support import (ROOT, environment, is_char_device, limited_memory,
                           malformed_cache, mknod_copy, no_space)
import tiny_kernels as tk


# -- start: options and loading -------------------------------------------

def test_malformed_best_config_is_an_error_at_load(tmp_path,
                                                   session_factory):
    bad = malformed_cache(tmp_path)
    with pytest.raises(AutotuneError, match="BLOCK=32 BUG"):
        session_factory(load_autotune_results_from=[str(bad)])


def test_bad_shard_count(session_factory, monkeypatch):
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "abc")
    with pytest.raises(AutotuneError, match="TEST_TOTAL_SHARDS"):
        session_factory()


def test_output_paths_are_checked_at_start(session_factory, tmp_path):
    with pytest.raises(AutotuneError, match="is a directory"):
        session_factory(dump_autotune_results_to=str(tmp_path))
    with pytest.raises(AutotuneError, match="does not exist"):
        session_factory(autotune_report_to=str(tmp_path / "no" / "r.json"))


# -- exit: the dump and the report ----------------------------------------

def test_dump_failure_at_finish_names_the_path(session_factory, tmp_path,
                                               monkeypatch):
    dump = tmp_path / "dump.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(), 40)
    no_space(monkeypatch)
    with pytest.raises(CacheFileError, match=f"{dump}: cannot write: No "
                       "space left"):
        sess.finish()


def test_failed_dump_at_exit_runs_every_other_exit_handler(tmp_path):
    dump_dir = tmp_path / "out"
    dump_dir.mkdir()
    script = textwrap.dedent(f"""
        import atexit, os, shutil, sys
        sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {ROOT + '/tests'!r})
        atexit.register(print, "handler registered before")
        import autotune, tiny_kernels as tk
        autotune.configure(
            dump_autotune_results_to={str(dump_dir / 'c.textproto')!r})
        atexit.register(print, "handler registered after")
        tk.run(tk.make_tuner(), 40)
        shutil.rmtree({str(dump_dir)!r})  # the dump will fail
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert run.returncode == 1, run.stderr
    assert "autotune: error at exit: " in run.stderr
    assert run.stdout.count("handler registered before") == 1, run.stdout
    assert run.stdout.count("handler registered after") == 1, run.stdout


def test_report_and_dump_to_null_devices(tmp_path, session_factory):
    null = mknod_copy(tmp_path, "null", 1, 3)
    sess = session_factory(autotune_report_to=str(null),
                           dump_autotune_results_to=str(null))
    tk.run(tk.make_tuner(), 40)
    sess.finish()
    assert is_char_device(null)


def test_dump_to_an_endless_device_does_not_read_it(tmp_path):
    full = mknod_copy(tmp_path, "full", 1, 7)
    script = "import autotune, tiny_kernels as tk\n" + limited_memory() + \
        textwrap.dedent(f"""
        autotune.configure(dump_autotune_results_to={str(full)!r})
        tk.run(tk.make_tuner(), 40)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=environment(), timeout=120)
    assert run.returncode == 1, run.stderr
    assert f"autotune: error at exit: {full}: cannot write: No space " \
        "left on device" in run.stderr
    assert is_char_device(full)


def test_summary_line_once_when_a_forked_child_exits(tmp_path):
    dump = tmp_path / "dump.textproto"
    report = tmp_path / "report.json"
    script = textwrap.dedent(f"""
        import os, sys
        import autotune, tiny_kernels as tk
        autotune.configure(dump_autotune_results_to={str(dump)!r},
                           autotune_report_to={str(report)!r})
        tk.run(tk.make_tuner(), 40)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a child that dies runs the exit handlers too
        os.waitpid(pid, 0)
        if os.path.exists({str(report)!r}):  # written by the child
            os.unlink({str(report)!r})
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=environment(), timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("autotune: 1 fusions on ") == 1, run.stderr
    assert run.stderr.count("autotune: dumped ") == 1, run.stderr
    assert report.exists()  # written by the parent, after the child exited


def test_dump_keeps_an_unchanged_winner_as_the_file_has_it(session_factory,
                                                           tmp_path):
    loaded = tmp_path / "loaded.textproto"
    sess = session_factory(dump_autotune_results_to=str(loaded))
    tk.run(tk.make_tuner(), 40)
    sess.finish()
    (entry,) = codec.load_results(loaded)
    # The dump's file holds the same winner, measured another time.
    dump = tmp_path / "dump.textproto"
    codec.dump_results([entry.replace(
        run_time_us=entry.run_time_us * 2,
        provenance=entry.provenance._replace(
            timestamp="2020-01-01T00:00:00Z"))], dump)
    before = dump.read_bytes()
    sess = session_factory(load_autotune_results_from=[str(loaded)],
                           dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(), 40)
    assert sess.stats.hits == 1
    sess.finish()
    assert dump.read_bytes() == before


# -- end to end: misses, hits and what a session refuses ------------------

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
    assert 'gpu_types = gpu_type(device = "H200")' in message
    assert "may only run on a H200, and this run is on cpu/" in message
    assert "regenerate" not in message


def test_expected_gpu_mismatch_under_bazel_names_the_gpu_types_entry(
        session_factory, monkeypatch):
    """Under `bazel test` the line speaks of what the BUILD file says (the
    gpu_types entry and its device), not of the flag the macro passes."""
    monkeypatch.setenv("TEST_TARGET", "//fleet:kernels_test_h100")
    monkeypatch.setenv("AUTOTUNE_GPU_TYPES_ENTRY", "h100")
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(autotune_expected_gpu="H100")
    message = str(err.value)
    assert message.startswith('autotune: //fleet:kernels_test_h100 is for '
                              'gpu_types entry "h100" (device "H100"): this '
                              'test may only run on a H100, and this run is '
                              'on cpu/'), message
    assert "--test_tag_filters=gpu-h100" in message
    assert "expected_gpu" not in message and "\n" not in message


WRONG_GPU_TEST = textwrap.dedent("""\
    import unittest
    import autotune

    class T(unittest.TestCase):
        def test_kernel(self):
            autotune.session()

    unittest.main()
    """)


def test_a_bazel_target_on_the_wrong_gpu_fails_with_one_line(tmp_path):
    """The whole target fails, exit status 1, with the one line and no
    traceback (unittest would print one for a SystemExit)."""
    script = tmp_path / "kernels_test.py"
    script.write_text(WRONG_GPU_TEST)
    env = dict(os.environ, PYTHONPATH=ROOT, TEST_TARGET="//fleet:t_h100",
               AUTOTUNE_FLAGS="--autotune_expected_gpu=H100 "
               "--autotune_backend=interpreter")
    env.pop("AUTOTUNE_GPU_TYPES_ENTRY", None)
    run = subprocess.run([sys.executable, str(script)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith('autotune: //fleet:t_h100 is for gpu_types '
                               '= gpu_type(device = "H100"): this test may '
                               'only run on a H100'), lines
    assert "--test_tag_filters=gpu-h100 on a H100" in lines[0], lines


def test_unknown_option(session_factory):
    with pytest.raises(autotune.AutotuneError, match="unknown option"):
        session_factory(no_such_flag=1)


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
    # What the seeds spared is counted: the unseeded tuning measured every
    # config, this one fewer.
    saved = len(dump[0].candidates) - len(entry.candidates)
    assert saved > 0 and seeded.stats.seed_saved_benchmarks == saved
    [record] = [f for f in seeded.report()["fusions"]
                if f["signature"] == entry.key.signature]
    assert record["seeds"]["benchmarks_saved"] == saved
    assert record["seeds"]["configs"] >= 1
    assert f"1 seeded from the nearest entries, {saved} benchmarks " \
        "saved" in seeded.summary_line()
