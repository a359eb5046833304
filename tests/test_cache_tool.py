import json
import os
import subprocess
import sys

import pytest

from autotune import keys
from autotune import codec
from autotune.records import Candidate, Config, Provenance

from test_results_io import make_entries
from tests_support import (HOSTILE_URLS, assert_no_secret, good_file,
                           malformed_cache, no_space, one_line_error,
                           tiny_tmpfs, tool)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def caches(tmp_path):
    a = make_entries(6, seed=1)
    b = [e for e in make_entries(6, seed=1)[1:]]  # drops entry 0
    b[0] = b[0].replace(best=Config({"BLOCK_M": 128}, num_stages=2),
                        run_time_us=5.0)
    b.append(make_entries(7, seed=1)[6])  # adds entry 6
    pa, pb = tmp_path / "a.textproto", tmp_path / "b.pb"
    codec.dump_results(a, pa)
    codec.dump_results(b, pb)
    return pa, pb


def test_show_json(caches, capsys):
    pa, _ = caches
    assert tool("show", pa, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"] == 6
    assert info["by_kernel"] == {"matmul": 6}
    assert info["by_triton_version"] == {"3.9.0": 6}
    assert info["oldest"] == info["newest"] == "2026-11-29T10:00:00Z"
    assert info["bytes"] == os.path.getsize(pa)


def test_diff_reports_added_removed_changed(caches, capsys):
    pa, pb = caches
    assert tool("diff", pa, pa) == 0
    capsys.readouterr()
    assert tool("diff", pa, pb, "--json") == 1
    diff = json.loads(capsys.readouterr().out)
    assert len(diff["added"]) == 1 and len(diff["removed"]) == 1
    assert len(diff["changed"]) == 1
    change = diff["changed"][0]
    assert change["new"] == "BLOCK_M=128 num_warps=4 num_stages=2"
    assert change["run_time_change_pct"] is not None
    assert tool("diff", pa, pb) == 1
    out = capsys.readouterr().out
    # The changed winner against the old one, measured in the same run
    # (the new entry holds it as a candidate).
    assert "1 added, 1 removed, 1 changed" in out and "% in one run" in out


def _kernel_edit(tmp_path, winner=None):
    """testdata/xla_style.textproto and a copy whose kernel was edited (a
    new fingerprint), re-tuned to `winner` (default: the same one)."""
    [entry] = codec.load_results(
        os.path.join(ROOT, "testdata", "xla_style.textproto"),
        parse_all=True)
    edited = entry.replace(key=entry.key._replace(
        fingerprint="0123456789abcdef"))
    if winner is not None:
        edited = edited.replace(best=winner, run_time_us=6997.213)
    old, new = tmp_path / "old.textproto", tmp_path / "new.textproto"
    codec.dump_results([entry], old)
    codec.dump_results([edited], new)
    return entry, old, new


def test_diff_reads_a_kernel_edit_as_a_re_tune(tmp_path, capsys):
    entry, old, new = _kernel_edit(tmp_path)
    name = (f"{entry.key.kernel} [{entry.key.signature}] on "
            f"{entry.key.device}")
    assert tool("diff", old, new) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{old} -> {new}: 0 added, 0 removed, 0 changed; 1 re-tuned "
        "(kernel changed), winner unchanged",
        f"  = {name}: ROWS=4 num_warps=2 num_stages=2 (re-tuned: kernel "
        "changed (fingerprint 5d75f7cd8a91d167 -> 0123456789abcdef), "
        "winner unchanged)"]
    assert tool("diff", old, new, "--json") == 1
    diff = json.loads(capsys.readouterr().out)
    assert diff["added"] == diff["removed"] == diff["changed"] == []
    [retuned] = diff["retuned"]
    assert retuned == {
        "device": entry.key.device, "kernel": "softmax_kernel",
        "signature": entry.key.signature,
        "fingerprint": "0123456789abcdef", "key_version": 1,
        "old_device": entry.key.device,
        "old_fingerprint": "5d75f7cd8a91d167", "old_key_version": 1,
        "best": "ROWS=4 num_warps=2 num_stages=2",
        "old_run_time_us": 7151.735, "new_run_time_us": 7151.735,
        "retune_reason": "kernel changed",
        "key_change": "kernel changed (fingerprint 5d75f7cd8a91d167 -> "
                      "0123456789abcdef)"}


def test_diff_shows_a_kernel_edit_that_changed_the_winner(tmp_path, capsys):
    faster = Config({"ROWS": 4}, num_warps=4, num_stages=2)
    entry, old, new = _kernel_edit(tmp_path, winner=faster)
    assert tool("diff", old, new) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 0 added, 0 removed, 1 changed"), lines
    assert lines[1].startswith(
        "  ~ softmax_kernel [n_rows=4,n_cols=48;dtypes=x:float32,y:float32;"
        "BLOCK_COLS=64] on cpu/triton-interpreter/triton-3.9.0: ROWS=4 "
        "num_warps=2 num_stages=2 -> ROWS=4 num_warps=4 num_stages=2 ("), \
        lines
    assert lines[1].endswith(
        "; re-tuned: kernel changed (fingerprint 5d75f7cd8a91d167 -> "
        "0123456789abcdef)"), lines
    assert len(lines) == 2
    assert tool("diff", old, new, "--json") == 1
    [changed] = json.loads(capsys.readouterr().out)["changed"]
    assert (changed["old_fingerprint"], changed["fingerprint"]) == (
        "5d75f7cd8a91d167", "0123456789abcdef")
    assert (changed["old"], changed["new"]) == (
        "ROWS=4 num_warps=2 num_stages=2", "ROWS=4 num_warps=4 num_stages=2")
    # The old winner is among the new entry's candidates: compared in one
    # run, 7151.735 us against 6997.213 us.
    assert changed["same_run"] is True
    assert changed["run_time_change_pct"] == -2.16


def test_merge_conflict_policies(caches, tmp_path, capsys):
    pa, pb = caches
    out = tmp_path / "merged.textproto"
    assert tool("merge", pa, pb, "-o", out) == 1
    err = capsys.readouterr().err
    assert "conflict:" in err and str(pa) in err and str(pb) in err
    assert not out.exists()
    assert tool("merge", pa, pb, "-o", out, "--policy", "prefer-first") == 0
    merged = {e.key: e for e in codec.load_results(out)}
    assert len(merged) == 7
    # prefer-first: every key of the first input keeps its config.
    first = {e.key: e for e in codec.load_results(pa)}
    second = {e.key: e for e in codec.load_results(pb)}
    assert any(first[k].best != second[k].best
               for k in first.keys() & second.keys())
    assert all(merged[k].best == first[k].best for k in first)
    assert tool("merge", pa, pb, "-o", out, "--policy", "prefer-faster") == 0
    assert any(e.best == Config({"BLOCK_M": 128}, num_stages=2)
               for e in codec.load_results(out))


def test_merge_prefer_newer(tmp_path):
    old = make_entries(1)
    new = [old[0].replace(best=Config({"X": 1}), provenance=Provenance(
        timestamp="2027-01-01T00:00:00Z"))]
    pa, pb = tmp_path / "old.pb", tmp_path / "new.pb"
    codec.dump_results(old, pa)
    codec.dump_results(new, pb)
    out = tmp_path / "out.pb"
    assert tool("merge", pb, pa, "-o", out, "--policy", "prefer-newer") == 0
    assert codec.load_results(out)[0].best == Config({"X": 1})


def test_prune_by_device_and_dry_run(tmp_path, capsys):
    entries = make_entries(3) + make_entries(2, device="cpu/other")
    entries[0] = entries[0].replace(provenance=entries[0].provenance._replace(
        timestamp="2020-01-01T00:00:00Z"))
    src = tmp_path / "all.textproto"
    codec.dump_results(entries, src)
    before = src.read_bytes()
    out = tmp_path / "pruned.textproto"
    assert tool("prune", src, "--device", "cpu/other", "--dry-run") == 0
    assert "would drop" in capsys.readouterr().out and not out.exists()
    assert tool("prune", src, "-o", out, "--device", "cpu/other") == 0
    assert len(codec.load_results(out)) == 3
    assert tool("prune", src, "-o", out, "--keep_device", "cpu/other") == 0
    assert len(codec.load_results(out)) == 2
    assert tool("prune", src, "-o", out, "--older_than", "365d") == 0
    assert len(codec.load_results(out)) == 4  # the 2020 entry went
    assert src.read_bytes() == before


def test_prune_and_verify_stale_kernels(tmp_path, capsys):
    import tiny_kernels  # noqa: F401  (defines axpb_kernel)
    tuned = tiny_kernels.make_tuner()
    fresh = make_entries(1)[0]
    # Tuned under the running Triton: no version drift to report.
    import triton
    fresh = fresh.replace(provenance=fresh.provenance._replace(
        triton_version=triton.__version__))
    # A winner the decoration offers (one it does not is stale too).
    fresh = fresh.replace(key=fresh.key._replace(
        kernel=tuned.name, fingerprint=tuned.fingerprint),
        best=tiny_kernels.GOOD[0], candidates=[
            Candidate(c, 1.0) for c in tiny_kernels.GOOD + [
                tiny_kernels.WRONG, tiny_kernels.CRASH]])
    stale = fresh.replace(key=fresh.key._replace(fingerprint="0" * 16))
    gone = make_entries(1)[0]  # kernel "matmul": not in the module
    gone = gone.replace(provenance=fresh.provenance)
    src = tmp_path / "c.textproto"
    codec.dump_results([fresh, stale, gone], src)
    module = ["--kernel_module", "tests_kernels_module"]
    sys.modules["tests_kernels_module"] = type(sys)("tests_kernels_module")
    sys.modules["tests_kernels_module"].tuned = tuned
    assert tool("verify", src, *module) == 1
    out = capsys.readouterr().out
    assert "stale: kernel changed" in out and "no kernel of this name" in out
    # The verdict and the fix, last, on stdout.
    assert out.splitlines()[-1].startswith(
        "2 stale: regenerate with `bazel run @rules_autotune//tools:"
        "regenerate` (or `pytest --autotune-update`), or drop them with "
        "`autotune_cache prune IN -o OUT --stale --kernel_module M`")
    pruned = tmp_path / "p.textproto"
    assert tool("prune", src, "-o", pruned, "--stale", *module) == 0
    assert [e.key for e in codec.load_results(pruned)] == [fresh.key]
    capsys.readouterr()
    assert tool("verify", pruned, *module) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"

    # Without the kernels verify cannot see the stale entry, and says so.
    capsys.readouterr()
    assert tool("verify", src) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "verify: ok; kernel fingerprints and offered configs not checked (no "
        "--kernel_module: entries of an edited kernel are not found stale)")


_CONSOLE_SCRIPT = """\
import sys
from autotune.cli.cache_tool import main
sys.exit(main())
"""


def test_installed_command_imports_kernel_modules_from_the_current_directory(
        tmp_path):
    """The installed `autotune_cache` command is a script in a bin
    directory, which Python puts first on the path instead of the current
    directory: --kernel_module must still find the user's module there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "mykernels.py").write_text(
        "import tiny_kernels\ntuned = tiny_kernels.make_tuner()\n")
    script = tmp_path / "bin" / "autotune_cache"
    script.parent.mkdir()
    script.write_text(_CONSOLE_SCRIPT)
    cache = project / "c.textproto"
    codec.dump_results(make_entries(1), cache)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [ROOT, os.path.join(ROOT, "tests")]))
    env.pop("AUTOTUNE_FLAGS", None)
    result = subprocess.run(
        [sys.executable, str(script), "verify", "c.textproto",
         "--kernel_module", "mykernels"], env=env, cwd=project,
        capture_output=True, text=True)
    # The entry (kernel "matmul") is not in the module: stale, found by
    # importing it.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no kernel of this name in the tree" in result.stdout


def test_convert_round_trip_is_byte_identical(tmp_path):
    src = tmp_path / "c.textproto"
    codec.dump_results(make_entries(12), src)
    binary, directory = tmp_path / "c.pb", str(tmp_path / "dir") + os.sep
    back = tmp_path / "back.textproto"
    assert tool("convert", src, binary) == 0
    assert tool("convert", binary, directory) == 0
    assert len(os.listdir(directory)) == 12
    assert tool("convert", directory, back) == 0
    assert back.read_bytes() == src.read_bytes()
    assert tool("verify", directory) == 0


def test_verify_file_name_mismatch_in_directory(tmp_path, capsys):
    d = tmp_path / "dir"
    assert tool("convert", _file(tmp_path), str(d) + os.sep) == 0
    name = sorted(os.listdir(d))[0]
    os.rename(d / name, d / ("matmul." + "0" * 32 + ".textproto"))
    assert tool("verify", d) == 2
    assert "does not match the cache key" in capsys.readouterr().err


def _file(tmp_path):
    src = tmp_path / "src.textproto"
    codec.dump_results(make_entries(3), src)
    return src


def _bad_inputs(tmp_path):
    good = codec.encode(make_entries(4), "x.textproto")
    truncated = tmp_path / "truncated.textproto"
    truncated.write_bytes(good[:len(good) // 2])
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xfe\xfd garbage")
    future = tmp_path / "future.textproto"
    future.write_text("version: 99\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    codec.dump_results(make_entries(1), foreign / keys.file_name(
        make_entries(1)[0].key))
    (foreign / "notes.md").write_text("not a cache file")
    missing = tmp_path / "missing.textproto"
    return {"truncated": (truncated, "truncated"),
            "garbage": (garbage, "decode failed"),
            "future": (future, "unknown format version 99"),
            "foreign": (foreign, "foreign file"),
            "missing": (missing, "no such file")}


@pytest.mark.parametrize("kind", ["truncated", "garbage", "future", "foreign",
                                  "missing"])
@pytest.mark.parametrize("command", ["show", "diff", "merge", "prune",
                                     "verify", "convert"])
def test_every_subcommand_rejects_bad_input(tmp_path, kind, command):
    bad, reason = _bad_inputs(tmp_path)[kind]
    good = _file(tmp_path)
    out = tmp_path / "out.textproto"
    argv = {"show": ["show", bad],
            "diff": ["diff", good, bad],
            "merge": ["merge", good, bad, "-o", out],
            "prune": ["prune", bad, "-o", out, "--device", "x"],
            "verify": ["verify", bad],
            "convert": ["convert", bad, out]}[command]
    before = sorted(os.listdir(tmp_path))
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py")]
        + [str(a) for a in argv], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    message = (result.stderr + result.stdout).strip().splitlines()
    errors = [line for line in message if str(bad) in line]
    assert len(errors) == 1 and reason in errors[0], message
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_output_equal_to_input_is_refused(tmp_path):
    src = _file(tmp_path)
    before = src.read_bytes()
    assert tool("convert", src, src) == 2
    assert src.read_bytes() == before


def test_runs_as_module_and_documents_exit_codes():
    result = subprocess.run([sys.executable, "-m", "autotune.cli.cache_tool",
                             "--help"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0
    assert "Exit codes" in result.stdout and "  2  bad input" in result.stdout


def test_merge_rejects_a_malformed_candidate_line(tmp_path, capsys):
    good = _file(tmp_path)
    text = codec.encode(make_entries(4, seed=9), "x.textproto").decode()
    start = text.index("  candidates {")
    at = text.index("run_time_us: ", start) + len("run_time_us: ")
    bad = tmp_path / "bad.textproto"
    bad.write_text(text[:at] + "fast" + text[at:])
    out = tmp_path / "out.textproto"
    assert tool("merge", good, bad, "-o", out) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "bad candidate" in err
    assert not out.exists()


def test_verify_decodes_every_candidate(tmp_path, capsys):
    # A candidate whose config text breaks the params syntax: protobuf
    # parses the file, the runtime never reads candidates; verify must.
    entries = make_entries(3, seed=2)
    entries[1] = entries[1].replace(candidates=entries[1].candidates + (
        Candidate(Config({"ZETA": 1}), 9.0),))
    data = codec.encode(entries, "v.pb")
    bad = tmp_path / "bad.pb"
    # Without its crc32 field (as files written before it): verify must
    # find the bad candidate by decoding it, not by the checksum.
    bad.write_bytes(data[:-5].replace(b"ZETA=1", b"ZETA~1"))
    assert tool("verify", bad) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("autotune_cache: error: ")
    assert str(bad) in captured.err
    assert "malformed config params" in captured.err
    assert "error" not in captured.out


_TREE_KERNELS = """
import json, sys
if sys.argv[1] == "dropin":
    import autotune
    autotune.install()
from autotune.cli import kernel_tree
print(json.dumps(kernel_tree.tree_kernels(["inplace"])))
"""


def test_verify_knows_kernels_written_for_triton_autotune():
    """--kernel_module on a module of plain @triton.autotune kernels, with
    no drop-in installed in the tool: the same names and fingerprints as
    the drop-in records for them (else every entry looks stale)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, os.path.join(ROOT, "tests", "dropin_kernels")]))
    env.pop("AUTOTUNE_FLAGS", None)
    found = {}
    for how in ("plain", "dropin"):
        out = subprocess.run([sys.executable, "-c", _TREE_KERNELS, how],
                             env=env, cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        found[how] = json.loads(out)
    assert sorted(found["plain"]) == ["axpy_inplace_kernel",
                                      "clamp_inplace_kernel"]
    assert found["plain"] == found["dropin"]


_BAD_TRITON_KERNELS = """
import triton
import triton.language as tl


def first(nargs):
    pass


def second(nargs):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=first),
                          triton.Config({"BLOCK": 16}, pre_hook=second)],
                 key=["n"])
@triton.jit
def twice_kernel(x, n, BLOCK: tl.constexpr):
    pass
"""


def test_a_kernel_module_the_dropin_refuses_is_one_line(tmp_path):
    (tmp_path / "twice.py").write_text(_BAD_TRITON_KERNELS)
    cache = tmp_path / "c.textproto"
    codec.dump_results(make_entries(1), cache)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
    env.pop("AUTOTUNE_FLAGS", None)
    result = subprocess.run(
        [sys.executable, "-m", "autotune.cli.cache_tool", "verify", str(cache),
         "--kernel_module", "twice"], env=env, cwd=tmp_path,
        capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "--kernel_module=twice: " in result.stderr


# -- a full output disk ---------------------------------------------------

@pytest.mark.parametrize("command", ["convert-file", "merge", "convert-dir"])
def test_tool_on_a_full_disk_exits_2_naming_the_path(
        tmp_path, monkeypatch, capsys, command):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)
    out = tmp_path / "out"
    no_space(monkeypatch)
    if command == "convert-file":
        rc = tool("convert", good, f"{out}.pb")
    elif command == "merge":
        rc = tool("merge", good, "-o", f"{out}.pb")
    else:
        rc = tool("convert", good, f"{out}/")
    assert rc == 2
    one_line_error(capsys, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.textproto"]


def test_tool_on_a_full_tmpfs(tmp_path, capsys):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(200), good)
    with tiny_tmpfs(tmp_path / "full") as full:
        assert tool("convert", good, full / "c.pb") == 2
        one_line_error(capsys, full / "c.pb")
        assert tool("convert", good, f"{full}/cd/") == 2
        one_line_error(capsys, full / "cd")
        assert sorted(p.name for p in full.iterdir()) == ["filler"]



# -- bad input and arguments ----------------------------------------------

@pytest.mark.parametrize("argv", [["diff", "{bad}", "{good}"],
                                  ["diff", "{good}", "{bad}"],
                                  ["stats", "{bad}"], ["show", "{bad}"],
                                  ["show", "--entries", "{bad}"],
                                  ["show", "--json", "{bad}"],
                                  ["merge", "{good}", "{bad}", "-o", "{out}"],
                                  ["prune", "{bad}", "--dry-run"],
                                  ["convert", "{bad}", "{out}"],
                                  ["verify", "{bad}"]])
def test_malformed_best_config_is_exit_2_for_every_subcommand(
        tmp_path, capsys, argv):
    bad = malformed_cache(tmp_path)
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    out = tmp_path / "out.pb"
    names = dict(bad=bad, good=good, out=out)
    assert tool(*[a.format(**names) for a in argv]) == 2
    err = capsys.readouterr()
    assert "Traceback" not in err.err
    assert "malformed config params 'BLOCK=32 BUG'" in err.err + err.out
    assert not out.exists()


@pytest.mark.parametrize("age", ["1000000", "1e308", "nan", "inf", "-30",
                                 "abc"])
def test_prune_rejects_ages_it_cannot_use(tmp_path, capsys, age):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)
    out = tmp_path / "out.textproto"
    assert tool("prune", good, f"--older_than={age}", "-o", out) == 2
    one_line_error(capsys, "--older_than")
    assert not out.exists()


def test_prune_by_age_keeps_recent_entries(tmp_path):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(3), good)  # tuned 2026-11-29
    out = tmp_path / "out.textproto"
    assert tool("prune", good, "--older_than=0", "-o", out) == 0
    assert codec.load_results(out) == []
    assert tool("prune", good, "--older_than=100000d", "-o", out) == 0
    assert len(codec.load_results(out)) == 3


def test_convert_into_a_directory_under_a_file(tmp_path, capsys):
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    assert tool("convert", good, f"{good}/sub/") == 2
    one_line_error(capsys, good)


def test_kernel_module_that_raises_on_import(tmp_path, monkeypatch, capsys):
    (tmp_path / "explodes.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    good = tmp_path / "good.textproto"
    codec.dump_results(make_entries(2), good)
    assert tool("verify", good, "--kernel_module=explodes") == 2
    one_line_error(capsys, "explodes", "boom")


def test_one_byte_flipped_in_a_binary_file_fails_verify(tmp_path, capsys):
    path = tmp_path / "c.pb"
    codec.dump_results(make_entries(3), path)
    data = path.read_bytes()
    at = data.index(b"num_warps") if b"num_warps" in data else \
        data.index(b"BLOCK_M=") + len("BLOCK_M=")
    flipped = bytearray(data)
    flipped[at] = ord("6") if data[at:at + 1] != b"6" else ord("3")
    path.write_bytes(bytes(flipped))
    assert len(codec.load_results(path)) == 3  # still parses
    assert tool("verify", path) == 2
    assert "checksum mismatch" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["merge", "{bad}", "-o", "{out}"],
                                  ["prune", "{bad}", "-o", "{out}"],
                                  ["convert", "{bad}", "{out}"],
                                  ["diff", "{bad}", "{bad}"]])
def test_a_damaged_binary_file_is_never_copied(tmp_path, capsys, argv):
    bad = good_file(tmp_path, ".pb")
    data = bytearray(bad.read_bytes())
    at = data.index(b"3.9.0")  # a provenance string: still parses
    data[at] = ord("4")
    bad.write_bytes(bytes(data))
    assert len(codec.load_results(bad)) == 3  # the runtime skips the check
    out = tmp_path / "out.pb"
    assert tool(*[a.format(bad=bad, out=out) for a in argv]) == 2
    one_line_error(capsys, f"{bad}: checksum mismatch")
    assert not out.exists()


def test_verify_errors_go_to_stderr_with_the_prefix(tmp_path, capsys):
    bad = tmp_path / "bad.textproto"
    bad.write_text("garbage")
    good = good_file(tmp_path)
    assert tool("verify", good, bad) == 2
    captured = capsys.readouterr()
    assert str(bad) not in captured.out
    errors = [line for line in captured.err.splitlines() if str(bad) in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"autotune_cache: error: {bad}: "), captured.err



# -- no password in the output --------------------------------------------

@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_no_password_in_tool_output(url, tmp_path, capsys):
    good = good_file(tmp_path)
    out = tmp_path / "out.textproto"
    for argv in (["stats", url], ["show", "--json", url], ["diff", good, url],
                 ["merge", good, url, "-o", out], ["verify", url],
                 ["convert", good, url], ["push", good, "--to", url],
                 ["pull", "--from", url, "-o", out]):
        assert tool(*argv) == 2, argv
        captured = capsys.readouterr()
        assert_no_secret(captured.out, captured.err)
    assert not out.exists()

