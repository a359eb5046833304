"""Which Bazel arguments regenerate gives to which command, against a fake
bazel that answers as Bazel 4.2.3 does: `bazel query` refuses a --config
whose rc lines are `build:`/`test:` lines only and every test-only
option; `bazel test` takes both. A dump target the test filters leave out
is built, not run (no test summary in the build events).
(tests/test_e2e_smoke.py passes a real `test:gpuci` config through
regenerate in a user's workspace.)"""
import json
import sys
import textwrap

import pytest

from autotune import codec
from autotune.cli import regenerate
from autotune.records import CacheKey, Candidate, Config, Entry, Provenance

H100 = "NVIDIA H100/sm_90/sms=132/triton-3.9.0"
A100 = "NVIDIA A100/sm_80/sms=108/triton-3.9.0"
CACHE = "testdata/c.textproto"
TARGETS = {"//:h100_autotune_dump": "gpu-h100",
           "//:a100_autotune_dump": "gpu-a100"}

FAKE = textwrap.dedent('''\
    import json, os, shutil, sys
    here = os.path.dirname(os.path.abspath(__file__))
    argv = sys.argv[1:]
    startup = []
    while argv and argv[0].startswith("--"):
        startup.append(argv.pop(0))
    command, args = argv[0], argv[1:]
    with open(os.path.join(here, "calls.jsonl"), "a") as f:
        f.write(json.dumps([startup, command, args]) + "\\n")
    # The rc file: test:gpuci --test_tag_filters=gpu-h100
    configs = {"gpuci": {"test": ["--test_tag_filters=gpu-h100"]}}
    if command == "info":
        print("release no_version")
        sys.exit(0)
    for a in args:
        if a.startswith("--config="):
            name = a.split("=", 1)[1]
            if command not in configs.get(name, {}):
                print(f"ERROR: Config value '{name}' is not defined in any "
                      ".rc file", file=sys.stderr)
                sys.exit(2)
        if command == "query" and a.startswith("--test_"):
            print(f"ERROR: {a} :: Unrecognized option: {a}", file=sys.stderr)
            sys.exit(2)
    targets = json.load(open(os.path.join(here, "targets.json")))
    if command == "query":
        print("<query>" + "".join(
            f'<rule class="py_test" name="{t}"><list name="tags">'
            f'<string value="autotune_dump"/><string value="{tag}"/>'
            '<string value="autotune_cache=testdata/c.textproto"/>'
            '</list></rule>' for t, tag in targets.items()) + "</query>")
        sys.exit(0)
    filters = [a.split("=", 1)[1] for a in args
               if a.startswith("--test_tag_filters=")]
    for a in args:
        if a.startswith("--config="):
            filters += [o.split("=", 1)[1] for o in
                        configs[a.split("=", 1)[1]]["test"]]
    events = [a.split("=", 1)[1] for a in args
              if a.startswith("--build_event_json_file=")][0]
    with open(events, "w") as out:
        for t in [a for a in args if a.startswith("//")]:
            out.write(json.dumps({"id": {"targetCompleted": {"label": t}},
                                  "completed": {"success": True}}) + "\\n")
            if filters and targets[t] not in filters[-1].split(","):
                continue
            logs = os.path.join(here, "logs", t.split(":")[1])
            os.makedirs(os.path.join(logs, "test.outputs"), exist_ok=True)
            shutil.copy(os.path.join(here, "dump.textproto"), os.path.join(
                logs, "test.outputs", "autotune_cache.textproto"))
            out.write(json.dumps({"id": {"testResult": {"label": t}},
                "testResult": {"testActionOutput": [{"name": "test.log",
                "uri": "file://" + os.path.join(logs, "test.log")}]}}) + "\\n")
            out.write(json.dumps({"id": {"testSummary": {"label": t}},
                "testSummary": {"overallStatus": "PASSED"}}) + "\\n")
    ''')


def entry(device, n):
    config = Config({"BLOCK": 64}, num_warps=4)
    return Entry(CacheKey(device, "k", "00000000aaaa", f"n={n}"), config,
                 10.0, [Candidate(config, 10.0)],
                 Provenance("3.9.0", "2.13.0", "", "2026-11-29T10:00:00Z",
                            0.01, "exhaustive", 0.5))


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A workspace whose cache holds an A100 entry and an H100 entry no
    dump produces any more; the fake bazel's H100 dump holds n=1."""
    ws = tmp_path / "ws"
    (ws / "testdata").mkdir(parents=True)
    (ws / "WORKSPACE").write_text("")
    codec.dump_results([entry(A100, 1), entry(H100, 2)], ws / CACHE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bazel"
    fake.write_text(f"#!{sys.executable}\n" + FAKE)
    fake.chmod(0o755)
    (bin_dir / "targets.json").write_text(json.dumps(TARGETS))
    codec.dump_results([entry(H100, 1)], bin_dir / "dump.textproto")
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path / "locks"))
    for name in ("BUILD_WORKSPACE_DIRECTORY", "BUILD_WORKING_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ws)

    def run(*argv):
        code = regenerate.main([f"--bazel={fake}", f"--workspace={ws}"]
                               + list(argv))
        calls = [json.loads(line) for line in
                 (bin_dir / "calls.jsonl").read_text().splitlines()]
        (bin_dir / "calls.jsonl").unlink()
        return code, calls
    return ws, run


def args_of(calls, command):
    return [args for _, c, args in calls if c == command]


def test_a_config_of_test_lines_goes_to_bazel_test_only(workspace, capsys):
    """--bazel_arg=--config=gpuci, defined by `test:gpuci` lines: query
    runs without it (one note), bazel test with it; its tag filter leaves
    the A100 dump out: skipped, and the shared cache updated from the H100
    dump without removing the entry only the A100 target could vouch
    for."""
    ws, run = workspace
    code, calls = run("--bazel_arg=--config=gpuci")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    queries = args_of(calls, "query")
    assert queries[-1][0] != "--config=gpuci", queries
    assert "--config=gpuci: no rc line defines it for bazel query" in err
    assert err.count("regenerate: note: --config=gpuci") == 1, err
    (test,) = args_of(calls, "test")
    assert "--config=gpuci" in test
    assert "regenerate: skipped //:a100_autotune_dump: built, not run " \
        "(the test filters left it out)" in out
    assert "no entry removed: //:a100_autotune_dump" in out, out
    kept = sorted((e.key.device, e.key.signature)
                  for e in codec.load_results(ws / CACHE))
    assert kept == [(A100, "n=1"), (H100, "n=1"), (H100, "n=2")]


def test_a_test_only_option_goes_through_bazel_test_arg(workspace, capsys):
    _, run = workspace
    code, calls = run("--bazel_test_arg=--test_tag_filters=gpu-h100",
                      "--bazel_arg=--noshow_progress")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    for query in args_of(calls, "query"):
        assert "--noshow_progress" in query
        assert not any(a.startswith("--test_tag") for a in query), query
    (test,) = args_of(calls, "test")
    assert "--test_tag_filters=gpu-h100" in test and \
        "--noshow_progress" in test
    assert "skipped //:a100_autotune_dump" in out


def test_a_test_only_option_given_to_query_names_bazel_test_arg(
        workspace, capsys):
    _, run = workspace
    code, calls = run("--bazel_arg=--test_tag_filters=gpu-h100")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "bazel query does not take --test_tag_filters=gpu-h100" in err
    assert "--bazel_test_arg" in err
    assert not args_of(calls, "test")


def test_filters_that_leave_out_every_dump_target(workspace, capsys):
    ws, run = workspace
    before = (ws / CACHE).read_bytes()
    code, _ = run("--bazel_test_arg=--test_tag_filters=gpu-v100")
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "the test filters left out every dump target (2)" in err
    assert f"{CACHE} left untouched" in out
    assert (ws / CACHE).read_bytes() == before


def test_startup_options_come_before_the_command(workspace):
    _, run = workspace
    code, calls = run("--bazel_startup_arg=--host_jvm_args=-Xmx2g")
    assert code == 0
    assert {c for _, c, _ in calls} == {"query", "info", "test"}
    assert all(startup == ["--host_jvm_args=-Xmx2g"]
               for startup, _, _ in calls), calls


def test_the_dashes_of_the_bazel_run_form_are_understood(workspace, capsys):
    """`python3 tools/regenerate.py -- --retune`: --retune is regenerate's
    option (said in a note), not a target pattern for bazel query; a
    pattern after `--` stays a pattern."""
    _, run = workspace
    code, calls = run("--", "--retune", "//...")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "regenerate: note: --retune after `--` read as regenerate's " \
        "option(s)" in err
    for query in args_of(calls, "query"):
        assert "--retune" not in " ".join(query), query
    (test,) = args_of(calls, "test")
    assert "--test_env=AUTOTUNE_RETUNE=1" in test, test
    assert "re-measuring every fusion" in err
    assert regenerate._options_after_dashes(
        argparse_parser(), ["--", "--workspace", "/w", "//x"]) == \
        ["--workspace", "/w", "--", "//x"]


def argparse_parser():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("patterns", nargs="*")
    parser.add_argument("--workspace")
    return parser
