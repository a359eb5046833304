import os
import stat
import threading

import pytest

import autotune
from autotune import keys
from autotune import codec
from autotune.cache.tiers import PerFusionDirectory
from autotune.codec import CacheFileError
from autotune.errors import AutotuneError

import tiny_kernels as tk
from tests_support import entry_for, no_space, tiny_tmpfs


def test_tuned_fusion_lands_in_its_own_file(session_factory, tmp_path):
    sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    tk.run(tk.make_tuner(), 40)
    tk.run(tk.make_tuner(), 80)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.startswith("axpb_kernel.") for f in files)
    for key in sess.cache.memory:
        assert (tmp_path / keys.file_name(key)).exists()
    sess2 = session_factory(per_fusion_autotune_cache_dir=str(tmp_path),
                            autotune_cache_mode="read")
    tk.run(tk.make_tuner(), 40)
    assert sess2.stats.hits == 1 and sess2.stats.candidate_benchmarks == 0


def test_missing_directory(session_factory, tmp_path):
    with pytest.raises(autotune.AutotuneError, match="does not exist"):
        session_factory(per_fusion_autotune_cache_dir=str(tmp_path / "nope"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(session_factory, tmp_path):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(CacheFileError, match="not writable"):
            session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_unwritable_directory_via_access(session_factory, tmp_path,
                                         monkeypatch):
    # Same check as above, for runs as root (CI), where chmod does not bind.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(CacheFileError, match="not writable"):
        session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    # Read mode does not need write access.
    session_factory(per_fusion_autotune_cache_dir=str(tmp_path),
                    autotune_cache_mode="read")


def _corrupt_one(sess, tmp_path):
    tk.run(tk.make_tuner(), 40)
    key = next(iter(sess.cache.memory))
    path = tmp_path / keys.file_name(key)
    path.write_bytes(path.read_bytes()[:50])
    return path


def test_corrupt_file_update_mode_moves_aside_and_retunes(
        session_factory, tmp_path, capsys):
    path = _corrupt_one(session_factory(
        per_fusion_autotune_cache_dir=str(tmp_path)), tmp_path)
    sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    tk.run(tk.make_tuner(), 40)
    assert sess.stats.tuned == 1
    assert "moved aside" in capsys.readouterr().err
    assert codec.load_results(path)  # re-tuned and rewritten
    assert [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]


def test_corrupt_file_read_mode_is_an_error(session_factory, tmp_path):
    path = _corrupt_one(session_factory(
        per_fusion_autotune_cache_dir=str(tmp_path)), tmp_path)
    before = path.read_bytes()
    session_factory(per_fusion_autotune_cache_dir=str(tmp_path),
                    autotune_cache_mode="read")
    with pytest.raises(CacheFileError) as err:
        tk.run(tk.make_tuner(), 40)
    assert str(path) in str(err.value)
    assert path.read_bytes() == before


def test_read_mode_never_writes(session_factory, tmp_path):
    session_factory(per_fusion_autotune_cache_dir=str(tmp_path),
                    autotune_cache_mode="read")
    tk.run(tk.make_tuner(), 40)
    assert list(tmp_path.iterdir()) == []


def test_first_writer_wins(tmp_path):
    from tests_support import entry_for
    d = PerFusionDirectory(tmp_path)
    first, second = entry_for(tk.GOOD[0]), entry_for(tk.GOOD[1])
    assert d.store(first).best == tk.GOOD[0]
    assert d.store(second).best == tk.GOOD[0]
    assert d.lookup(first.key).best == tk.GOOD[0]
    assert [p.name for p in tmp_path.iterdir()] == [
        keys.file_name(first.key)]


# -- a full disk under the per-fusion directory ---------------------------

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



# -- file names and what stands where a file should be --------------------

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


def test_a_fifo_in_a_per_fusion_directory_is_not_opened(tmp_path,
                                                        session_factory,
                                                        capsys):
    sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    tk.run(tk.make_tuner(), 40)
    (name,) = os.listdir(tmp_path)
    os.unlink(tmp_path / name)
    fifo = tmp_path / name
    os.mkfifo(fifo)

    def writer():  # so that a reader that opens it sees garbage, then EOF
        try:
            with open(fifo, "wb") as f:
                f.write(b"garbage")
        except OSError:
            pass
    feeding = threading.Thread(target=writer, daemon=True)
    feeding.start()
    try:
        sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
        tk.run(tk.make_tuner(), 40)
    finally:
        for path in tmp_path.iterdir():  # let the writer go
            if stat.S_ISFIFO(os.lstat(path).st_mode):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        feeding.join(10)
    assert sess.stats.tuned == 1
    assert "not a regular file" in capsys.readouterr().err
    assert os.path.isfile(tmp_path / name)


def test_dangling_symlink_in_the_per_fusion_directory(tmp_path,
                                                      session_factory,
                                                      capsys):
    directory = tmp_path / "cache"
    directory.mkdir()
    session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    (name,) = os.listdir(directory)
    os.unlink(directory / name)
    os.symlink(tmp_path / "gone", directory / name)
    capsys.readouterr()
    sess = session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    assert sess.stats.tuned == 1
    err = capsys.readouterr().err
    assert err.count("a symbolic link to a file that does not exist; moved "
                     "aside") == 1, err
    assert os.path.isfile(directory / name) and \
        not os.path.islink(directory / name)  # stored this time
    sess = session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    assert (sess.stats.hits, sess.stats.tuned) == (1, 0)
    (key,) = sess.cache.memory
    os.unlink(directory / name)
    os.symlink(tmp_path / "gone", directory / name)
    with pytest.raises(CacheFileError, match="a symbolic link to a file "
                       "that does not exist"):
        PerFusionDirectory(directory, "read").lookup(key)



# -- races ----------------------------------------------------------------

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

