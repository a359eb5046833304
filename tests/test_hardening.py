"""Bad input, full disks, races, symlinks and exit handling: each test
names the defect it guards against."""
import contextlib
import errno
import math
import os
import subprocess
import sys
import textwrap

import pytest

import autotune
from autotune import codec
from autotune import keys
from autotune.cli import cache_tool
from autotune.cache.tiers import PerFusionDirectory
from autotune.errors import AutotuneError, CacheFileError

import tiny_kernels as tk
from test_results_io import make_entries
from tests_support import entry_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tool(*argv):
    return cache_tool.main([str(a) for a in argv])


def no_space(monkeypatch):
    """Every file write that reaches the disk fails as on a full disk."""
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)


@contextlib.contextmanager
def tiny_tmpfs(path):
    """A 64 KiB tmpfs at `path`, filled up; skips unless it can mount."""
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
            capture_output=True).returncode != 0:
        pytest.skip("needs root and mount")
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 512)
        os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert str(needle) in err, err
    return err


# -- 1. a full disk under the per-fusion directory ---------------------------

def test_failed_per_fusion_store_warns_once_and_launches(
        session_factory, tmp_path, monkeypatch, capsys):
    session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    no_space(monkeypatch)
    tuned = tk.make_tuner()
    for n in (40, 80):
        x, y = tk.run(tuned, n)
        assert (y == x * 2.0 + 1.0).all()
    err = capsys.readouterr().err
    assert err.count("cannot store in the per-fusion cache") == 1, err
    assert "No space left on device" in err
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_per_fusion_store_on_a_full_tmpfs(session_factory, tmp_path, capsys):
    with tiny_tmpfs(tmp_path / "full") as full:
        session_factory(per_fusion_autotune_cache_dir=str(full))
        x, y = tk.run(tk.make_tuner(), 40)
        assert (y == x * 2.0 + 1.0).all()
        assert "cannot store" in capsys.readouterr().err
        assert sorted(p.name for p in full.iterdir()) == ["filler"]


# -- 2. the cache tool on a full output disk --------------------------------

@pytest.mark.parametrize("command", ["convert-file", "merge", "convert-dir"])
def test_tool_on_a_full_disk_exits_2_naming_the_path(
        tmp_path, monkeypatch, capsys, command):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)
    out = tmp_path / "out"
    no_space(monkeypatch)
    if command == "convert-file":
        rc = tool("convert", good, f"{out}.pb")
    elif command == "merge":
        rc = tool("merge", good, "-o", f"{out}.pb")
    else:
        rc = tool("convert", good, f"{out}/")
    assert rc == 2
    one_line_error(capsys, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.textproto"]


def test_tool_on_a_full_tmpfs(tmp_path, capsys):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(200), good)
    with tiny_tmpfs(tmp_path / "full") as full:
        assert tool("convert", good, full / "c.pb") == 2
        one_line_error(capsys, full / "c.pb")
        assert tool("convert", good, f"{full}/cd/") == 2
        one_line_error(capsys, full / "cd")
        assert sorted(p.name for p in full.iterdir()) == ["filler"]


# -- 3. a malformed best config, every subcommand ----------------------------

def _malformed(tmp_path):
    text = codec.encode(make_entries(2), "x.textproto").decode()
    line = text.split("\n  best { ", 1)[1].split("\n", 1)[0]
    bad = text.replace("  best { " + line,
                       '  best { params: "BLOCK=32 BUG" num_warps: 4 '
                       'num_stages: 2 }', 1)
    path = tmp_path / "bad.textproto"
    path.write_text(bad)
    return path


@pytest.mark.parametrize("argv", [["diff", "{bad}", "{good}"],
                                  ["diff", "{good}", "{bad}"],
                                  ["stats", "{bad}"], ["show", "{bad}"],
                                  ["show", "--entries", "{bad}"],
                                  ["show", "--json", "{bad}"],
                                  ["merge", "{good}", "{bad}", "-o", "{out}"],
                                  ["prune", "{bad}", "--dry-run"],
                                  ["convert", "{bad}", "{out}"],
                                  ["verify", "{bad}"]])
def test_malformed_best_config_is_exit_2_for_every_subcommand(
        tmp_path, capsys, argv):
    bad = _malformed(tmp_path)
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    out = tmp_path / "out.pb"
    names = dict(bad=bad, good=good, out=out)
    assert tool(*[a.format(**names) for a in argv]) == 2
    err = capsys.readouterr()
    assert "Traceback" not in err.err
    assert "malformed config params 'BLOCK=32 BUG'" in err.err + err.out
    assert not out.exists()


# -- 4. more tool arguments --------------------------------------------------

@pytest.mark.parametrize("age", ["1000000", "1e308", "nan", "inf", "-30",
                                 "abc"])
def test_prune_rejects_ages_it_cannot_use(tmp_path, capsys, age):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)
    out = tmp_path / "out.textproto"
    assert tool("prune", good, f"--older_than={age}", "-o", out) == 2
    one_line_error(capsys, "--older_than")
    assert not out.exists()


def test_prune_by_age_keeps_recent_entries(tmp_path):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)  # tuned 2026-11-29
    out = tmp_path / "out.textproto"
    assert tool("prune", good, "--older_than=0", "-o", out) == 0
    assert codec.load_results(out) == []
    assert tool("prune", good, "--older_than=100000d", "-o", out) == 0
    assert len(codec.load_results(out)) == 3


def test_convert_into_a_directory_under_a_file(tmp_path, capsys):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    assert tool("convert", good, f"{good}/sub/") == 2
    one_line_error(capsys, good)


def test_kernel_module_that_raises_on_import(tmp_path, monkeypatch, capsys):
    (tmp_path / "explodes.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    assert tool("verify", good, "--kernel_module=explodes") == 2
    one_line_error(capsys, "explodes", "boom")


# -- 5. per-fusion file names -----------------------------------------------

def test_long_non_ascii_kernel_name_gives_a_short_file_name(tmp_path):
    entry = entry_for(tk.GOOD[0], kernel="\U0001D400" * 64)  # four UTF-8 bytes, alphanumeric
    name = keys.file_name(entry.key)
    assert len(name.encode()) <= 120  # file systems allow 255
    PerFusionDirectory(tmp_path).store(entry)
    assert PerFusionDirectory(tmp_path, "read").lookup(entry.key) == entry


@pytest.mark.parametrize("link", [False, True])
def test_directory_where_a_per_fusion_file_should_be(tmp_path, capsys, link):
    entry = entry_for(tk.GOOD[0])
    path = tmp_path / keys.file_name(entry.key)
    if link:
        (tmp_path / "elsewhere").mkdir()
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.mkdir()
    with pytest.raises(AutotuneError, match=str(path)):
        PerFusionDirectory(tmp_path, "read").lookup(entry.key)
    update = PerFusionDirectory(tmp_path)
    assert update.lookup(entry.key) is None  # moved aside, re-tune
    assert "moved aside" in capsys.readouterr().err
    assert update.store(entry) == entry
    assert update.lookup(entry.key) == entry


def test_per_fusion_path_that_is_a_file(tmp_path, session_factory):
    path = tmp_path / "cache"
    path.write_text("")
    with pytest.raises(AutotuneError, match="is not a directory"):
        session_factory(per_fusion_autotune_cache_dir=str(path))


# -- 6. values no one checked ------------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
@pytest.mark.parametrize("field", ["best", "candidate", "spread"])
@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_unusable_times_are_rejected(tmp_path, capsys, value, field, ext):
    entries = make_entries(3)
    entry = entries[1]
    if field == "best":
        entries[1] = entry.replace(run_time_us=value)
    elif field == "candidate":
        cands = list(entry.candidates)
        cands[0] = cands[0]._replace(run_time_us=value)
        entries[1] = entry.replace(candidates=cands)
    else:
        entries[1] = entry.replace(provenance=entry.provenance._replace(
            timing_spread=value))
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, path)
    assert tool("verify", path) == 2
    assert "finite numbers >= 0" in capsys.readouterr().err
    # show reads best configs and provenance (not candidates).
    assert tool("show", "--json", "--entries", path) == (
        0 if field == "candidate" else 2)
    if field == "best":
        with pytest.raises(CacheFileError, match="finite"):
            [e.best for e in codec.load_results(path)]


def test_binary_file_cut_to_its_header(tmp_path):
    path = tmp_path / "c.pb"
    codec.dump_results(make_entries(2), path)
    path.write_bytes(path.read_bytes()[:2])
    with pytest.raises(CacheFileError, match="truncated"):
        codec.load_results(path)
    codec.dump_results([], path)  # an empty cache still loads
    assert codec.load_results(path) == []


def test_malformed_best_config_is_an_error_at_load(tmp_path,
                                                   session_factory):
    bad = _malformed(tmp_path)
    with pytest.raises(AutotuneError, match="BLOCK=32 BUG"):
        session_factory(load_autotune_results_from=[str(bad)])


# -- 7. configuration ----------------------------------------------------------

@pytest.mark.parametrize("options", [
    dict(autotune_miss_policy="foo"),
    dict(autotune_cache_mode="write"),
    dict(autotune_backend="tpu"),
    dict(require_complete_autotune_results="no"),
    dict(autotune_fail_if_sharded=1)])
def test_bad_option_values_are_rejected(session_factory, options):
    with pytest.raises(AutotuneError, match=next(iter(options))):
        session_factory(**options)


def test_bad_shard_count(session_factory, monkeypatch):
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "abc")
    with pytest.raises(AutotuneError, match="TEST_TOTAL_SHARDS"):
        session_factory()


def test_output_paths_are_checked_at_start(session_factory, tmp_path):
    with pytest.raises(AutotuneError, match="is a directory"):
        session_factory(dump_autotune_results_to=str(tmp_path))
    with pytest.raises(AutotuneError, match="does not exist"):
        session_factory(autotune_report_to=str(tmp_path / "no" / "r.json"))


def test_dump_failure_at_finish_names_the_path(session_factory, tmp_path,
                                               monkeypatch):
    dump = tmp_path / "dump.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(), 40)
    no_space(monkeypatch)
    with pytest.raises(CacheFileError, match=f"{dump}: cannot write: No "
                       "space left"):
        sess.finish()


# -- 8. races ----------------------------------------------------------------

def test_only_the_file_read_is_moved_aside(tmp_path):
    """Two processes read the same corrupt file; the second moves it aside
    and stores a good entry before the first gets to move anything: the
    first must adopt that entry, not move it aside."""
    first, second = entry_for(tk.GOOD[0]), entry_for(tk.GOOD[1])
    path = tmp_path / keys.file_name(first.key)
    path.write_text("garbage")
    slow, fast = PerFusionDirectory(tmp_path), PerFusionDirectory(tmp_path)
    move_aside = PerFusionDirectory._move_aside

    def delayed(self, *args):
        if self is slow:  # the other process runs in between
            assert fast.lookup(first.key) is None
            assert fast.store(second) == second
        return move_aside(self, *args)
    PerFusionDirectory._move_aside = delayed
    try:
        found = slow.lookup(first.key)
    finally:
        PerFusionDirectory._move_aside = move_aside
    used_by_slow = found if found is not None else slow.store(first)
    assert used_by_slow.best == second.best == tk.GOOD[1]
    assert codec.load_results(path)[0].best == tk.GOOD[1]


def test_a_corrupt_file_met_while_storing_is_moved_aside_once(tmp_path):
    first, second = entry_for(tk.GOOD[0]), entry_for(tk.GOOD[1])
    path = tmp_path / keys.file_name(first.key)
    path.write_text("garbage")
    a, b = PerFusionDirectory(tmp_path), PerFusionDirectory(tmp_path)
    assert a.store(first).best == tk.GOOD[0]
    assert b.store(second).best == tk.GOOD[0]  # adopts, does not replace


# -- 9. exit handling and one error type -------------------------------------

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


def test_one_error_type_for_users(session_factory, tmp_path):
    assert issubclass(CacheFileError, AutotuneError)
    assert autotune.AutotuneError is AutotuneError
    with pytest.raises(AutotuneError, match="does not exist"):
        session_factory(per_fusion_autotune_cache_dir=str(tmp_path / "no"))
    (tmp_path / "bad.pb").write_bytes(b"garbage")
    with pytest.raises(AutotuneError, match="bad.pb"):
        session_factory(load_autotune_results_from=[str(tmp_path / "bad.pb")])


# -- 10. symlinks and the umask ------------------------------------------------

def test_dump_and_merge_write_through_symlinks(tmp_path):
    target = tmp_path / "real.textproto"
    link = tmp_path / "link.textproto"
    codec.dump_results(make_entries(1), target)
    link.symlink_to(target)
    codec.dump_results(make_entries(2), link)
    assert link.is_symlink() and len(codec.load_results(target)) == 2
    source = tmp_path / "src.textproto"
    codec.dump_results(make_entries(4), source)
    assert tool("merge", source, "-o", link) == 0
    assert link.is_symlink() and len(codec.load_results(target)) == 4


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        codec.dump_results(make_entries(1), tmp_path / "c.pb")
        PerFusionDirectory(tmp_path).store(entry_for(tk.GOOD[0]))
    finally:
        os.umask(old)
    modes = {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {0o666 & ~umask}


def test_one_byte_flipped_in_a_binary_file_fails_verify(tmp_path, capsys):
    path = tmp_path / "c.pb"
    codec.dump_results(make_entries(3), path)
    data = path.read_bytes()
    at = data.index(b"num_warps") if b"num_warps" in data else \
        data.index(b"BLOCK_M=") + len("BLOCK_M=")
    flipped = bytearray(data)
    flipped[at] = ord("6") if data[at:at + 1] != b"6" else ord("3")
    path.write_bytes(bytes(flipped))
    assert len(codec.load_results(path)) == 3  # still parses
    assert tool("verify", path) == 2
    assert "checksum mismatch" in capsys.readouterr().err


# -- mutants that survived the suite ------------------------------------------

def test_unknown_cache_mode(tmp_path):
    with pytest.raises(ValueError, match="unknown cache mode 'write'"):
        PerFusionDirectory(tmp_path, "write")


def test_file_name_keeps_only_safe_characters(tmp_path):
    entry = entry_for(tk.GOOD[0], kernel="../pkg/mod.kernel-v2_x")
    name = keys.file_name(entry.key)
    assert name.startswith("___pkg_mod_kernel-v2_x.") and "/" not in name
    PerFusionDirectory(tmp_path).store(entry)
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_directory_listing_skips_leftovers(tmp_path, capsys):
    directory = PerFusionDirectory(tmp_path)
    entry = entry_for(tk.GOOD[0])
    directory.store(entry)
    name = keys.file_name(entry.key)
    for leftover in (f".{name}.123.ab.tmp", f"{name}.corrupt-1-2",
                     f"{name}.9.tmp"):
        (tmp_path / leftover).write_text("junk")
    assert directory.entries() == [entry]
    (tmp_path / "notes.txt").write_text("foreign")
    with pytest.raises(CacheFileError, match="notes.txt: not a per-fusion"):
        directory.entries()


def test_unknown_failure_kind_in_text_is_an_error_naming_the_file():
    text = codec.encode(make_entries(2), "c.textproto")
    bad = text.replace(b"failure: OUT_OF_RESOURCES", b"failure: BOGUS", 1)
    bad = bad[:bad.rindex(b"# crc32: ")]
    with pytest.raises(CacheFileError, match=r"^c\.textproto: .*BOGUS"):
        [e.candidates for e in codec.decode(bad, "c.textproto")]


def test_binary_lengths_around_one_varint_byte():
    # Lengths 127 and 128 take one and two varint bytes (a mutant that
    # moved the boundary survived the rest of the suite).
    from test_results_io import _reference_message
    entries = codec.sort_entries([
        entry_for(tk.GOOD[0], signature="s" * n)
        for n in (100, 125, 126, 127, 128, 129, 300)])
    assert codec.encode(entries, "x.pb") == _reference_message(entries)
