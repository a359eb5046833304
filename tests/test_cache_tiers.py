import os
import stat

import pytest

import autotune
from autotune import keys
from autotune import codec
from autotune.cache.tiers import PerFusionDirectory
from autotune.codec import CacheFileError

import tiny_kernels as tk


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
