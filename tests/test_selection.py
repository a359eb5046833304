"""Choosing the winner and saying why (measure/selection.py): on made-up
timings, every kind of reason select_winner gives is the one the stored
entry's explanation prints afterwards (report/summary.winner_reason, behind
`autotune_cache show --candidates`, the reports and the page) and the one
the progress line ends with."""
import pytest

from autotune.measure import backends, selection
from autotune.records import (CacheKey, Candidate, Config, Entry,
                              Provenance)
from autotune.report import summary
from autotune.runtime import progress

SMALL = Config({"BLOCK": 32}, num_warps=4)
LARGE = Config({"BLOCK": 64}, num_warps=4)
LARGEST = Config({"BLOCK": 128}, num_warps=4)


def steady(times):
    """retime for made-up timings: every call measures the config's own
    time with a 1 % spread of its repetitions."""
    calls = []

    def retime(config, share=1.0):
        calls.append(config)
        t = times[config]
        return backends.Timing([t * 0.995, t, t * 1.005], share)
    retime.calls = calls
    return retime


def select(times, incumbent=None, failed=()):
    candidates = [Candidate(c, t) for c, t in times.items()]
    candidates += [Candidate(c, 0.0, "compile_error", "boom")
                   for c in failed]
    retime = steady(times)
    timings = {c: retime(c) for c in times}
    return selection.select_winner(candidates, timings, retime, incumbent)


def stored(chosen, tuner="exhaustive"):
    """The entry a run writes for a selection."""
    best = chosen.best
    return Entry(CacheKey("cpu/test", "k", "f" * 16, "n=1"), best.config,
                 best.run_time_us, chosen.candidates,
                 Provenance("3.9.0", "2.13.0", "", "2026-12-01T00:00:00Z",
                            0.01, tuner, 1.0))


def record_of(chosen, incumbent=None):
    """What the run's report says of the fusion (the session records
    whether its incumbent was kept or replaced)."""
    extra = {"status": "tuned"}
    if incumbent is not None:
        extra.update(incumbent="kept" if chosen.best.config == incumbent
                     else "replaced", incumbent_config=incumbent.short())
    return summary.fusion_record(stored(chosen).key, stored(chosen), **extra)


@pytest.mark.parametrize("kind, times, incumbent, failed, winner", [
    (selection.ONLY, {LARGE: 10.0}, None, (SMALL,), LARGE),
    (selection.FASTEST, {SMALL: 20.0, LARGE: 10.0}, None, (), LARGE),
    (selection.TIE, {SMALL: 10.05, LARGE: 10.0}, None, (), SMALL),
    (selection.INCUMBENT_KEPT, {SMALL: 10.0, LARGE: 10.3}, LARGE, (),
     LARGE),
    (selection.INCUMBENT_BEATEN, {SMALL: 10.0, LARGE: 20.0}, LARGE, (),
     SMALL),
])
def test_the_printed_reason_is_the_selections_own(kind, times, incumbent,
                                                   failed, winner):
    chosen = select(times, incumbent, failed)
    assert chosen.best.config == winner
    assert chosen.reason.kind == kind
    record = record_of(chosen, incumbent)
    assert (record["reason"], record["reason_text"]) == \
        (kind, chosen.reason.text())


def test_a_gap_within_the_winners_own_spread_is_no_clear_margin():
    """18.6 % slower is a clear margin only when the winner's own timings
    vary less than that (27.6 % here: they do not)."""
    candidates = [Candidate(SMALL, 11.86), Candidate(LARGE, 10.0)]
    covered = selection.explain(candidates, LARGE, selection.NONE,
                                spread=0.276)
    assert covered.kind == selection.FASTEST
    assert covered.text() == (
        "fastest; runner-up BLOCK=32 num_warps=4 num_stages=3 measured "
        "18.6% slower, within the winner's own timing spread (27.6%): not "
        "a clear margin")
    beaten = selection.explain(candidates, LARGE, selection.NONE,
                               spread=0.05)
    assert beaten.text().startswith("fastest by a clear margin: runner-up")


def test_each_kind_says_what_decided_with_the_margin_it_applied():
    fastest = select({SMALL: 20.0, LARGE: 10.0}).reason
    assert fastest.text() == ("fastest by a clear margin: runner-up "
                              "BLOCK=32 num_warps=4 num_stages=3 measured "
                              "100.0% slower")
    tie = select({SMALL: 10.05, LARGE: 10.0}).reason
    assert tie.text().startswith(
        "tie-break to the smaller config: BLOCK=64 num_warps=4 "
        "num_stages=3 measured 0.5% faster")
    assert "2%" in tie.text() and "0.25 standard errors" in tie.text()
    kept = select({SMALL: 10.0, LARGE: 10.3}, LARGE).reason
    assert kept.text() == ("incumbent kept within the margin: BLOCK=32 "
                           "num_warps=4 num_stages=3 measured 2.9% faster "
                           "but was not shown 8% faster head to head")
    beaten = select({SMALL: 10.0, LARGE: 20.0}, LARGE).reason
    assert beaten.text() == ("replaced the incumbent BLOCK=64 num_warps=4 "
                             "num_stages=3: shown more than 8% slower head "
                             "to head")


def test_an_incumbent_is_not_duelled_by_a_twin_the_backend_runs_alike():
    """On a backend that ignores num_warps (the interpreter), a config
    that differs from the incumbent only there runs the same program: its
    faster first-pass time is noise, and no duel may replace the
    incumbent with it (a regenerate on an unchanged tree would flip the
    cached winner). A config that runs another program still duels."""
    twin = Config({"BLOCK": 64}, num_warps=8)
    times = {LARGE: 12.0, twin: 9.0, SMALL: 11.5}
    retime = steady(times)
    candidates = [Candidate(c, t) for c, t in times.items()]
    ignored = backends.InterpreterBackend.ignored_config_fields
    chosen = selection.select_winner(
        candidates, {c: retime(c) for c in times}, retime, LARGE,
        ignored=ignored)
    assert chosen.best.config == LARGE and not chosen.duels, chosen
    assert chosen.reason.kind == selection.INCUMBENT_KEPT
    # Without the backend's word, the same timings are a real duel.
    chosen = selection.select_winner(
        candidates, {c: retime(c) for c in times}, steady(times), LARGE)
    assert chosen.duels and chosen.best.config != LARGE


def test_an_incumbent_beaten_says_how_and_what_the_contest_chose_then():
    # The incumbent fails when timed again: replaced without being shown
    # slower.
    times = {SMALL: 10.0, LARGE: 12.0}
    retime = steady(times)

    def failing(config, share=1.0):
        if config == LARGE:
            raise RuntimeError("launch failed")
        return retime(config, share)
    candidates = [Candidate(c, t) for c, t in times.items()]
    chosen = selection.select_winner(
        candidates, {c: retime(c) for c in times}, failing, LARGE)
    assert chosen.reason.kind == selection.INCUMBENT_BEATEN
    assert chosen.reason.text() == ("replaced the incumbent BLOCK=64 "
                                    "num_warps=4 num_stages=3: it failed "
                                    "when timed again")
    # The fastest beats the incumbent; among the rest a smaller config
    # ties with it, and the contest keeps that one.
    chosen = select({SMALL: 10.05, LARGEST: 10.0, LARGE: 20.0},
                    incumbent=LARGE)
    assert chosen.best.config == SMALL
    assert chosen.reason.text().startswith(
        "replaced the incumbent BLOCK=64 num_warps=4 num_stages=3: shown "
        "more than 8% slower head to head; then tie-break to the smaller "
        "config: BLOCK=128")


def test_an_incumbent_that_failed_lost_no_duel():
    chosen = select({SMALL: 10.0}, incumbent=LARGE, failed=(LARGE,))
    assert chosen.reason.kind == selection.ONLY
    chosen = select({SMALL: 10.0, LARGEST: 30.0}, incumbent=LARGE,
                    failed=(LARGE,))
    assert chosen.reason.kind == selection.FASTEST
    assert record_of(chosen, LARGE)["reason"] == selection.FASTEST


def test_a_runs_report_gives_the_words_of_its_progress_line(
        session_factory, capfd):
    import tiny_kernels as tk
    sess = session_factory(autotune_verbosity="normal")
    tk.run(tk.make_tuner(), 20)
    end = [line for line in capfd.readouterr().err.splitlines()
           if line.startswith("autotune: tuned ")][-1]
    [record] = sess.report()["fusions"]
    assert f"; why: {record['reason_text']}; " in end, (end, record)


def test_the_selections_own_reason_wins_over_one_derived_from_the_file():
    """An incumbent kept although a larger config measured 3 % faster
    reads, from the candidates alone, like a contest's tie: the record of
    the run that tuned it says what the selection decided."""
    chosen = select({SMALL: 10.3, LARGE: 10.0}, SMALL)
    assert chosen.reason.kind == selection.INCUMBENT_KEPT
    entry = stored(chosen)
    assert summary.fusion_record(entry.key, entry, status="tuned")[
        "reason"] == selection.TIE
    record = summary.fusion_record(
        entry.key, entry, status="tuned", reason=chosen.reason.kind,
        reason_text=chosen.reason.text())
    assert (record["reason"], record["reason_text"]) == (
        selection.INCUMBENT_KEPT, chosen.reason.text())


def test_an_entry_read_from_a_file_is_explained_from_its_candidates():
    # No run knows its incumbent: a larger config that measured slower
    # wins only as the incumbent.
    kept = stored(select({SMALL: 10.0, LARGE: 10.3}, LARGE))
    assert summary.winner_reason(kept)[0] == selection.INCUMBENT_KEPT
    kind, text = summary.winner_reason(stored(select(
        {SMALL: 10.05, LARGE: 10.0})))
    # Whether that run had an incumbent is not in the file: the words
    # allow both rules.
    assert kind == selection.TIE
    assert text.startswith("kept ahead of BLOCK=64 num_warps=4 "
                           "num_stages=3, which measured 0.5% faster")
    assert "or an incumbent within its 8% head-to-head margin" in text
    nearest = Entry(CacheKey("cpu/test", "k", "f" * 16, "n=2"), SMALL, 10.0,
                    [], Provenance("3.9.0", "", "", "", 0.0, "nearest", 0.0))
    assert summary.winner_reason(nearest) == (
        selection.NOT_MEASURED, "copied from the nearest tuned shape")


def test_the_progress_line_gives_the_reason(capsys):
    chosen = select({SMALL: 10.0, LARGE: 10.3}, LARGE)
    result = selection.TuneResult(chosen.candidates, chosen.best, 0.01, 1.0,
                                  "exhaustive", chosen.reason)
    line = progress.TuningProgress("k", "n=1", 2, terminal=False)
    line.start()
    line.finish(result)
    end = capsys.readouterr().err.splitlines()[-1]
    assert end.startswith("autotune: tuned k [n=1]: winner BLOCK=64")
    assert f"; why: {chosen.reason.text()}; 2 measured in" in end
