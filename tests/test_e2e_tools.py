"""The tools a user runs from their own workspace, without Bazel: how
regenerate merges dumps into a cache and writes it, where it finds the
workspace, the runtime's messages for a missing cache and a stale entry,
the cache tool on pipes and stdin, and configure.sh for another workspace.
(tests/test_e2e_smoke.py drives the same through real Bazel.)"""
import os
import stat
import subprocess
import sys

import pytest

import autotune
from autotune import codec
from autotune.cli import regenerate, regenerate_bazel
from autotune.records import CacheKey, Candidate, Config, Entry, Provenance

import tiny_kernels as tk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPU = "NVIDIA H200/sm_90/sms=132/triton-3.9.0"
CPU = "cpu/triton-interpreter/triton-3.9.0"
REGENERATE = "bazel run @rules_autotune//tools:regenerate"


def entry(n, block=64, time_us=10.0, device=CPU, fingerprint="00000000aaaa",
          stamp="2026-11-29T10:00:00Z"):
    config = Config({"BLOCK": block}, num_warps=4)
    return Entry(CacheKey(device, "k", fingerprint, f"n={n}"), config,
                 time_us, [Candidate(config, time_us)],
                 Provenance("3.9.0", "2.13.0", "", stamp, 0.01, "exhaustive",
                            0.5))


def keys(entries):
    return sorted((e.key.device, e.key.signature, e.best.kwargs["BLOCK"])
                  for e in entries)


# -- merging dumps into a cache ---------------------------------------------

def test_dumps_of_two_targets_sharing_a_cache_are_merged():
    merged = regenerate.merge_dumps([], [
        ("//:a_autotune_dump", [entry(1), entry(2)], CPU),
        ("//:b_autotune_dump", [entry(2), entry(3)], CPU)])
    assert keys(merged.entries) == [(CPU, "n=1", 64), (CPU, "n=2", 64),
                                    (CPU, "n=3", 64)]
    assert merged.conflicts == [] and merged.removed == []


def test_a_conflict_names_both_targets_and_the_faster_wins():
    merged = regenerate.merge_dumps([], [
        ("//:a_autotune_dump", [entry(2, block=64, time_us=9.0)], CPU),
        ("//:b_autotune_dump", [entry(2, block=128, time_us=7.0)], CPU)])
    assert len(merged.conflicts) == 1
    line = merged.conflicts[0]
    assert "//:a_autotune_dump has BLOCK=64" in line
    assert "//:b_autotune_dump has BLOCK=128" in line
    assert line.endswith("kept //:b_autotune_dump's")
    assert keys(merged.entries) == [(CPU, "n=2", 128)]


def test_a_conflict_keeps_the_checked_in_config_inside_its_margin():
    old = [entry(2, block=64, time_us=9.5, stamp="2026-01-01T00:00:00Z")]
    merged = regenerate.merge_dumps(old, [
        ("//:a_autotune_dump", [entry(2, block=128, time_us=8.5)], CPU),
        ("//:b_autotune_dump", [entry(2, block=64, time_us=9.0)], CPU)])
    assert "kept //:b_autotune_dump's" in merged.conflicts[0]
    # Same key, same winner: the checked-in entry, not the new timing.
    assert merged.entries == old
    # Faster by more than the incumbent margin (8 %): the challenger wins.
    merged = regenerate.merge_dumps(old, [
        ("//:a_autotune_dump", [entry(2, block=128, time_us=7.0)], CPU),
        ("//:b_autotune_dump", [entry(2, block=64, time_us=9.0)], CPU)])
    assert "kept //:a_autotune_dump's" in merged.conflicts[0]
    assert keys(merged.entries) == [(CPU, "n=2", 128)]


def test_unchanged_entries_stay_byte_identical(tmp_path):
    path = str(tmp_path / "c.textproto")
    old = [entry(1), entry(2, block=128)]
    codec.dump_results(old, path)
    before = open(path, "rb").read()
    loaded = codec.load_results(path)
    # New timings and timestamps, same winners.
    dumps = [("//:t_autotune_dump",
              [entry(1, time_us=13.0, stamp="2026-12-01T00:00:00Z"),
               entry(2, block=128, time_us=4.0,
                     stamp="2026-12-01T00:00:00Z")], CPU)]
    merged = regenerate.merge_dumps(loaded, dumps)
    assert codec.dump_results(merged.entries, path) is False
    assert open(path, "rb").read() == before


def test_other_devices_are_kept_and_unproduced_entries_removed():
    old = [entry(1, device=GPU), entry(1), entry(2, fingerprint="0ld")]
    merged = regenerate.merge_dumps(old, [
        ("//:t_autotune_dump", [entry(1), entry(2)], CPU)])
    assert keys(merged.entries) == [(GPU, "n=1", 64), (CPU, "n=1", 64),
                                    (CPU, "n=2", 64)]
    assert [e.key.fingerprint for e in merged.removed] == ["0ld"]


def test_a_dump_with_no_entries_still_names_its_device():
    merged = regenerate.merge_dumps([entry(1), entry(1, device=GPU)],
                                    [("//:t_autotune_dump", [], CPU)])
    assert keys(merged.entries) == [(GPU, "n=1", 64)]


# -- writing: umask, mode, directories --------------------------------------

def test_new_cache_gets_the_umask_and_its_directories(tmp_path, capsys):
    path = str(tmp_path / "new" / "dir" / "c.textproto")
    old = os.umask(0o027)
    try:
        regenerate.regenerate_cache("new/dir/c.textproto",
                                    [("//:t_autotune_dump", [entry(1)], CPU)],
                                    str(tmp_path))
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    assert "1 added" in out and "file unchanged" not in out
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert len(codec.load_results(path)) == 1


def test_existing_cache_keeps_its_mode(tmp_path):
    path = str(tmp_path / "c.textproto")
    codec.dump_results([entry(1)], path)
    os.chmod(path, 0o664)
    assert codec.dump_results([entry(1), entry(2)], path) is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o664


def test_workspace_is_found_from_a_subdirectory(tmp_path):
    (tmp_path / "ws" / "a" / "b").mkdir(parents=True)
    (tmp_path / "ws" / "WORKSPACE").write_text("")
    assert regenerate.find_workspace(str(tmp_path / "ws" / "a" / "b")) == \
        str(tmp_path / "ws")


def test_outside_a_workspace_regenerate_says_so(tmp_path, monkeypatch,
                                                capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BUILD_WORKSPACE_DIRECTORY", raising=False)
    monkeypatch.delenv("BUILD_WORKING_DIRECTORY", raising=False)
    if regenerate.find_workspace(str(tmp_path)) is not None:
        pytest.skip("the temporary directory is inside a workspace")
    assert regenerate.main([]) == 2
    err = capsys.readouterr().err
    assert "not inside a Bazel workspace" in err and REGENERATE in err


# -- the runtime's messages ---------------------------------------------------

def test_missing_cache_names_the_command_that_creates_it(session_factory,
                                                         tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv("TEST_SRCDIR", str(tmp_path))
    monkeypatch.setenv("TEST_WORKSPACE", "ws")
    missing = tmp_path / "ws" / "testdata" / "mine.textproto"
    with pytest.raises(autotune.AutotuneError) as error:
        session_factory(load_autotune_results_from=[str(missing)])
    message = str(error.value)
    assert "\n" not in message
    assert message == ("autotune cache testdata/mine.textproto does not exist "
                       f"yet: create it with `{REGENERATE}`, then commit it")


def test_stale_and_missing_are_counted_apart(session_factory, tmp_path):
    session = session_factory()
    tuned = tk.make_tuner()
    tk.run(tuned, 12)
    tuned_entry = next(iter(session.cache.memory.values()))
    old = tuned_entry.replace(key=tuned_entry.key._replace(
        fingerprint="feedfeedfeedfeed"))
    path = tmp_path / "c.textproto"
    codec.dump_results([old], path)
    session_factory(load_autotune_results_from=[str(path)],
                    require_complete_autotune_results=True)
    with pytest.raises(autotune.AutotuneCacheMissError):
        tk.run(tuned, 12)
    with pytest.raises(autotune.AutotuneCacheMissError) as error:
        tk.run(tuned, 70)
    text = str(error.value)
    assert "1 fusion(s) stale, 1 fusion(s) missing" in text
    assert ("axpb_kernel [n=12;" in text and "stale: the kernel changed "
            "since it was tuned (cached fingerprint feedfeedfeedfeed, now "
            f"{tuned_entry.key.fingerprint})" in text)
    assert [line for line in text.splitlines() if "n=70" in line][0] \
        .endswith(": missing")
    assert REGENERATE in text


# -- the cache tool on pipes and stdin --------------------------------------

def _tool(*argv, stdin=None, shell=None):
    cmd = shell or [sys.executable, "-m", "autotune.cli.cache_tool"] + list(argv)
    return subprocess.run(cmd, cwd=ROOT, input=stdin, capture_output=True,
                          shell=bool(shell), executable="/bin/bash"
                          if shell else None)


@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_cache_tool_reads_stdin_by_content(tmp_path, ext):
    path = tmp_path / ("c" + ext)
    codec.dump_results([entry(1), entry(2)], path)
    result = _tool("show", "-", stdin=path.read_bytes())
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("-: 2 entries")


def test_cache_tool_diffs_a_pipe_against_a_file(tmp_path):
    text, binary = tmp_path / "c.textproto", tmp_path / "c.pb"
    codec.dump_results([entry(1)], text)
    codec.dump_results([entry(1), entry(2)], binary)
    result = _tool(shell=f"{sys.executable} -m autotune.cli.cache_tool diff "
                   f"<(cat {text}) <(cat {binary})")
    out = result.stdout.decode()
    assert result.returncode == 1, result.stderr
    assert "1 added, 0 removed, 0 changed" in out


def test_cache_tool_names_a_bad_pipe(tmp_path):
    result = _tool("show", "-", stdin=b"not a cache\n")
    assert result.returncode == 2
    assert result.stderr.decode().startswith("autotune_cache: error: -: ")


# -- offline set-up of a user's workspace ---------------------------------------

def test_configure_writes_into_the_given_workspace(tmp_path):
    script = os.path.join(ROOT, "tools", "bazel_offline", "configure.sh")
    result = subprocess.run(["bash", script, str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / ".bazelrc.offline").read_text()
    for repo in ("rules_python", "rules_shell", "rules_cc"):
        assert f"--override_repository={repo}=" in text
    shims = os.path.join(ROOT, "tools", "bazel_offline")
    assert f"rules_python={shims}/rules_python" in text
    result = subprocess.run(["bash", script, str(tmp_path / "nowhere")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "no such directory" in result.stderr


def test_placeholders_for_missing_caches_are_removed_unless_written(
        tmp_path):
    targets = {"//:a_autotune_dump": "testdata/new.textproto",
               "//:b_autotune_dump": "testdata/old.textproto",
               "//:c_autotune_dump": None}
    (tmp_path / "testdata").mkdir()
    codec.dump_results([entry(1)], tmp_path / "testdata" /
                            "old.textproto")
    created = regenerate.create_placeholders(targets, str(tmp_path))
    new = str(tmp_path / "testdata" / "new.textproto")
    assert created == [new]
    assert codec.load_results(new) == []
    regenerate.remove_placeholders(created)
    assert not os.path.exists(new)
    assert len(codec.load_results(
        tmp_path / "testdata" / "old.textproto")) == 1


@pytest.mark.parametrize("pattern, expected", [
    (":kernels_test", (":all", {"kernels_test",
                                "kernels_test_autotune_dump"})),
    ("//pkg/sub:t", ("//pkg/sub:all", {"t", "t_autotune_dump"})),
    ("@rules//pkg:t_autotune_dump", ("@rules//pkg:all", {
        "t_autotune_dump", "t_autotune_dump_autotune_dump"})),
    ("sub:t", ("sub:all", {"t", "t_autotune_dump"})),
    ("//...", None), ("...", None), ("//pkg:all", None), ("//pkg:*", None),
    ("//pkg", None), ("//pkg/...:all", None),
])
def test_a_pattern_naming_a_load_target_stands_for_its_dump_target(
        pattern, expected):
    assert regenerate_bazel.split_target_pattern(pattern) == expected


# -- the bazel command regenerate runs -------------------------------------

def test_dump_targets_run_under_the_gpu_slot_label(tmp_path):
    """By label, so Bazel builds the wrapper and ships it with the test
    (remote execution has no host paths); named as the workspace being
    regenerated names it."""
    env = {"AUTOTUNE_LOCK_DIR": str(tmp_path / "locks")}
    args = regenerate_bazel.slot_args([], env)
    assert args[0] == "--run_under=@rules_autotune//tools:gpu_slot"
    # rules_autotune's own workspace.
    assert regenerate_bazel.gpu_slot_label(env, workspace=ROOT) == \
        "//tools:gpu_slot"
    # Under `bazel run` from a Bzlmod workspace: the canonical name.
    for canonical in ("rules_autotune+", "rules_autotune~"):
        runfiles = str(tmp_path / "regenerate.runfiles" / canonical)
        old = regenerate_bazel.ROOT
        regenerate_bazel.ROOT = runfiles
        try:
            assert regenerate_bazel.gpu_slot_label({"RUNFILES_DIR": "x"}) == \
                f"@@{canonical}//tools:gpu_slot"
        finally:
            regenerate_bazel.ROOT = old


@pytest.mark.parametrize("release, expected", [
    (None, ["--remote_download_outputs=all"]),
    ((4, 2), ["--remote_download_outputs=all"]),
    ((5, 1), ["--remote_download_outputs=all"]),
    ((5, 2), ["--remote_download_outputs=all",
              "--nozip_undeclared_test_outputs"]),
    ((8, 4), ["--remote_download_outputs=all",
              "--nozip_undeclared_test_outputs"]),
])
def test_outputs_are_plain_files_where_bazel_can_and_always_downloaded(
        release, expected):
    assert regenerate_bazel.output_args(release) == expected


def test_the_running_bazels_release_is_read(tmp_path):
    fake = tmp_path / "bazel"
    for printed, expected in (("release 7.4.1", (7, 4)),
                              ("release 9.0.0rc2", (9, 0)),
                              ("release no_version", None)):
        fake.write_text(f"#!/bin/sh\necho '{printed}'\n")
        fake.chmod(0o755)
        assert regenerate_bazel.bazel_release(
            str(fake), str(tmp_path)) == expected


def test_plain_undeclared_outputs_are_read(tmp_path):
    outputs = tmp_path / "test.outputs"
    outputs.mkdir()
    (outputs / "autotune_cache.textproto").write_bytes(b"plain")
    assert regenerate_bazel.test_outputs(str(tmp_path), "//:t",
                                   logs=str(tmp_path)) == {
        "autotune_cache.textproto": b"plain"}


# -- the entry point of the Bazel tools and the cache test -----------------

def _entry(*argv, python=sys.executable):
    return subprocess.run(
        [python, os.path.join(ROOT, "tools", "require_python_deps.py")]
        + list(argv), capture_output=True, text=True, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def test_a_missing_package_is_one_line_naming_the_flag(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(bare)], check=True)
    result = _entry("tools/autotune_cache.py", "--help",
                    python=str(bare / "bin" / "python3"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        "rules_autotune: autotune_cache.py needs the Python package(s) "
        "absl-py, protobuf, which ")
    assert "--@rules_autotune//:python_deps" in result.stderr
    assert "docs/bazel.md#python-packages" in result.stderr
    # With the packages, the tool itself runs, with its arguments.
    result = _entry("--packages=absl-py,protobuf,torch",
                    "tools/autotune_cache.py", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_importing_the_runtime_without_its_packages_names_the_flag(
        tmp_path):
    """A GPU test that imports autotune on an interpreter without absl-py
    ends with one line naming the flag, not a ModuleNotFoundError."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(bare)], check=True)
    result = subprocess.run(
        [str(bare / "bin" / "python3"), "-c", "import autotune"],
        capture_output=True, text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": ROOT})
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: rules_autotune: the Python package "
                           "'absl' cannot be imported"), result.stderr
    assert "--@rules_autotune//:python_deps" in last
    assert "docs/bazel.md#python-packages" in last
    assert "ModuleNotFoundError" not in result.stderr


@pytest.mark.parametrize("release, nozip", [("no_version", False),
                                            ("7.4.1", True)])
def test_the_bazel_test_command_of_regenerate(tmp_path, monkeypatch,
                                              release, nozip):
    """The whole `bazel test` line, from a fake bazel that records it,
    run from a package of this repository: the wrapper by this
    repository's own label, the outputs downloaded, plain files where the
    release allows."""
    record = tmp_path / "argv"
    fake = tmp_path / "bazel"
    fake.write_text("#!/bin/sh\n"
                    f"if [ \"$1\" = info ]; then echo 'release {release}'; "
                    "exit 0; fi\n"
                    f"printf '%s\\n' \"$@\" > {record}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("BUILD_WORKSPACE_DIRECTORY", raising=False)
    regenerate_bazel.run_dump_targets(str(fake), {"//examples:t_autotune_dump":
                                            None},
                                os.path.join(ROOT, "examples"), [])
    argv = record.read_text().splitlines()
    assert argv[0] == "test" and argv[-1] == "//examples:t_autotune_dump"
    assert "--run_under=//tools:gpu_slot" in argv
    assert "--remote_download_outputs=all" in argv
    assert ("--nozip_undeclared_test_outputs" in argv) == nozip
    assert "--test_sharding_strategy=disabled" in argv


def test_only_test_rules_are_dump_targets():
    """rules/tests' analysis targets carry the dump tags on a rule that
    only records them: regenerate must not run them."""
    xml = ('<query><rule class="py_test" name="//a:t_autotune_dump">'
           '<list name="tags"><string value="autotune_dump"/>'
           '<string value="autotune_cache=a/c.textproto"/></list></rule>'
           '<rule class="recorded_attrs" name="//rules/tests:g_autotune_dump">'
           '<list name="tags"><string value="autotune_dump"/></list></rule>'
           '</query>')
    assert regenerate_bazel._parse_query_xml(xml) == {
        "//a:t_autotune_dump": "a/c.textproto"}
