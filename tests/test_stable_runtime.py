"""Incumbents, dumps that never drop entries, repeated flags and file modes,
on real kernels in the interpreter."""
import os
import stat
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

import autotune
from autotune import flags
from autotune.cli import cache_tool
from autotune import codec

import tests_support


@triton.jit
def spin_kernel(x, y, n, BLOCK: tl.constexpr, REPEAT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    acc = tl.load(x + offs, mask=m)
    for _ in range(REPEAT):
        acc = acc * 1.0 + 0.0
    tl.store(y + offs, acc + 1.0, mask=m)


# The interpreter ignores num_warps: FAST_2 and FAST_4 truly tie; SLOW does
# 64 times the work.
FAST_2 = autotune.Config({"BLOCK": 64, "REPEAT": 1}, num_warps=2)
FAST_4 = autotune.Config({"BLOCK": 64, "REPEAT": 1}, num_warps=4)
SLOW = autotune.Config({"BLOCK": 64, "REPEAT": 64}, num_warps=2)


def run_spin(n=64, configs=(FAST_2, FAST_4, SLOW)):
    tuned = autotune.tune(spin_kernel, list(configs), key=["n"])
    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty_like(x)
    tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    assert torch.equal(y, x + 1.0)
    return autotune.session()


def tuned_entry(session_factory, tmp_path, name="fresh.textproto"):
    path = tmp_path / name
    sess = session_factory(dump_autotune_results_to=str(path))
    run_spin()
    sess.finish()
    (entry,) = codec.load_results(path)
    return entry


def entry_block(text, kernel="spin_kernel"):
    start = text.index(f'kernel: "{kernel}"')
    return text[text.rindex("entries {", 0, start):text.index("\n}\n", start)]


# -- incumbents --------------------------------------------------------------

def test_tied_incumbent_is_kept_and_written_back_verbatim(session_factory,
                                                          tmp_path):
    entry = tuned_entry(session_factory, tmp_path)
    assert entry.best in (FAST_2, FAST_4)
    # The incumbent is the config a fresh tune would not pick: the larger
    # of two that tie.
    other = FAST_4 if entry.best == FAST_2 else FAST_2
    # Without compile requests (a cache written before they were
    # recorded): the first run that keeps it records its winner's launch,
    # once; from then on a run that changes nothing writes the file back
    # byte for byte.
    old = entry.replace(best=other, compile_requests=())
    first = tmp_path / "incumbents.textproto"
    codec.dump_results([old], first)
    for incumbents, dump in ((first, tmp_path / "recorded.textproto"),
                             (tmp_path / "recorded.textproto",
                              tmp_path / "dump.textproto")):
        sess = session_factory(autotune_incumbents_from=[str(incumbents)],
                               autotune_retune=True,
                               dump_autotune_results_to=str(dump))
        run_spin()
        assert sess.stats.tuned == 1 and sess.stats.incumbents_kept == 1
        report = sess.report()["fusions"][0]
        assert report["incumbent"] == "kept"
        sess.finish()
    (recorded,) = codec.load_results(tmp_path / "recorded.textproto")
    assert recorded.best == other and recorded.compile_requests
    assert recorded.replace(compile_requests=()) == old
    assert dump.read_bytes() == (tmp_path / "recorded.textproto").read_bytes()


def test_clearly_faster_challenger_replaces_the_incumbent(session_factory,
                                                          tmp_path):
    entry = tuned_entry(session_factory, tmp_path)
    incumbents = tmp_path / "incumbents.textproto"
    codec.dump_results([entry.replace(best=SLOW)], incumbents)
    dump = tmp_path / "dump.textproto"
    sess = session_factory(autotune_incumbents_from=str(incumbents),
                           autotune_retune=True,
                           dump_autotune_results_to=str(dump))
    run_spin()
    assert sess.stats.incumbents_replaced == 1
    sess.finish()
    (new,) = codec.load_results(dump)
    assert new.best in (FAST_2, FAST_4)


def test_incremental_hit_is_not_measured_and_dumped_verbatim(
        session_factory, tmp_path):
    # The default (no --autotune_retune): an incumbent whose key matches is
    # a hit, even one a fresh tune would not pick.
    entry = tuned_entry(session_factory, tmp_path)
    incumbents = tmp_path / "incumbents.textproto"
    codec.dump_results([entry.replace(best=SLOW)], incumbents)
    dump = tmp_path / "dump.textproto"
    sess = session_factory(autotune_incumbents_from=[str(incumbents)],
                           dump_autotune_results_to=str(dump))
    run_spin()
    assert sess.stats.hits == 1 and sess.stats.tuned == 0
    assert sess.stats.candidate_benchmarks == 0
    sess.finish()
    assert dump.read_bytes() == incumbents.read_bytes()


def test_changed_fingerprint_same_winner_changes_only_measured_lines(
        session_factory, tmp_path):
    entry = tuned_entry(session_factory, tmp_path)
    stale = entry.replace(key=entry.key._replace(
        fingerprint="0123456789abcdef"))
    incumbents = tmp_path / "incumbents.textproto"
    codec.dump_results([stale], incumbents)
    dump = tmp_path / "dump.textproto"
    sess = session_factory(autotune_incumbents_from=[str(incumbents)],
                           dump_autotune_results_to=str(dump))
    run_spin()
    assert sess.stats.incumbents_kept == 1
    sess.finish()
    old_lines = entry_block(incumbents.read_text()).splitlines()
    new_lines = entry_block(dump.read_text()).splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert changed and changed[0][0].strip().startswith("fingerprint:")
    measured = ("fingerprint:", "run_time_us:", "candidates {",
                "provenance {")
    for before, after in changed:
        assert before.strip().startswith(measured), before
        assert after.strip().split()[0] == before.strip().split()[0]
    (new,) = codec.load_results(dump)
    assert new.best == entry.best and new.key == entry.key


def test_missing_incumbents_file_is_ignored(session_factory, tmp_path,
                                            capsys):
    missing = tmp_path / "not_yet.textproto"
    sess = session_factory(autotune_incumbents_from=[str(missing)])
    assert "does not exist yet (a first run)" in capsys.readouterr().err
    run_spin()
    assert sess.stats.tuned == 1 and sess.stats.incumbents_kept == 0


def test_corrupt_incumbents_file_is_one_line_naming_it(session_factory,
                                                       tmp_path):
    bad = tmp_path / "bad.textproto"
    bad.write_text("entries { kernel: \n")
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(autotune_incumbents_from=[str(bad)])
    message = str(err.value)
    assert str(bad) in message and "incumbents" in message
    assert "\n" not in message


def test_incumbents_flag_parses_and_accumulates():
    opts = flags.parse("--autotune_incumbents_from=a.textproto,b.pb "
                       "--autotune_incumbents_from=c.textproto", env={})
    assert opts.autotune_incumbents_from == ["a.textproto", "b.pb",
                                             "c.textproto"]
    opts = flags.parse("--autotune_incumbents_from=TEST_WORKSPACE/t/c.pb",
                       env={"TEST_SRCDIR": "/r", "TEST_WORKSPACE": "_main"})
    assert opts.autotune_incumbents_from == ["/r/_main/t/c.pb"]


# -- repeated flags ----------------------------------------------------------

def test_repeated_list_flag_accumulates():
    opts = flags.parse("--load_autotune_results_from=A.pb "
                       "--load_autotune_results_from=B.pb,C.pb", env={})
    assert opts.load_autotune_results_from == ["A.pb", "B.pb", "C.pb"]


@pytest.mark.parametrize("text,name", [
    ("--dump_autotune_results_to=a.pb --dump_autotune_results_to=b.pb",
     "dump_autotune_results_to"),
    ("--autotune_backend=interpreter --autotune_backend=interpreter",
     "autotune_backend"),
    ("--require_complete_autotune_results "
     "--norequire_complete_autotune_results",
     "require_complete_autotune_results")])
def test_repeated_single_value_flag_is_an_error_naming_it(text, name):
    with pytest.raises(flags.AutotuneFlagsError) as err:
        flags.parse(text, env={})
    assert f"--{name} is given 2 times" in str(err.value)


# -- dumps never drop entries --------------------------------------------------

def foreign_entries(n):
    return [tests_support.entry_for(
        autotune.Config({"BLOCK": 16}), signature=f"n={i};dtypes=x:float32",
        device="cpu/triton-interpreter/triton-3.9.0") for i in range(n)]


def test_load_and_dump_the_same_file_keeps_untouched_entries(
        session_factory, tmp_path):
    entry = tuned_entry(session_factory, tmp_path)
    cache = tmp_path / "cache.textproto"
    codec.dump_results([entry] + foreign_entries(3), cache)
    before = cache.read_bytes()
    sess = session_factory(load_autotune_results_from=[str(cache)],
                           dump_autotune_results_to=str(cache))
    run_spin()
    assert sess.stats.hits == 1
    sess.finish()
    assert cache.read_bytes() == before


def test_dump_replaces_superseded_entries_and_keeps_the_rest(
        session_factory, tmp_path, capsys):
    entry = tuned_entry(session_factory, tmp_path)
    stale = entry.replace(key=entry.key._replace(
        fingerprint="0123456789abcdef"))
    cache = tmp_path / "cache.textproto"
    codec.dump_results([stale] + foreign_entries(2), cache)
    sess = session_factory(dump_autotune_results_to=str(cache))
    run_spin()
    sess.finish()
    assert "(1 used by this run, 2 kept from the file)" in \
        capsys.readouterr().err
    entries = codec.load_results(cache)
    assert len(entries) == 3
    assert entry.key in {e.key for e in entries}
    assert stale.key not in {e.key for e in entries}


WORKER = r"""
import sys, torch, triton
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
import autotune
import test_stable_runtime as t
autotune.configure(dump_autotune_results_to=sys.argv[2])
t.run_spin()
if sys.argv[3] == "raise":
    raise RuntimeError("a test failed halfway")
sys.exit(1)
"""


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_failed_process_does_not_shrink_a_complete_dump(tmp_path, how):
    cache = tmp_path / "cache.textproto"
    codec.dump_results(foreign_entries(4), cache)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", WORKER, root, str(cache),
                           how], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    entries = codec.load_results(cache)
    assert len(entries) == 5  # the four it had, and the fusion this run tuned
    assert {e.key for e in foreign_entries(4)} <= {e.key for e in entries}


def test_unreadable_existing_dump_is_refused_at_start_and_left_alone(
        session_factory, tmp_path):
    cache = tmp_path / "cache.textproto"
    cache.write_text("garbage {\n")
    with pytest.raises(autotune.AutotuneError) as err:
        session_factory(dump_autotune_results_to=str(cache))
    assert str(cache) in str(err.value)
    assert cache.read_text() == "garbage {\n"


# -- file modes --------------------------------------------------------------

@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)
    old = os.umask(0o022)
    os.umask(old)
    yield set_mask
    os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_written_files_get_the_umask(umask, session_factory, tmp_path, mask):
    umask(mask)
    expected = 0o666 & ~mask
    direct = tmp_path / "direct.pb"
    codec.atomic_write(direct, b"")
    assert mode(direct) == expected
    dump = tmp_path / "dump.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump),
                           autotune_report_to=str(tmp_path / "r.json"))
    run_spin()
    sess.finish()
    assert mode(dump) == expected
    assert mode(tmp_path / "r.json") == expected
    merged = tmp_path / "merged.textproto"
    assert cache_tool.main(["merge", str(dump), "-o", str(merged)]) == 0
    assert mode(merged) == expected
