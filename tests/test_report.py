"""What tuning shows people: progress lines, Triton's message, candidate
tables with the reason each winner won, and the report page (its HTML;
tests/test_report_browser.py opens it in a browser)."""
import json
import logging
import os
import re
import sys

import pytest

import autotune
from autotune import codec
from autotune.cli import cache_show, cache_tool
from autotune.records import (CacheKey, Candidate, Config, Entry,
                              Provenance)
from autotune.report import page, summary
from autotune.runtime import progress

import tiny_kernels as tk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUSED = os.path.join(ROOT, "testdata", "fused_kernels.textproto")
DEVICE = "NVIDIA H200/sm_90/sms=132/triton-3.9.0"


def tool(*argv):
    return cache_tool.main([str(a) for a in argv])


def entry(times, winner, signature="n=1", device=DEVICE, failed=(),
          spread=0.02, kernel="k"):
    """An entry whose candidates are BLOCK=b with the given times."""
    cands = [Candidate(Config({"BLOCK": b}), t) for b, t in times.items()]
    cands += [Candidate(Config({"BLOCK": b}), 0.0, kind, "boom")
              for b, kind in failed]
    best = Config({"BLOCK": winner})
    return Entry(CacheKey(device, kernel, "f" * 16, signature), best,
                 times[winner], sorted(cands, key=lambda c: c.config.sort_key),
                 Provenance("3.9.0", "2.13.0", "12.8", "2026-11-29T10:00:00Z",
                            spread, "exhaustive", 1.5))


# -- why the winner won: tests/test_selection.py -------------------------

def test_record_rows_carry_ratio_spread_and_failures():
    record = summary.fusion_record(
        *(lambda e: (e.key, e))(entry({16: 20.0, 32: 10.0}, 32,
                                      failed=[(64, "OUT_OF_RESOURCES")])))
    rows = record["candidates"]
    assert [r["config"] for r in rows] == [
        "BLOCK=32 num_warps=4 num_stages=3",
        "BLOCK=16 num_warps=4 num_stages=3",
        "BLOCK=64 num_warps=4 num_stages=3"]
    assert rows[0]["winner"] and rows[0]["ratio"] == 1.0
    assert rows[0]["spread"] == 0.02 and rows[1]["spread"] is None
    assert rows[1]["ratio"] == 2.0
    assert rows[2]["failure"] == "OUT_OF_RESOURCES"
    assert rows[2]["run_time_us"] is None


# -- show --candidates ------------------------------------------------------

def test_show_candidates_table(capsys):
    assert tool("show", "--candidates", FUSED, "--kernel",
                "layernorm_kernel") == 0
    out = capsys.readouterr().out
    assert "2 fusions of layernorm_kernel" in out
    assert "matmul" not in out
    # n_cols=80: the incumbent num_warps=4 kept over a 4% faster num_warps=2.
    block = out.split("n_cols=80")[1]
    assert "incumbent kept within the margin" in block
    assert re.search(r"\* BLOCK=128 num_warps=4 num_stages=2 +22054\.876 +"
                     r"1\.000 +8\.7%", block)
    assert re.search(r"BLOCK=128 num_warps=2 num_stages=2 +21141\.813 +"
                     r"0\.959", block)


def test_show_candidates_json_is_the_record_schema(capsys):
    assert tool("show", "--candidates", "--json", FUSED) == 0
    shown = json.loads(capsys.readouterr().out)
    expected = summary.fusion_records(codec.load_results(FUSED))
    assert shown["fusions"] == json.loads(json.dumps(expected))
    assert {f["reason"] for f in shown["fusions"]} <= set(summary.REASONS)
    assert all(len(f["candidates"]) == 6 for f in shown["fusions"])


def test_kernel_without_candidates_is_usage_error(capsys):
    assert tool("show", FUSED, "--kernel", "x") == 2


# -- progress while tuning --------------------------------------------------

@pytest.fixture
def tuning_log(caplog):
    logger = logging.getLogger("autotune")
    logger.propagate = True
    caplog.set_level(logging.DEBUG, logger="autotune.tuning")
    yield caplog
    logger.propagate = False
    autotune.runtime.session.set_current(None)


def _tune_lines(caplog, verbosity):
    autotune.configure(autotune_verbosity=verbosity)
    caplog.clear()
    tk.run(tk.make_tuner(), 20)
    return [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "autotune.tuning"]


def test_normal_verbosity_prints_start_and_end(tuning_log):
    lines = _tune_lines(tuning_log, "normal")
    info = [m for level, m in lines if level == logging.INFO]
    assert len(info) == 2
    assert info[0].startswith("autotune: tuning axpb_kernel [n=20;")
    assert info[0].endswith("4 candidates")
    assert "winner BLOCK=" in info[1] and "runner-up BLOCK=" in info[1]
    assert "failed: 1 COMPILE_ERROR, 1 WRONG_RESULT" in info[1]
    assert re.search(r"4 measured in \d+\.\d\d s$", info[1])
    # The candidate lines are there for a logger set to DEBUG.
    debug = [m for level, m in lines if level == logging.DEBUG]
    assert [m.split("]")[0].strip() for m in debug] == [
        "[1/4", "[2/4", "[3/4", "[4/4"]


def test_verbose_prints_every_candidate(tuning_log):
    lines = _tune_lines(tuning_log, "verbose")
    info = [m for level, m in lines if level == logging.INFO]
    assert len(info) == 6
    assert re.match(r"  \[1/4\] BLOCK=16 BUG=0 num_warps=2 num_stages=3 "
                    r"\.\.\. \d+\.\d{3} ms", info[1])
    assert "[3/4] BLOCK=64 BUG=1" in info[3] and "WRONG_RESULT" in info[3]
    assert "COMPILE_ERROR" in info[4]


def test_quiet_says_nothing_at_info(tuning_log):
    lines = _tune_lines(tuning_log, "quiet")
    assert lines and all(level == logging.DEBUG for level, _ in lines)


def test_verbosity_flag_parses():
    from autotune import flags
    assert flags.parse("--autotune_verbosity=verbose").autotune_verbosity \
        == "verbose"
    with pytest.raises(autotune.AutotuneError):
        flags.parse("--autotune_verbosity=loud")


def test_terminal_gets_one_updating_line(capsys):
    class Result:
        seconds = 0.1
        best = Candidate(Config({"BLOCK": 32}), 10.0)
        candidates = [best, Candidate(Config({"BLOCK": 16}), 12.0)]
    p = progress.TuningProgress("k", "n=1", 2, terminal=True)
    p.start()
    for cand in Result.candidates:
        p.measured(cand)
    p.finish(Result)
    err = capsys.readouterr().err
    assert "\r\x1b[K  [1/2] BLOCK=32" in err and "\r\x1b[K  [2/2]" in err
    assert err.count("\n") == 2  # only the start and end lines end one


# -- Triton's message ---------------------------------------------------------

def test_triton_print_autotuning_message(session_factory, capsys,
                                         monkeypatch):
    from triton import knobs
    monkeypatch.setattr(knobs.autotuning, "print", True)
    session_factory(autotune_verbosity="quiet")
    tuned = tk.make_tuner()
    tk.run(tuned, 20)
    tk.run(tuned, 20)  # a memo hit: printed once, as Triton does
    out = capsys.readouterr().out
    assert out.count("Triton autotuning for function") == 1
    assert re.search(
        r"Triton autotuning for function axpb_kernel,\nwith key as "
        r"\(20, 'torch\.float32', 'torch\.float32'\),\nfinished after "
        r"\d+\.\d\ds,\nbest config selected: BLOCK: (16|32), BUG: 0, "
        r"num_warps: \d, num_ctas: 1, num_stages: 3, maxnreg: None, "
        r"ir_override: None;", out), out


def test_triton_message_silent_by_default(session_factory, capsys,
                                          monkeypatch):
    from triton import knobs
    monkeypatch.setattr(knobs.autotuning, "print", False)
    session_factory(autotune_verbosity="quiet")
    tk.run(tk.make_tuner(), 20)
    assert "Triton autotuning" not in capsys.readouterr().out


# -- the report page ----------------------------------------------------------

def test_report_page_is_self_contained(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert tool("report", FUSED, "-o", out) == 0
    text = out.read_text()
    assert text.count('<figure class="fusion-chart"') == 6
    assert text.count("<svg") == 6
    # Nothing to fetch: no external URL in any src/href, no <script src>,
    # no @import or url() to a remote resource.
    refs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert all(r.startswith("#") for r in refs), refs
    assert "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    assert "@import" not in text and "<link" not in text
    # Element ids are unique across the inline charts.
    ids = re.findall(r' id="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_report_with_base_lists_changed_first(tmp_path):
    new = [entry({16: 10.0, 32: 20.0}, 16, "n=1"),
           entry({16: 10.0, 32: 20.0}, 16, "n=2"),
           entry({16: 30.0, 32: 9.0}, 32, "n=3")]
    old = [entry({16: 10.0, 32: 20.0}, 16, "n=1"),
           entry({16: 12.0, 32: 11.0}, 32, "n=2"),
           entry({16: 10.0, 32: 20.0}, 16, "n=4")]
    pn, po = tmp_path / "new.textproto", tmp_path / "old.textproto"
    codec.dump_results(new, pn)
    codec.dump_results(old, po)
    out = tmp_path / "r.html"
    assert tool("report", pn, "--base", po, "-o", out) == 0
    text = out.read_text()
    assert "1 winner(s) changed, 1 added, 1 removed" in text
    changed = text.split('<table id="changed">')[1].split("</table>")[0]
    assert "n=2" in changed and "11.000" not in changed  # times in ms
    assert "0.011 ms" in changed and "0.010 ms" in changed
    assert "n=3" in text.split('<table id="added">')[1].split("</table>")[0]
    assert "n=4" in text.split('<table id="removed">')[1].split(
        "</table>")[0]
    # The changed fusion's chart comes first.
    first = text.split('<figure class="fusion-chart"')[1]
    assert 'data-signature="n=2"' in first


def test_report_base_of_another_device_says_so(tmp_path, capsys):
    new = [entry({16: 10.0, 32: 20.0}, 16, "n=1")]
    old = [entry({16: 10.0, 32: 20.0}, 32, "n=1",
                 device="NVIDIA A100/sm_80/sms=108/triton-3.9.0")]
    pn, po = tmp_path / "new.textproto", tmp_path / "old.textproto"
    codec.dump_results(new, pn)
    codec.dump_results(old, po)
    out = tmp_path / "r.html"
    assert tool("report", pn, "--base", po, "-o", out) == 0
    err = capsys.readouterr().err
    assert "another device, so no entry is compared" in err
    text = out.read_text()
    assert "another device" in text and 'id="changed"' not in text
    assert 'id="added"' not in text and 'id="removed"' not in text


def test_report_on_corrupt_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.textproto"
    bad.write_text("entries { device: \n")
    out = tmp_path / "r.html"
    assert tool("report", FUSED, bad, "-o", out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err
    assert not out.exists()


def test_report_without_matplotlib_says_how_to_install(tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert tool("report", FUSED, "-o", tmp_path / "r.html") == 2
    err = capsys.readouterr().err
    assert "pip install 'rules_autotune[report]'" in err
    assert not (tmp_path / "r.html").exists()


def test_dump_target_writes_the_page_next_to_its_dump(session_factory,
                                                      tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    sess = session_factory(
        dump_autotune_results_to=str(tmp_path / "autotune_cache.textproto"),
        autotune_verbosity="quiet")
    tk.run(tk.make_tuner(), 20)
    sess.finish()
    text = (tmp_path / "autotune_report.html").read_text()
    assert text.count('<figure class="fusion-chart"') == 1
    assert "COMPILE_ERROR" in text and "WRONG_RESULT" in text
    report = json.loads((tmp_path / "autotune_report.json").read_text())
    fusion = report["fusions"][0]
    assert fusion["status"] == "tuned" and len(fusion["candidates"]) == 4
    assert sum(r["winner"] for r in fusion["candidates"]) == 1
    # One schema: the report's record is the one show --candidates gives.
    dumped = codec.load_results(str(tmp_path / "autotune_cache.textproto"))
    # (what only the run knows: status, source, why it missed, the device
    # turn's times)
    run_fields = {k: fusion[k] for k in ("status", "source", "miss_reason",
                                         "device_wait_s", "tuning_start",
                                         "tuning_end")
                  if k in fusion}
    record = summary.fusion_record(dumped[0].key, dumped[0], **run_fields)
    assert set(fusion) == set(record)
    assert fusion["candidates"] == json.loads(json.dumps(
        record["candidates"]))


def test_a_dump_given_compiled_kernels_puts_their_counts_on_its_page(
        session_factory, tmp_path, monkeypatch):
    """The run's served and compiled counts, as its summary line says
    them, under the page's heading; no such line without compiled
    kernels."""
    from autotune.binaries import triton_cache
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    monkeypatch.setenv(triton_cache.COMPILED_DIRS_ENV,
                       json.dumps([str(tmp_path / "kernels")]))
    sess = session_factory(
        dump_autotune_results_to=str(tmp_path / "autotune_cache.textproto"),
        autotune_verbosity="quiet")
    tk.run(tk.make_tuner(), 20)
    sess.finish()
    text = (tmp_path / "autotune_report.html").read_text()
    counts = triton_cache.counts_text(triton_cache.counts_report())
    assert f'<p class="run-note">This run&#x27;s {counts}</p>' in text, \
        text[:2000]
    monkeypatch.delenv(triton_cache.COMPILED_DIRS_ENV)
    assert "run-note" not in page.build_page(
        [("c", codec.load_results(str(tmp_path / "autotune_cache.textproto")))])


def test_dump_without_matplotlib_is_a_note(session_factory, tmp_path,
                                           monkeypatch, caplog):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    sess = session_factory(
        dump_autotune_results_to=str(tmp_path / "autotune_cache.textproto"),
        autotune_verbosity="quiet")
    tk.run(tk.make_tuner(), 20)
    logging.getLogger("autotune").propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="autotune"):
            sess.finish()
    finally:
        logging.getLogger("autotune").propagate = False
    assert not (tmp_path / "autotune_report.html").exists()
    notes = [r.getMessage() for r in caplog.records
             if "no report page" in r.getMessage()]
    assert len(notes) == 1 and "rules_autotune[report]" in notes[0]
    assert (tmp_path / "autotune_cache.textproto").exists()


def test_page_has_a_chart_with_the_winner_and_noise_band():
    record = summary.fusion_record(
        *(lambda e: (e.key, e))(entry({16: 20.0, 32: 10.0}, 32, spread=0.1,
                                      failed=[(64, "TIMEOUT")])))
    svg = page.chart_svg(record, salt="t")
    assert svg.startswith("<svg") and "TIMEOUT" in svg
    assert "opacity: 0.15" in svg  # the noise band
    assert "#2a7ab9" in svg  # the winner's bar


def test_regenerate_prints_one_page_for_the_run(tmp_path, capsys,
                                                monkeypatch):
    from autotune.cli import regenerate
    monkeypatch.setattr(regenerate.tempfile, "tempdir", str(tmp_path))
    workspace = tmp_path / "ws"
    (workspace / "testdata").mkdir(parents=True)
    old = [entry({16: 10.0, 32: 20.0}, 16, "n=1"),
           entry({16: 10.0, 32: 20.0}, 16, "n=2")]
    codec.dump_results(old, workspace / "testdata" / "a.textproto")
    targets, results = {}, {}
    for name, dumped in (("a", [entry({16: 10.0, 32: 5.0}, 32, "n=1"),
                                entry({16: 10.0, 32: 20.0}, 16, "n=2")]),
                         ("b", [entry({16: 3.0, 32: 5.0}, 16, "n=7")])):
        logs = tmp_path / "logs" / name
        (logs / "test.outputs").mkdir(parents=True)
        codec.dump_results(dumped,
                           logs / "test.outputs" / "autotune_cache.textproto")
        target = f"//p:{name}_autotune_dump"
        targets[target] = f"testdata/{name}.textproto"
        results[target] = (True, str(logs))
    assert regenerate.write_results(targets, results, str(workspace),
                                    set()) == 0
    out = capsys.readouterr().out
    pages = re.findall(r"regenerate: report page (\S+)", out)
    assert len(pages) == 1 and pages[0].startswith(str(tmp_path))
    text = open(pages[0]).read()
    assert "testdata/a.textproto, testdata/b.textproto" in text
    assert "1 winner(s) changed, 1 added, 0 removed" in text
    assert text.count('<figure class="fusion-chart"') == 3


# -- bad input: the page's own output, labels, a per-fusion directory --------

@pytest.mark.parametrize("output", ["input", "base", "link to input",
                                    "link to base"])
def test_report_refuses_an_output_that_is_an_input(tmp_path, capsys,
                                                   output):
    new, base = tmp_path / "new.textproto", tmp_path / "base.textproto"
    codec.dump_results([entry({16: 10.0, 32: 20.0}, 16, "n=1")], new)
    codec.dump_results([entry({16: 10.0, 32: 20.0}, 32, "n=1")], base)
    before = {p: p.read_bytes() for p in (new, base)}
    target = {"input": new, "base": base}.get(output)
    if target is None:
        target = tmp_path / "page.html"
        target.symlink_to(new if output == "link to input" else base)
    assert tool("report", new, "--base", base, "-o", target) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is also an input" in err, err
    assert {p: p.read_bytes() for p in (new, base)} == before


def dollar_entries():
    """Configs whose string value holds `$`, which matplotlib's mathtext
    cannot parse (verify accepts them: any string is a config value)."""
    def make(signature, winner):
        cands = [Candidate(Config({"MODE": "${$"}), 10.0),
                 Candidate(Config({"MODE": "$x$"}), 12.0),
                 Candidate(Config({"MODE": "a$b"}), 0.0, "TIMEOUT", "$")]
        return Entry(CacheKey(DEVICE, "k", "f" * 16, signature),
                     Config({"MODE": winner}), 10.0 if winner == "${$"
                     else 12.0, cands,
                     Provenance("3.9.0", "2.13.0", "12.8",
                                "2026-11-29T10:00:00Z", 0.02, "exhaustive",
                                1.5))
    return [make("n=1", "${$"), make("n=2", "$x$")]


def test_report_draws_dollar_signs_as_plain_text(tmp_path, capsys):
    path = tmp_path / "dollars.textproto"
    codec.dump_results(dollar_entries(), path)
    assert tool("verify", path) == 0
    out = tmp_path / "r.html"
    assert tool("report", path, "-o", out) == 0, capsys.readouterr().err
    text = out.read_text()
    assert text.count("<svg") == 2
    # The labels are the configs' own text, not mathtext.
    svg = text.split("<svg", 1)[1]
    assert "MODE=${$ num_warps=4" in svg and "MODE=$x$ num_warps=4" in svg


def test_dump_target_page_draws_dollar_signs_as_plain_text(
        session_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    sess = session_factory(
        dump_autotune_results_to=str(tmp_path / "autotune_cache.textproto"),
        autotune_verbosity="quiet")
    for e in dollar_entries():
        sess.cache.memory[e.key] = e
    sess.finish()
    text = (tmp_path / "autotune_report.html").read_text()
    assert text.count("<svg") == 2 and "MODE=${$ num_warps=4" in text


def test_regenerate_page_draws_dollar_signs_as_plain_text(tmp_path, capsys,
                                                          monkeypatch):
    regenerate = regenerate_module()
    monkeypatch.setattr(regenerate.tempfile, "tempdir", str(tmp_path))
    path = regenerate.write_report_page(
        [("testdata/d.textproto", [], dollar_entries())])
    assert path is not None, capsys.readouterr()
    text = open(path).read()
    assert text.count("<svg") == 2 and "MODE=${$ num_warps=4" in text


def test_show_skips_and_counts_dangling_corrupt_links(tmp_path, capsys):
    from autotune import keys
    from autotune.cache.tiers import PerFusionDirectory
    directory = tmp_path / "cache"
    bad = entry({16: 10.0, 32: 20.0}, 16, "n=2")
    assert tool("convert", FUSED, str(directory) + "/") == 0
    # A link to a file that is gone: the runtime moves the link aside as
    # NAME.corrupt-*, where it names nothing.
    (directory / keys.file_name(bad.key)).symlink_to(tmp_path / "gone")
    assert PerFusionDirectory(str(directory), "update").lookup(bad.key) \
        is None
    aside = [p for p in directory.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].is_symlink() and \
        not aside[0].exists()
    capsys.readouterr()
    assert tool("show", directory) == 0
    out = capsys.readouterr().out
    assert f"{directory}: 6 entries" in out
    assert "skipped 1 dangling link(s)" in out
    assert tool("show", "--json", directory) == 0
    assert json.loads(capsys.readouterr().out)["dangling_links"] == 1


# -- a changed winner, against the old one measured in the same run ----------

def retuned_pair():
    """The old winner BLOCK=32 stored 13.2 ms (another run); re-measured in
    this run at 145.8 ms, it lost to BLOCK=16 at 96.6 ms: 34% faster in one
    run, +632% against the stored time."""
    old = entry({16: 20000.0, 32: 13200.0}, 32, "n=1")
    new = entry({16: 96600.0, 32: 145800.0}, 16, "n=1")
    return old, new


def test_changed_winner_is_compared_within_one_run():
    old, new = retuned_pair()
    change = summary.winner_change(old, new)
    assert change["same_run"] and round(change["pct"], 1) == -33.7
    assert change["text"] == ("-33.7% in one run (stored 13.200 ms then; "
                              "old 145.800 ms -> new 96.600 ms now)")


def test_changed_winner_not_measured_again_is_labelled_across_runs():
    old, _ = retuned_pair()
    new = entry({16: 96600.0}, 16, "n=1")  # the old winner not a candidate
    change = summary.winner_change(old, new)
    assert not change["same_run"] and round(change["pct"], 1) == 631.8
    assert change["text"].startswith("+631.8% across runs (old 13.200 ms "
                                     "stored then -> new 96.600 ms now")


def test_page_change_column_uses_the_same_run(tmp_path):
    old, new = retuned_pair()
    po, pn = tmp_path / "old.textproto", tmp_path / "new.textproto"
    codec.dump_results([old], po)
    codec.dump_results([new, entry({16: 5.0}, 16, "n=2")], pn)
    codec.dump_results([old, entry({16: 3.0, 32: 2.0}, 32, "n=2")], po)
    out = tmp_path / "r.html"
    assert tool("report", pn, "--base", po, "-o", out) == 0
    changed = out.read_text().split('<table id="changed">')[1].split(
        "</table>")[0]
    rows = changed.split("<tr>")[2:]
    assert "n=1" in rows[0] and '<span class="faster">-33.7%</span>' in \
        rows[0] and "631.8" not in rows[0]
    assert "stored 13.200 ms then; old 145.800 ms -&gt; new 96.600 ms now" \
        in rows[0]
    # n=2: its old winner was not measured again: across runs, and said.
    assert "n=2" in rows[1] and "+150.0%</span> <small>across runs" in \
        rows[1]


def test_page_lists_the_re_tuned_fusions_it_announces(tmp_path):
    """An edited kernel re-tuned to the same winner: the page's headline
    counts it and a table lists it, old and new fingerprint and winner."""
    old = entry({16: 20.0, 32: 13.2}, 32, "n=1")
    new = entry({16: 21.0, 32: 12.9}, 32, "n=1")
    new = new.replace(key=new.key._replace(fingerprint="0123456789abcdef"))
    po, pn = tmp_path / "old.textproto", tmp_path / "new.textproto"
    codec.dump_results([old], po)
    codec.dump_results([new], pn)
    out = tmp_path / "r.html"
    assert tool("report", pn, "--base", po, "-o", out) == 0
    text = out.read_text()
    assert "1 re-tuned (kernel or versions changed), winner(s) unchanged" \
        in text
    table = text.split('<table id="retuned">')[1].split("</table>")[0]
    row = table.split("<tr>")[2]
    assert "<td>k</td><td><code>n=1</code></td>" in row
    assert "kernel changed (fingerprint ffffffffffffffff -&gt; " \
        "0123456789abcdef)" in row
    assert "<td><code>ffffffffffffffff</code></td><td><code>" \
        "0123456789abcdef</code></td>" in row
    assert row.count("<code>BLOCK=32 num_warps=4 num_stages=3</code>") == 2


def regenerate_module():
    from autotune.cli import regenerate
    return regenerate


def test_regenerate_summary_compares_within_one_run(tmp_path, capsys):
    regenerate = regenerate_module()
    old, new = retuned_pair()
    workspace = tmp_path / "ws"
    (workspace / "testdata").mkdir(parents=True)
    codec.dump_results([old], workspace / "testdata" / "a.textproto")
    regenerate.regenerate_cache("testdata/a.textproto",
                                [("//p:a", [new], DEVICE)], str(workspace))
    out = capsys.readouterr().out
    assert "1 entries; 0 added, 0 removed, 1 changed" in out
    assert ("~ k [n=1] on NVIDIA H200/sm_90/sms=132/triton-3.9.0: "
            "BLOCK=32 num_warps=4 num_stages=3 -> BLOCK=16 num_warps=4 "
            "num_stages=3 (-33.7% in one run (stored 13.200 ms then; old "
            "145.800 ms -> new 96.600 ms now))") in out, out


def test_regenerate_summary_says_re_tuned_for_an_edited_kernel(tmp_path,
                                                               capsys):
    regenerate = regenerate_module()
    old = [entry({16: 10.0, 32: 20.0}, 16, f"n={n}") for n in (1, 2, 3)]
    new = [e.replace(key=e.key._replace(fingerprint="e" * 16)) for e in old]
    workspace = tmp_path / "ws"
    (workspace / "testdata").mkdir(parents=True)
    codec.dump_results(old, workspace / "testdata" / "a.textproto")
    regenerate.regenerate_cache("testdata/a.textproto",
                                [("//p:a", new, DEVICE)], str(workspace))
    out = capsys.readouterr().out
    assert ("testdata/a.textproto: 3 entries; 0 added, 0 removed, 0 "
            "changed; 3 re-tuned (kernel changed), winners unchanged") in out
    assert "+ k" not in out and "- k" not in out and "removed:" not in out
    # A fusion no dump produces any more is removed, and said why.
    regenerate.regenerate_cache("testdata/a.textproto",
                                [("//p:a", new[:2], DEVICE)], str(workspace))
    out = capsys.readouterr().out
    assert "2 entries; 0 added, 1 removed, 0 changed" in out
    assert "(1 removed: no dump produced them on this device any more)" \
        in out


def test_fusions_sort_naturally_in_records_summary_and_page(tmp_path,
                                                            capsys):
    entries = [entry({16: 1.0}, 16, f"n_cols={n}") for n in
               (100, 200, 300, 50)]
    order = ["n_cols=50", "n_cols=100", "n_cols=200", "n_cols=300"]
    assert [r["signature"] for r in summary.fusion_records(entries)] == \
        order
    changes = summary.CacheChanges([], entries)
    assert [line.split("[")[1].split("]")[0] for line in changes.lines()] \
        == order
    path = tmp_path / "c.textproto"
    codec.dump_results(entries, path)
    assert tool("show", "--entries", path) == 0
    shown = re.findall(r"\[(n_cols=\d+)\]", capsys.readouterr().out)
    assert shown == order
    out = tmp_path / "r.html"
    assert tool("report", path, "-o", out) == 0
    assert re.findall(r'data-signature="(n_cols=\d+)"', out.read_text()) == \
        order


def _end_line(best, others, caplog):
    class Result:
        seconds = 0.1
        candidates = [best] + others
    Result.best = best
    logger = logging.getLogger("autotune")
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="autotune.tuning"):
            p = progress.TuningProgress("k", "n=40", 2, terminal=False)
            p.finish(Result)
    finally:
        logger.propagate = False
    return [r.getMessage() for r in caplog.records][-1]


def test_end_line_says_why_the_winner_won(caplog):
    # A result no selection explained (a search's own pick): the reason is
    # derived from its candidates (tests/test_selection.py checks it is
    # the selection's own where one ran).
    smaller = Candidate(Config({"BLOCK": 16}, num_warps=1), 10.0)
    faster = Candidate(Config({"BLOCK": 32}), 9.95)
    line = _end_line(smaller, [faster], caplog)
    assert ("runner-up BLOCK=32 num_warps=4 num_stages=3 0.010 ms (-0.5%); "
            "why: tie-break to the smaller config: BLOCK=32 num_warps=4 "
            "num_stages=3 measured 0.5% faster") in line, line
    slower = Candidate(Config({"BLOCK": 16}, num_warps=1), 30.0)
    line = _end_line(faster, [slower], caplog)
    assert "(+201.5%); why: fastest by a clear margin" in line, line


def test_docs_show_the_installed_command():
    """A pip user has `autotune_cache`, not the checkout's script."""
    for name in ("seeing-tuning.md", "cache-tool.md"):
        with open(os.path.join(ROOT, "docs", name)) as f:
            text = f.read()
        blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        commands = [line for block in blocks for line in block.splitlines()
                    if "autotune_cache" in line and
                    not line.startswith("bazel run")]
        assert commands, name
        for line in commands:
            command = line.lstrip("$ ")
            if "autotune_cache" in command.split(" ", 1)[0]:
                assert command.startswith("autotune_cache "), (name, line)
        assert "`python3 tools/autotune_cache.py show" not in text, name


def test_report_names_the_base_by_its_label(tmp_path):
    new = tmp_path / "new.textproto"
    codec.dump_results([entry({16: 10.0, 32: 20.0}, 16, "n=1")], new)
    base = codec.encode([entry({16: 10.0, 32: 20.0}, 32, "n=1")],
                        "b.textproto")
    out = tmp_path / "r.html"
    # bash's <(git show HEAD:...) is a pipe named /dev/fd/N.
    read_end, write_end = os.pipe()
    os.write(write_end, base)
    os.close(write_end)
    try:
        assert tool("report", new, "--base", f"/dev/fd/{read_end}",
                    "-o", out) == 0
    finally:
        os.close(read_end)
    text = out.read_text()
    assert f"compared with /dev/fd/{read_end}" not in text
    assert "compared with the --base input (a pipe: name it with " \
        "--base_label)" in text
    based = tmp_path / "base.textproto"
    based.write_bytes(base)
    assert tool("report", new, "--base", based, "--base_label",
                "HEAD:testdata/x.textproto", "-o", out) == 0
    assert "compared with HEAD:testdata/x.textproto" in out.read_text()


def test_regenerate_keeps_one_page_next_to_the_bazel_outputs(tmp_path,
                                                             capsys,
                                                             monkeypatch):
    regenerate = regenerate_module()
    monkeypatch.setattr(regenerate.tempfile, "tempdir", str(tmp_path))
    pages = [("testdata/a.textproto", [],
              [entry({16: 10.0, 32: 20.0}, 16, "n=1")])]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # No bazel-testlogs yet: one file per workspace in the temp directory,
    # replaced by the next run's.
    first = regenerate.write_report_page(pages, str(workspace))
    second = regenerate.write_report_page(pages, str(workspace))
    assert first == second and os.path.dirname(first) == str(tmp_path)
    assert [p.name for p in tmp_path.iterdir()
            if p.name.startswith("autotune_regenerate")] == \
        [os.path.basename(first)]
    # With Bazel's outputs: next to them, and said so.
    testlogs = tmp_path / "out" / "testlogs"
    testlogs.mkdir(parents=True)
    (workspace / "bazel-testlogs").symlink_to(testlogs)
    capsys.readouterr()
    path = regenerate.write_report_page(pages, str(workspace))
    assert path == str(workspace / "bazel-testlogs" /
                       "autotune_regenerate_report.html")
    assert (testlogs / "autotune_regenerate_report.html").exists()
    assert f"regenerate: report page {path}" in capsys.readouterr().out


def test_dump_target_log_names_the_page_under_bazel_testlogs(
        session_factory, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))
    monkeypatch.setenv("TEST_TARGET", "//examples:kernels_test_autotune_dump")
    sess = session_factory(
        dump_autotune_results_to=str(tmp_path / "autotune_cache.textproto"),
        autotune_verbosity="quiet")
    e = entry({16: 10.0, 32: 20.0}, 16, "n=1")
    sess.cache.memory[e.key] = e
    logger = logging.getLogger("autotune")
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level(logging.INFO, logger="autotune"):
        sess.finish()
    lines = [r.getMessage() for r in caplog.records
             if "report page" in r.getMessage()]
    assert lines == [
        "autotune: report page bazel-testlogs/examples/"
        "kernels_test_autotune_dump/test.outputs/autotune_report.html once "
        "the test is done (in bazel-testlogs/examples/"
        "kernels_test_autotune_dump/test.outputs/outputs.zip before Bazel "
        f"8; written to {tmp_path / 'autotune_report.html'})"], lines


def test_verify_help_documents_its_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        tool("verify", "--help")
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "PATH results files (text or binary), per-fusion cache " \
        "directories or remote namespaces" in out
    assert "--kernel_module MODULE a Python module" in out
    assert "reported stale; may be repeated" in out


def _of_kernel(e, fingerprint):
    return e.replace(key=e.key._replace(fingerprint=fingerprint))


def test_cache_changes_keep_kernels_that_share_a_name_apart():
    # Two functions named k (two modules), one signature: two entries,
    # told apart by their fingerprints.
    a = _of_kernel(entry({16: 1.0, 32: 2.0}, 16), "a" * 16)
    b = _of_kernel(entry({16: 2.0, 32: 1.0}, 32), "b" * 16)
    other = entry({16: 1.0}, 16, "n=2")
    added = summary.CacheChanges([], [a, b, other])
    assert added.headline() == "3 added, 0 removed, 0 changed"
    assert sorted(added.lines()) == [
        f"+ k [n=1] on {DEVICE} (kernel fingerprint {'a' * 16}): "
        "BLOCK=16 num_warps=4 num_stages=3",
        f"+ k [n=1] on {DEVICE} (kernel fingerprint {'b' * 16}): "
        "BLOCK=32 num_warps=4 num_stages=3",
        f"+ k [n=2] on {DEVICE}: BLOCK=16 num_warps=4 num_stages=3"]
    # One of them edited (a new fingerprint, the same winner): re-tuned;
    # the other unchanged; and one of them gone: removed.
    edited = _of_kernel(a, "c" * 16)
    assert summary.CacheChanges([a, b], [edited, b]).headline() == \
        "0 added, 0 removed, 0 changed; 1 re-tuned (kernel changed), " \
        "winner unchanged"
    gone = summary.CacheChanges([a, b], [a])
    assert gone.headline() == "0 added, 1 removed, 0 changed"
    assert gone.lines() == [f"- k [n=1] on {DEVICE} (kernel fingerprint "
                            f"{'b' * 16}): BLOCK=32 num_warps=4 num_stages=3"]
    # An edited kernel alone is still the same fusion, with a new winner.
    flipped = _of_kernel(entry({16: 2.0, 32: 1.0}, 32), "c" * 16)
    assert summary.CacheChanges([a], [flipped]).headline() == \
        "0 added, 0 removed, 1 changed"


def test_page_shows_each_devices_coverage_as_show_coverage_does():
    h100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"
    entries = [entry({16: 10.0, 32: 20.0}, 16, "n=1"),
               entry({16: 10.0, 32: 20.0}, 16, "n=2"),
               entry({16: 12.0, 32: 20.0}, 16, "n=1", device=h100)]
    html = page.build_page([("c.textproto", entries)])
    table = html.split("<h2>Coverage by device</h2>", 1)[1].split(
        "</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">(.*?)</td>"
                      r"<td>(.*?)</td><td>(.*?)</td></tr>", table)
    assert rows == [
        (h100, "1/2", "<code>k [n=2]</code>", "2026-11-29T10:00:00Z"),
        (DEVICE, "2/2", "none", "2026-11-29T10:00:00Z")]
    shown = cache_show.coverage(entries)
    assert [(r["device"], f"{r['entries']}/{r['fusions']}", r["missing"])
            for r in shown] == [(h100, "1/2", ["k [n=2]"]),
                                (DEVICE, "2/2", [])]


def test_natural_order_of_mixed_text_and_numbers():
    # Numbers by value, a digit run before text at the same place, a
    # shorter text first; keys never compare a number with a text.
    names = ["n=100", "n=50", "n=5a", "n=5", "a", "1", "", "ab", "a1",
             "x:float32,n=8", "x:float16,n=16", "1x", "10"]
    assert sorted(names, key=summary.natural_key) == [
        "", "1", "1x", "10", "a", "a1", "ab", "n=5", "n=5a", "n=50",
        "n=100", "x:float16,n=16", "x:float32,n=8"]
