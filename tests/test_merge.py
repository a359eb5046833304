"""The one merge rule (autotune/cache/merge.py), and that every caller of
it decides a conflict the same way."""
import types

import pytest

from autotune.cache import merge
from autotune.cli import regenerate
from autotune.errors import AutotuneError
from autotune.pytest_plugin import AutotunePlugin
from autotune.records import CacheKey, Candidate, Config, Entry, Provenance


KEY = CacheKey("cpu/test", "k", "00ff", "n=1")


def entry(block, run_time_us, spread=0.02, stamp="2026-11-01T00:00:00Z"):
    config = Config({"BLOCK": block})
    return Entry(KEY, config, run_time_us, [Candidate(config, run_time_us)],
                 Provenance(timestamp=stamp, timing_spread=spread))


def test_measured_keeps_the_smaller_config_unless_beaten_by_the_margin():
    small, big = entry(16, 10.0), entry(32, 9.7)  # 3 % faster: a tie
    assert merge.choose(small, big, "measured") is small
    assert merge.choose(big, small, "measured") is small
    much = entry(32, 9.0)  # 10 % faster: beyond min_improvement (5 %)
    assert merge.choose(small, much, "measured") is much


def test_measured_gives_the_incumbent_the_wider_margin():
    incumbent = entry(32, 10.0)
    same, challenger = entry(32, 10.0), entry(16, 9.4)  # 6 %: < 8 %
    assert merge.choose(same, challenger, "measured", incumbent) is same
    assert merge.choose(challenger, same, "measured", incumbent) is same
    assert merge.choose(same, entry(16, 9.0), "measured",
                        incumbent).best == Config({"BLOCK": 16})


def test_recorded_noise_widens_the_bar():
    noisy_small, big = entry(16, 10.0, spread=0.2), entry(32, 8.5)
    assert merge.choose(noisy_small, big, "measured") is noisy_small
    assert merge.choose(entry(16, 10.0), big, "measured") is big


def test_the_named_policies():
    old = entry(16, 10.0, stamp="2026-01-01T00:00:00Z")
    new = entry(32, 12.0, stamp="2026-06-01T00:00:00Z")
    assert merge.choose(old, new, "prefer-faster") is old
    assert merge.choose(old, new, "prefer-newer") is new
    assert merge.choose(new, old, "prefer-first") is new
    assert merge.choose(new, old, "fail") is new
    with pytest.raises(AutotuneError, match="unknown merge policy 'best'"):
        merge.merge([], "best")


def test_merge_reports_each_conflict_with_one_formatter():
    a, b = entry(16, 10.0), entry(32, 5.0)
    merged, (conflict,) = merge.merge([("x", [a]), ("y", [b])], "measured")
    assert merged == [b]
    assert conflict.kept_source == "y"
    assert conflict.line() == (
        "conflict: k [n=1] on cpu/test: x has BLOCK=16 num_warps=4 "
        "num_stages=3 (10.000 us), y has BLOCK=32 num_warps=4 num_stages=3 "
        "(5.000 us); kept y's")
    assert conflict.as_dict()["kept"] == "y"
    same = entry(16, 11.0)
    assert merge.merge([("x", [a]), ("y", [same])])[1] == []


CASES = [
    # (checked-in or cached entry, worker/target A, worker/target B)
    (None, entry(16, 10.1), entry(32, 9.9)),
    (None, entry(16, 10.0), entry(32, 8.0)),
    (entry(32, 10.0), entry(16, 9.5), entry(32, 10.2)),
    (entry(32, 10.0), entry(16, 8.0), entry(32, 10.2)),
    (entry(64, 10.0), entry(16, 9.9), entry(32, 9.8)),
]


@pytest.mark.parametrize("incumbent,a,b", CASES)
def test_regenerate_and_the_xdist_merge_agree(incumbent, a, b):
    old = [incumbent] if incumbent is not None else []
    dumped = regenerate.merge_dumps(
        old, [("//:a_autotune_dump", [a], "cpu/test"),
              ("//:b_autotune_dump", [b], "cpu/test")])
    plugin = types.SimpleNamespace(old_entries=old)
    from_workers, _ = AutotunePlugin._merge(plugin, [("gw0", [a]),
                                                     ("gw1", [b])])
    (regenerated,) = dumped.entries
    (merged,) = from_workers
    assert regenerated.best == merged.best
