"""`autotune_cache show` (autotune/cli/cache_show.py): the candidate table
of one fusion, its roofline lines, and the options that go together.
(The command run on files is in tests/test_cache_tool.py.)"""
import types

import pytest

from autotune.cli import cache_show
from autotune.errors import ToolError
from autotune.records import Candidate, Config, Entry
from autotune.report import summary

from test_e2e_tools import entry


def test_the_candidate_table_marks_the_winner():
    base = entry(1, block=64, time_us=10.0)
    slow = Candidate(Config({"BLOCK": 128}, num_warps=4), 20.0)
    e = Entry(base.key, base.best, base.run_time_us,
              tuple(base.candidates) + (slow,), base.provenance)
    lines = cache_show.candidate_table(summary.fusion_record(e.key, e))
    assert lines[0] == "k [n=1] on " + e.key.device
    assert lines[1].startswith("  winner ")
    rows = [line for line in lines if line.startswith(("  * ", "    "))]
    assert rows[0].split()[:2] == ["config", "time"]
    assert rows[1].startswith("  * ") and "10.000" in rows[1]
    assert not rows[2].startswith("  * ") and "20.000" in rows[2]


def test_no_roofline_lines_without_its_figures():
    e = entry(1)
    record = summary.fusion_record(e.key, e)
    record["roofline"] = None
    assert cache_show.roofline_lines(record) == []


def test_kernel_goes_with_candidates_only():
    args = types.SimpleNamespace(candidates=False, compile_requests=False,
                                 coverage=False, kernel="k", paths=[])
    with pytest.raises(ToolError, match="--kernel goes with --candidates"):
        cache_show.cmd_show(args)
