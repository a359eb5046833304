"""The autotuning session (autotune/runtime/session.py): options checked
at start, loading, and what it writes at exit (the dump, merged into an
existing file by autotune/cache/update.py, and the report)."""
import os
import subprocess
import sys
import textwrap

import pytest

from autotune import codec
from autotune.errors import AutotuneError, CacheFileError

import tiny_kernels as tk
from tests_support import (ROOT, environment, is_char_device, limited_memory,
                           malformed_cache, mknod_copy, no_space)


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
