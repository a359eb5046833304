"""The pytest plugin's result record: the JSON report's keys (as_dict) and
the terminal summary's lines (lines), without running pytest."""
import json

from autotune.pytest_result import STAT_FIELDS, PluginResult, SummaryLine
from autotune.report import summary

from test_e2e_tools import entry

# The keys of the JSON report of every run; an update adds its own at
# its end (below).
REPORT_KEYS = {"mode", "retune", "cache", "fusions", "missing", "stale",
               "bypassing", "compiled_kernels", *STAT_FIELDS}


def _miss(status, kernel="k"):
    return {"kernel": kernel, "signature": "n=8", "device": "cpu",
            "status": status, "reason": "no entry", "test": "t.py::t"}


def test_a_load_runs_report_has_the_keys_of_every_run_only():
    result = PluginResult(mode="load", retune=False, cache="c.textproto",
                          hits=2, missing=[_miss("missing")],
                          compiled_kernels={})
    data = result.as_dict()
    assert set(data) == REPORT_KEYS
    assert data["hits"] == 2 and data["missing"] == [_miss("missing")]
    json.dumps(data)  # the report is JSON


def test_an_updates_report_adds_what_its_end_set():
    old, new = [entry(1)], [entry(1), entry(2)]
    result = PluginResult(mode="update", retune=False, cache="c.textproto")
    result.conflicts, result.unused = [], []
    result.changes = summary.CacheChanges(old, new)
    result.entries, result.written = 2, True
    data = result.as_dict()
    assert set(data) == REPORT_KEYS | {"conflicts", "unused", "changes",
                                       "entries", "written"}
    assert data["changes"] == summary.CacheChanges(old, new).as_dict()
    assert data["unused"] == [] and data["written"] is True
    json.dumps(data)


def test_the_first_line_counts_what_became_of_the_fusions():
    result = PluginResult(mode="load", retune=False, cache="/abs/c.textproto",
                          hits=3, remote_hits=1, tuned=0, misses=1,
                          candidate_benchmarks=5, tuning_seconds=1.5,
                          saved_seconds=0.25)
    assert result.lines("c.textproto")[0] == SummaryLine(
        "autotune: 3 hits, 1 remote hits, 0 tuned, 1 missed; 5 candidate "
        "benchmarks, 1.50 s tuning, 0.25 s saved (load c.textproto)")
    retune = PluginResult(mode="update", retune=True, cache="c", tuned=2,
                          misses=3, written=True)
    assert retune.lines()[0].text.startswith(
        "autotune: 2 re-measured, 0 hits, 1 missed and not tuned; ")
    assert "(update=all c)" in retune.lines()[0].text


def test_a_miss_says_how_to_fix_it_in_load_mode_only():
    load = PluginResult(mode="load", retune=False, cache="c",
                        stale=[_miss("stale")])
    assert SummaryLine("  stale: k [n=8] on cpu: no entry; fix: `pytest "
                       "--autotune-update`, then commit the cache") \
        in load.lines()
    update = PluginResult(mode="update", retune=False, cache="c",
                          stale=[_miss("stale")], written=True)
    assert SummaryLine("  stale: k [n=8] on cpu: no entry") in update.lines()


def test_an_update_left_untouched_is_red_unless_nothing_changed():
    failed = PluginResult(mode="update", retune=False, cache="c",
                          written=False,
                          not_written_because="1 test(s) failed")
    assert failed.lines()[-1] == SummaryLine(
        "autotune: c left untouched (1 test(s) failed)", "red")
    same = PluginResult(mode="update", retune=False, cache="c",
                        written=False, not_written_because="no change")
    assert same.lines()[-1] == SummaryLine(
        "autotune: c left untouched (no change)")
    # A load run writes nothing and says nothing of it.
    load = PluginResult(mode="load", retune=False, cache="c")
    assert not any("left untouched" in line.text for line in load.lines())


def test_bypassing_kernels_and_errors_are_marked():
    result = PluginResult(mode="load", retune=False, cache="c",
                          bypassing=["a", "b"])
    result.add_error("cannot write r.json")
    colors = {line.text.split(":")[1].strip(): line.color
              for line in result.lines()[1:]}
    assert colors == {"2 kernel(s) decorated with Triton's own "
                      "triton.autotune did not use the cache": "yellow",
                      "error": "red"}
    assert "errors" not in PluginResult(mode="load", retune=False,
                                        cache="c").as_dict()
