"""Kernel names, config values and failure details read from a cache file
(which may come from anyone) never reach a terminal as control characters:
`autotune_cache show`, the tuning progress lines and the summaries print
them escaped (autotune.log.printable)."""
import logging
import types

import pytest

from autotune import Config, codec
from autotune.cli import cache_tool
from autotune.log import printable
from autotune.measure import backends, selection
from autotune.records import CacheKey, Candidate, Entry, Provenance
from autotune.report import summary
from autotune.runtime import progress

# A title change (OSC 0), a screen clear, red text, a bell, a C1 CSI, a
# right-to-left override.
NASTY = "\x1b]0;owned\x07\x1b[2J\x1b[31m\x9b1m\u202e"
ESCAPED = "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\x9b1m\\u202e"


def _assert_clean(text):
    for char in "\x1b\x07\x9b\u202e":
        assert char not in text, repr(text)


def test_printable_escapes_controls_only():
    assert printable(NASTY) == ESCAPED
    assert printable("BLOCK=64 ACT=\"gelu\" é ü 𝔸 tl.float16") == \
        "BLOCK=64 ACT=\"gelu\" é ü 𝔸 tl.float16"
    assert printable("a\nb\tc\x00") == "a\\x0ab\\x09c\\x00"
    assert printable("\U000e0001") == "\\U000e0001"


def _nasty_cache(tmp_path):
    fast = Config({"ACT": "relu" + NASTY, "BLOCK": 32}, num_warps=4)
    slow = Config({"ACT": "gelu", "BLOCK": 16}, num_warps=2)
    broken = Config({"ACT": "gelu", "BLOCK": 8}, num_warps=2)
    key = CacheKey("cuda/x" + NASTY, "kern" + NASTY, "0123456789abcdef",
                   "n=40" + NASTY)
    entry = Entry(key, slow, 10.0, [
        Candidate(slow, 10.0), Candidate(fast, 9.9),
        Candidate(broken, 0.0, "RUNTIME_ERROR", "boom" + NASTY)],
        Provenance(triton_version="3.9.0" + NASTY, tuner="exhaustive"))
    path = tmp_path / "nasty.textproto"
    codec.dump_results([entry], str(path))
    return path


@pytest.mark.parametrize("flags", [[], ["--entries"], ["--candidates"]])
def test_show_prints_names_and_configs_from_a_cache_escaped(tmp_path, capsys,
                                                            flags):
    path = _nasty_cache(tmp_path)
    assert cache_tool.main(["show", str(path), *flags]) == 0
    out = capsys.readouterr().out
    _assert_clean(out)
    assert "kern" + ESCAPED in out, out
    if flags:
        assert "relu" + ESCAPED in out or "n=40" + ESCAPED in out, out
    if flags == ["--candidates"]:
        assert "boom" + ESCAPED[:20] in out, out  # the detail is cut at 60
        assert "incumbent kept" in out or "kept ahead of" in out, out


def test_show_json_stays_raw_json(tmp_path, capsys):
    """JSON output is data, not text for a terminal: json.dumps already
    writes control characters as \\u escapes, and a reader gets the values
    back unchanged."""
    import json
    path = _nasty_cache(tmp_path)
    assert cache_tool.main(["show", str(path), "--entries", "--json"]) == 0
    out = capsys.readouterr().out
    _assert_clean(out)
    assert json.loads(out)["list"][0]["kernel"] == "kern" + NASTY


def test_the_winner_reason_names_configs_escaped(tmp_path):
    entry = codec.load_results(str(_nasty_cache(tmp_path)))[0]
    kind, text = summary.winner_reason(entry)
    assert kind in (selection.INCUMBENT_KEPT, selection.TIE), (kind, text)
    _assert_clean(text)
    assert "relu" + ESCAPED in text


def _progress_lines(capsys, verbosity="verbose", terminal=False):
    config = Config({"ACT": "relu" + NASTY, "BLOCK": 32})
    failing = Config({"ACT": "gelu", "BLOCK": 8})
    prog = progress.TuningProgress("kern" + NASTY, "n=40" + NASTY, 2,
                                   verbosity=verbosity, terminal=terminal)
    prog.start()
    ok = Candidate(config, 12.0)
    prog.measured(ok, backends.Timing([12.0]))
    bad = Candidate(failing, 0.0, "RUNTIME_ERROR", "boom" + NASTY)
    prog.measured(bad)
    prog.finish(selection.TuneResult([ok, bad], ok, 0.1, 0.1, "exhaustive"))
    prog.failed(RuntimeError("gone" + NASTY))
    return capsys.readouterr().err


def test_progress_lines_print_names_configs_and_details_escaped(capsys):
    logging.getLogger("autotune").setLevel(logging.INFO)
    err = _progress_lines(capsys)
    _assert_clean(err)
    assert "tuning kern" + ESCAPED in err and "[n=40" + ESCAPED in err
    assert "ACT=relu" + ESCAPED in err and "boom" + ESCAPED in err
    assert "winner ACT=relu" + ESCAPED in err and "gone" + ESCAPED in err


def test_the_updating_progress_line_escapes_too(capsys):
    logging.getLogger("autotune").setLevel(logging.INFO)
    err = _progress_lines(capsys, verbosity="normal", terminal=True)
    # Only the line's own erase sequence drives the terminal.
    _assert_clean(err.replace("\r\x1b[K", ""))
    assert "ACT=relu" + ESCAPED in err


def test_the_pytest_summary_prints_cache_values_escaped():
    from autotune import pytest_terminal
    from autotune.pytest_result import PluginResult
    lines = []
    reporter = types.SimpleNamespace(
        write_sep=lambda *a, **k: None,
        write_line=lambda text, **markup: lines.append(text))
    config = types.SimpleNamespace(
        invocation_params=types.SimpleNamespace(dir="/"))
    side = {"source": "a.textproto", "best": "ACT=relu" + NASTY,
            "run_time_us": 1.0}
    result = PluginResult(
        hits=0, remote_hits=0, tuned=0, misses=1,
        candidate_benchmarks=0, tuning_seconds=0.0,
        saved_seconds=0.0, mode="load", retune=False, cache="/c.textproto",
        missing=[{"status": "missing", "kernel": "kern" + NASTY,
                  "signature": "n=40", "device": "cpu",
                  "reason": "none"}],
        stale=[], bypassing=[], errors=[],
        conflicts=[{"kernel": "kern" + NASTY, "signature": "n=40",
                    "device": "cpu", "first": side, "second": side,
                    "kept": "first"}])
    pytest_terminal.write_summary(reporter, result, config)
    text = "\n".join(lines)
    _assert_clean(text)
    assert "conflict: kern" + ESCAPED in text and \
        "ACT=relu" + ESCAPED in text, text


def _other_winner(path, tmp_path):
    """A copy of the nasty cache whose one entry has another winner."""
    [entry] = codec.load_results(str(path), parse_all=True)
    fast = [c.config for c in entry.candidates if c.ok and
            c.config != entry.best][0]
    other = tmp_path / "other.textproto"
    codec.dump_results([entry.replace(best=fast, run_time_us=9.9)],
                       str(other))
    return other


def test_diff_prune_and_merge_print_cache_values_escaped(tmp_path, capsys):
    path = _nasty_cache(tmp_path)
    other = _other_winner(path, tmp_path)
    empty = tmp_path / "empty.textproto"
    codec.dump_results([], str(empty))
    for argv in (["diff", empty, path], ["diff", path, other],
                 ["prune", "--dry-run", "--keep_device", "cpu", path],
                 ["merge", path, other, "-o", tmp_path / "m.textproto"]):
        cache_tool.main([str(a) for a in argv])
        captured = capsys.readouterr()
        _assert_clean(captured.out + captured.err)
        assert "kern" + ESCAPED in captured.out + captured.err, argv


def test_the_change_summary_prints_cache_values_escaped(tmp_path):
    # What regenerate and the pytest update print, by fusion.
    path = _nasty_cache(tmp_path)
    old = codec.load_results(str(path), parse_all=True)
    new = codec.load_results(str(_other_winner(path, tmp_path)),
                             parse_all=True)
    for changes in (summary.CacheChanges([], old),
                    summary.CacheChanges(old, new)):
        text = "\n".join(changes.lines())
        _assert_clean(text)
        assert "kern" + ESCAPED in text


def test_the_duplicate_key_error_names_the_key_escaped(tmp_path, capsys):
    [entry] = codec.load_results(str(_nasty_cache(tmp_path)),
                                 parse_all=True)
    twice = tmp_path / "twice.textproto"
    twice.write_bytes(codec.encode([entry, entry], "x.textproto"))
    assert cache_tool.main(["show", str(twice)]) == 2
    err = capsys.readouterr().err
    _assert_clean(err)
    assert "duplicate key" in err and "kern" + ESCAPED in err, err


def test_the_load_line_prints_the_files_devices_escaped(tmp_path, capsys):
    import autotune
    logging.getLogger("autotune").setLevel(logging.INFO)
    autotune.configure(load_autotune_results_from=[str(_nasty_cache(
        tmp_path))])
    try:
        err = capsys.readouterr().err
    finally:
        autotune.runtime.session.set_current(None)
    assert "autotune: loaded" in err, err
    _assert_clean(err)
    assert "cuda/x" + ESCAPED in err


def test_the_tuning_warnings_print_the_kernel_name_escaped():
    from autotune.runtime import tuning
    warned = []
    opts = tuning.TuningOptions("kern" + NASTY,
                                warn_once=lambda what, text:
                                warned.append(text))
    run = tuning.Tuning(None, None, None, opts)
    config = Config({"ACT": "relu" + NASTY, "BLOCK": 32})
    evaluator = types.SimpleNamespace(reference_config=config)
    wrong = Candidate(Config({"BLOCK": 8}), 0.0, "WRONG_RESULT",
                      "y differs" + NASTY)
    run._report(evaluator, selection.TuneResult(
        [Candidate(config, 1.0), wrong], None, 0.1, 0.1, "exhaustive"))
    assert len(warned) == 2
    for text in warned:
        _assert_clean(text)
        assert "kern" + ESCAPED in text
