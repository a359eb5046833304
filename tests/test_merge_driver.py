"""`autotune_cache merge-driver` (autotune/cli/merge_driver.py) under a
real `git merge` of two branches in a temporary repository."""
import os
import subprocess
import sys

import pytest

from autotune import codec
from autotune.records import CacheKey, Candidate, Config, Entry, Provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = "cpu/test"


def entry(n, block, run_time_us, stamp="2026-11-01T00:00:00Z"):
    config = Config({"BLOCK": block})
    return Entry(CacheKey(DEVICE, "k", "00ff", f"n={n}"), config, run_time_us,
                 [Candidate(config, run_time_us)],
                 Provenance(timestamp=stamp, timing_spread=0.01))


def git(repo, *args, check=True):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PYTHONPATH": ROOT}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=check,
                          capture_output=True, text=True)


def make_repo(tmp_path, name, base, driver=True):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    if driver:
        (repo / ".gitattributes").write_text(
            "*.textproto merge=autotune-cache\n*.pb merge=autotune-cache\n")
        git(repo, "config", "merge.autotune-cache.driver",
            f"{sys.executable} -m autotune.cli.cache_tool merge-driver "
            "%O %A %B %P")
    path = repo / name
    codec.dump_results(base, str(path))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, path


def commit_on(repo, path, branch, entries, start="main"):
    git(repo, "checkout", "-q", "-b", branch, start)
    codec.dump_results(entries, str(path))
    git(repo, "commit", "-q", "-am", branch)


BASE = [entry(1, 16, 10.0), entry(2, 16, 20.0), entry(3, 16, 30.0)]


@pytest.mark.parametrize("name", ["k.textproto", "k.pb"])
def test_branches_that_regenerated_different_fusions_merge_cleanly(
        tmp_path, name):
    repo, path = make_repo(tmp_path, name, BASE)
    ours = [entry(1, 32, 8.0), BASE[1], BASE[2], entry(4, 16, 40.0)]
    theirs = [BASE[0], entry(2, 64, 12.0), entry(5, 16, 50.0)]  # n=3 pruned
    commit_on(repo, path, "ours", ours)
    commit_on(repo, path, "theirs", theirs, start="main")
    git(repo, "checkout", "-q", "ours")
    result = git(repo, "merge", "-q", "--no-edit", "theirs", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = codec.load_results(str(path), parse_all=True)
    winners = {e.key.signature: (e.best.kwargs["BLOCK"], e.run_time_us)
               for e in merged}
    assert winners == {"n=1": (32, 8.0), "n=2": (64, 12.0),
                       "n=4": (16, 40.0), "n=5": (16, 50.0)}
    # Canonical form: what a later write of the same entries produces.
    assert path.read_bytes() == codec.encode(merged, str(path))
    assert "1 removed on one side" in result.stderr


def test_one_fusion_on_both_branches_is_decided_by_the_merge_rule(tmp_path):
    repo, path = make_repo(tmp_path, "k.textproto", BASE)
    commit_on(repo, path, "ours", [entry(1, 32, 9.0), *BASE[1:]])
    commit_on(repo, path, "theirs", [entry(1, 64, 5.0), *BASE[1:]])
    git(repo, "checkout", "-q", "ours")
    result = git(repo, "merge", "--no-edit", "theirs", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = {e.key.signature: e for e in
              codec.load_results(str(path), parse_all=True)}
    # Neither is the ancestor's winner: the smaller config stays unless the
    # other is faster by more than the margin (here 44 %).
    assert merged["n=1"].best == Config({"BLOCK": 64})
    assert "conflict: k [n=1]" in result.stderr
    assert "kept theirs's" in result.stderr


def test_without_the_driver_the_same_merge_conflicts(tmp_path):
    repo, path = make_repo(tmp_path, "k.textproto", BASE, driver=False)
    commit_on(repo, path, "ours", [entry(1, 32, 9.0), *BASE[1:]])
    commit_on(repo, path, "theirs", [entry(1, 64, 5.0), *BASE[1:]])
    git(repo, "checkout", "-q", "ours")
    assert git(repo, "merge", "--no-edit", "theirs",
               check=False).returncode != 0


def test_policy_fail_leaves_the_conflict_to_git(tmp_path):
    repo, path = make_repo(tmp_path, "k.textproto", BASE)
    git(repo, "config", "merge.autotune-cache.driver",
        f"{sys.executable} -m autotune.cli.cache_tool merge-driver "
        "--policy=fail %O %A %B %P")
    ours = [entry(1, 32, 9.0), *BASE[1:]]
    commit_on(repo, path, "ours", ours)
    commit_on(repo, path, "theirs", [entry(1, 64, 5.0), *BASE[1:]])
    git(repo, "checkout", "-q", "ours")
    result = git(repo, "merge", "--no-edit", "theirs", check=False)
    assert result.returncode != 0
    assert "1 conflict(s); nothing written" in result.stderr
    assert path.read_bytes() == codec.encode(ours, str(path))


def run_driver(*args):
    return subprocess.run(
        [sys.executable, "-m", "autotune.cli.cache_tool", "merge-driver",
         *map(str, args)], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("bad, expected", [
    ("garbage", "theirs version of testdata/k.textproto"),
    ("version: 99\n", "theirs version of testdata/k.textproto"),
    (None, "ancestor version of testdata/k.textproto"),
])
def test_bad_input_is_one_line_and_leaves_ours_untouched(tmp_path, bad,
                                                         expected):
    base, ours, theirs = (tmp_path / n for n in ("O", "A", "B"))
    codec.dump_results(BASE, str(base) + ".textproto")
    os.rename(str(base) + ".textproto", base)
    before = codec.encode([entry(1, 32, 9.0)], "x.textproto")
    ours.write_bytes(before)
    if bad is None:
        theirs.write_bytes(codec.encode(BASE, "x.textproto"))
        base.unlink()
    else:
        theirs.write_text(bad)
    result = run_driver(base, ours, theirs, "testdata/k.textproto")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert ours.read_bytes() == before


def test_an_empty_ancestor_is_two_branches_that_added_the_file(tmp_path):
    base, ours, theirs = (tmp_path / n for n in ("O", "A", "B"))
    base.write_bytes(b"")
    ours.write_bytes(codec.encode([BASE[0]], "x.pb"))
    theirs.write_bytes(codec.encode([BASE[1]], "x.pb"))
    result = run_driver(base, ours, theirs, "k.pb")
    assert result.returncode == 0, result.stderr
    assert ours.read_bytes() == codec.encode(BASE[:2], "x.pb")


def test_the_ancestors_winner_keeps_the_incumbent_margin(tmp_path):
    """Ours re-measured the ancestor's winner; theirs found a config 7 %
    faster: inside the incumbent's margin (8 %), outside the plain one (5 %)."""
    base, ours, theirs = (tmp_path / n for n in ("O", "A", "B"))
    base.write_bytes(codec.encode([entry(1, 16, 10.0)], "x.textproto"))
    ours.write_bytes(codec.encode(
        [entry(1, 16, 10.0, stamp="2026-11-02T00:00:00Z")], "x.textproto"))
    theirs.write_bytes(codec.encode([entry(1, 32, 9.3)], "x.textproto"))
    result = run_driver(base, ours, theirs, "k.textproto")
    assert result.returncode == 0, result.stderr
    [kept] = codec.decode(ours.read_bytes(), "x.textproto")
    assert kept.best == Config({"BLOCK": 16})


@pytest.mark.parametrize("changed", ["ours", "theirs"])
def test_a_change_made_on_one_side_only_is_kept(tmp_path, changed):
    """One side left the fusion's entry as the ancestor had it; the other
    re-tuned it (its old winner removed from the decoration) to a slower
    config: a three-way merge takes the changed side, with no conflict."""
    base, ours, theirs = (tmp_path / n for n in ("O", "A", "B"))
    old = [entry(1, 16, 10.0), entry(2, 16, 20.0)]
    new = [entry(1, 32, 12.0, stamp="2026-11-02T00:00:00Z"), old[1]]
    base.write_bytes(codec.encode(old, "x.textproto"))
    ours.write_bytes(codec.encode(new if changed == "ours" else old,
                                  "x.textproto"))
    theirs.write_bytes(codec.encode(new if changed == "theirs" else old,
                                    "x.textproto"))
    result = run_driver(base, ours, theirs, "k.textproto")
    assert result.returncode == 0, result.stderr
    assert "conflict" not in result.stderr
    assert ours.read_bytes() == codec.encode(new, "x.textproto")


def test_only_a_fusion_both_sides_changed_goes_to_the_merge_rule():
    from autotune.cli.merge_driver import three_way
    o = [entry(1, 16, 10.0), entry(2, 16, 20.0)]
    a = [entry(1, 32, 12.0, stamp="2026-11-02T00:00:00Z"),
         entry(2, 32, 19.9, stamp="2026-11-02T00:00:00Z")]
    b = [o[0], entry(2, 64, 19.8, stamp="2026-11-03T00:00:00Z")]
    merged, conflicts, dropped = three_way(o, a, b)
    assert [e.best for e in merged] == [Config({"BLOCK": 32}),
                                        Config({"BLOCK": 32})]
    assert len(conflicts) == 1 and dropped == []


def test_a_side_holding_conflict_markers_says_so(tmp_path):
    # A merge made before the driver was set up left git's conflict
    # markers in the file, and they were committed; a later merge through
    # the driver meets them on one side.
    repo, path = make_repo(tmp_path, "k.textproto", BASE, driver=False)
    commit_on(repo, path, "ours", [entry(1, 32, 9.0), *BASE[1:]])
    commit_on(repo, path, "theirs", [entry(1, 64, 5.0), *BASE[1:]])
    git(repo, "checkout", "-q", "ours")
    git(repo, "merge", "--no-edit", "theirs", check=False)
    assert "<<<<<<< " in path.read_text()
    git(repo, "commit", "-q", "-am", "merged, markers and all")
    marked = path.read_bytes()
    base, ours = tmp_path / "O", tmp_path / "A"
    base.write_bytes(codec.encode(BASE, "x.textproto"))
    ours.write_bytes(codec.encode([entry(2, 32, 9.0), BASE[0], BASE[2]],
                                  "x.textproto"))
    theirs = tmp_path / "B"
    theirs.write_bytes(marked)
    result = run_driver(base, ours, theirs, "testdata/k.textproto")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "theirs version of testdata/k.textproto" in lines[0]
    assert "protobuf decode failed" not in lines[0]
    assert "git conflict markers" in lines[0]
    assert "docs/cache-tool.md#git-merges" in lines[0]
    # The same file read by the cache tool, under its own name.
    tool = subprocess.run(
        [sys.executable, "-m", "autotune.cli.cache_tool", "show", str(path)],
        cwd=ROOT, capture_output=True, text=True)
    assert tool.returncode == 2 and "git conflict markers" in tool.stderr


def test_conflict_markers_at_the_top_are_not_called_binary(tmp_path):
    # git's temporary files have no extension: the content is sniffed, and
    # a marker on the first line does not look like text.
    text = codec.encode(BASE, "x.textproto").decode()
    other = codec.encode(BASE[:1], "x.textproto").decode()
    theirs = tmp_path / "B"
    theirs.write_text(f"<<<<<<< HEAD\n{text}=======\n{other}>>>>>>> theirs\n")
    base, ours = tmp_path / "O", tmp_path / "A"
    base.write_bytes(codec.encode(BASE, "x.textproto"))
    ours.write_bytes(codec.encode(BASE, "x.textproto"))
    result = run_driver(base, ours, theirs, "testdata/k.textproto")
    assert result.returncode == 2
    assert "not a binary" not in result.stderr
    assert "holds git conflict markers (line 1)" in result.stderr
