"""What a session tells at its end (autotune/runtime/run_report.py), from
a RunRecord built by hand: the summary line and the JSON report."""
import dataclasses
import types

import pytest

from autotune.runtime import distributed, run_report
from autotune.runtime.session import Stats

from test_e2e_tools import entry


def _record(**changes):
    stats = Stats()
    stats.hits, stats.misses = 1, 1
    hit, missed = entry(1), entry(2)
    stats.fusions = {hit.key: {"status": "hit"},
                     missed.key: {"status": "missed",
                                  "miss_reason": "missing"}}
    record = run_report.RunRecord(
        device_key="cpu", stats=stats, memory={hit.key: hit}, remote=None,
        load_reports=[{"path": "c.textproto"}], miss_keys=[missed.key],
        miss_notes={missed.key: "the remote tier timed out"})
    return dataclasses.replace(record, **changes)


def test_the_summary_line_counts_the_runs_fusions():
    line = run_report.summary_line(_record())
    assert line.startswith("autotune: 2 fusions on cpu: 1 hit, 0 tuned, "
                           "1 missed; "), line
    assert "remote hit" not in line
    remote = types.SimpleNamespace(report=lambda: {"hits": 0})
    assert "0 remote hit, " in run_report.summary_line(_record(remote=remote))


def test_the_report_names_each_miss_with_its_reason_and_note():
    data = run_report.report(_record())
    assert data["device"] == "cpu" and data["loaded"] == [
        {"path": "c.textproto"}]
    assert data["remote"] is None and data["distributed"] is None
    [missing] = data["missing"]
    assert (missing["signature"], missing["reason"], missing["note"]) == (
        "n=2", "missing", "the remote tier timed out")
    assert [f["signature"] for f in data["fusions"]] == ["n=1", "n=2"]


def test_a_rank_of_a_job_reports_the_exchanges_of_its_session():
    before = sum(distributed.EXCHANGES.values())
    data = run_report.report(_record(job=(1, 4), exchanges_before=before))
    assert data["distributed"] == {"rank": 1, "world_size": 4,
                                   "exchanges": 0}


def test_the_record_is_frozen():
    with pytest.raises(AttributeError):
        _record().device_key = "gpu"
