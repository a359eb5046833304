"""Real `bazel test` runs in a temporary copy of the workspace.

Needs bazel on PATH (Debian's bazel-bootstrap works offline with the shims in
tools/bazel_offline; .ci/run installs it). Set AUTOTUNE_SKIP_BAZEL_TESTS=1
to skip on a machine without Bazel.
"""
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402
from tests_support import needs_bazel  # noqa: E402

from autotune import codec  # noqa: E402

pytestmark = needs_bazel

SUITE = "//examples:fused_kernels_test"
XLA_CACHE = "testdata/xla_style.textproto"
SUITE_CACHE = "testdata/fused_kernels.textproto"


def git(ws, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c",
                           "user.email=t@localhost"] + list(args),
                          cwd=ws, capture_output=True, text=True)


@pytest.fixture(scope="module")
def shared_workspace(tmp_path_factory):
    """One copy and one Bazel server for the module; committed to git so
    that each test can be handed the same starting tree."""
    ws = str(tmp_path_factory.mktemp("workspace"))
    suite.copy_workspace(ws)
    assert git(ws, "init", "-q").returncode == 0
    assert git(ws, "add", "-A").returncode == 0
    assert git(ws, "commit", "-qm", "tree").returncode == 0
    yield ws
    suite.bazel(ws, ["shutdown"])


@pytest.fixture
def workspace(shared_workspace):
    """The shared copy reset to its committed tree: whatever an earlier test
    edited, deleted or added is put back (Bazel's outputs and the offline
    rc stay, so the server and its caches carry over)."""
    ws = shared_workspace
    reset = git(ws, "checkout", "-q", "--", ".")
    assert reset.returncode == 0, reset.stderr
    clean = git(ws, "clean", "-fdxq", "-e", "/bazel-*",
                "-e", "/.bazelrc.offline")
    assert clean.returncode == 0, clean.stderr
    assert git(ws, "status", "--porcelain").stdout == ""
    return ws


def run(ws, *args):
    return suite.bazel(ws, list(args))


def regenerate(ws, *patterns):
    return subprocess.run(
        [sys.executable, os.path.join(ws, "tools", "regenerate.py")]
        + list(patterns), cwd=ws, text=True, capture_output=True)


def write_package(ws, package, build, files=None):
    """Adds a package to the workspace copy: its BUILD file and sources."""
    os.makedirs(os.path.join(ws, package))
    for name, text in dict(files or {}, **{"BUILD.bazel": textwrap.dedent(
            build)}).items():
        with open(os.path.join(ws, package, name), "w") as f:
            f.write(text)


def read(ws, rel):
    with open(os.path.join(ws, rel), "rb") as f:
        return f.read()


def test_checked_in_caches_pass_bazel_test(workspace):
    result = run(workspace, "test", "//...")
    assert result.returncode == 0, result.stdout + result.stderr
    reports = suite.reports(workspace, SUITE)
    assert len(reports) == 3  # one per shard: none may go unchecked
    for report in reports:
        assert report["candidate_benchmarks"] == 0
        assert report["misses"] == 0


def test_dump_regenerate_load_cycle(workspace):
    os.unlink(os.path.join(workspace, SUITE_CACHE))
    result = regenerate(workspace, "//examples/...")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "testdata/fused_kernels.textproto: 6 entries; 6 added" in \
        result.stdout
    dumped = suite.reports(workspace, SUITE + "_autotune_dump")
    assert dumped[0]["tuned"] == 6 and dumped[0]["candidate_benchmarks"] > 0
    entries = codec.load_results(os.path.join(workspace, SUITE_CACHE))
    assert len(entries) == 6
    result = run(workspace, "test", SUITE, "--cache_test_results=no")
    assert result.returncode == 0, result.stdout + result.stderr
    reports = suite.reports(workspace, SUITE)
    assert len(reports) == 3  # sharded
    assert sum(r["hits"] for r in reports) == 6
    assert sum(r["candidate_benchmarks"] for r in reports) == 0
    assert sum(r["saved_seconds"] for r in reports) > 0


def test_sharded_dump_fails_with_its_message(workspace):
    target = SUITE + "_autotune_dump"
    result = run(workspace, "test", target, "--test_sharding_strategy=forced=2")
    if "Not a valid test sharding strategy" in result.stderr:
        # Bazel before 5 has no forced=k; shard the run the way Bazel
        # would, through the test environment.
        result = run(workspace, "test", target, "--test_env=TEST_TOTAL_SHARDS=2",
                     "--test_env=TEST_SHARD_INDEX=1")
        log = suite.test_log(workspace, target)
    else:
        log = suite.test_log(workspace, target, "shard_2_of_2")
    assert result.returncode != 0
    assert "must run unsharded" in log
    assert "--test_sharding_strategy=disabled" in log


def test_cache_of_another_device_is_reported(workspace):
    target = "//examples:load_autotune_results_using_execpath_test"
    text = read(workspace, XLA_CACHE).decode()
    path = os.path.join(workspace, XLA_CACHE)
    with open(path, "w") as f:
        f.write(text.replace("cpu/triton-interpreter",
                             "NVIDIA H100 80GB HBM3/sm_90/sms=132"))
    result = run(workspace, "test", target)
    assert result.returncode != 0  # require_complete: every fusion missed
    log = suite.test_log(workspace, target)
    assert "1 entries (NVIDIA H100 80GB HBM3" in log
    assert "none for this device" in log


def test_require_complete_lists_a_removed_fusion(workspace):
    path = os.path.join(workspace, SUITE_CACHE)
    entries = codec.load_results(path)
    kept = [e for e in entries if "n_rows=3" not in e.key.signature]
    assert len(kept) == len(entries) - 1
    codec.dump_results(kept, path)
    result = run(workspace, "test", SUITE, "--test_output=errors")
    assert result.returncode != 0
    logs = "".join(suite.test_log(workspace, SUITE, f"shard_{i}_of_3")
                   for i in (1, 2, 3))
    assert "missing from the autotune cache" in logs
    assert "softmax_kernel [n_rows=3,n_cols=20" in logs


def test_missing_cache_label_fails_at_analysis(workspace):
    write_package(workspace, "bad", """\
        load("@rules_python//python:defs.bzl", "py_test")
        load("//rules:defs.bzl", "gpu_autotuned_test")

        gpu_autotuned_test(
            name = "t",
            srcs = ["t.py"],
            autotune_cache = "//testdata:no_such_cache.textproto",
            test_rule = py_test,
        )
        """, {"t.py": ""})
    result = run(workspace, "build", "//bad:t")
    assert result.returncode != 0
    assert "no_such_cache.textproto" in result.stderr


def test_corrupt_checked_in_cache_fails_validation(workspace):
    data = read(workspace, XLA_CACHE)
    with open(os.path.join(workspace, XLA_CACHE), "wb") as f:
        f.write(data[:len(data) // 2])
    result = run(workspace, "test", "//testdata:validate_xla_style")
    assert result.returncode != 0
    log = suite.test_log(workspace, "//testdata:validate_xla_style")
    assert "xla_style.textproto" in log and "not a valid text" in log


def test_regenerate_with_a_failing_dump_target(workspace):
    write_package(workspace, "failing", """\
        load("@rules_python//python:defs.bzl", "py_test")
        load("//rules:defs.bzl", "gpu_autotuned_test")

        gpu_autotuned_test(
            name = "broken_test",
            srcs = ["broken_test.py"],
            autotune_cache = "cache.textproto",
            main = "broken_test.py",
            test_rule = py_test,
            deps = ["//:autotune"],
        )
        """, {"broken_test.py": "raise SystemExit('this suite is broken')\n"})
    cache = os.path.join(workspace, "failing", "cache.textproto")
    codec.dump_results([], cache)
    before = read(workspace, "failing/cache.textproto")
    result = regenerate(workspace, "//examples/...", "//failing/...")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED //failing:broken_test_autotune_dump" in result.stdout
    assert "failing/cache.textproto left untouched" in result.stdout
    assert read(workspace, "failing/cache.textproto") == before
    # The other caches were regenerated.
    assert "testdata/fused_kernels.textproto: 6 entries" in result.stdout
    assert len(codec.load_results(
        os.path.join(workspace, SUITE_CACHE))) == 6


def test_report_json_is_valid(workspace):
    result = run(workspace, "test", SUITE)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = suite.reports(workspace, SUITE)  # json.loads'ed
    assert len(reports) == 3
    for report in reports:
        assert isinstance(report["fusions"], list)
        assert all(isinstance(report[k], int) for k in
                   ("hits", "tuned", "misses", "candidate_benchmarks"))
    assert all(r["device"].startswith("cpu/triton-interpreter") for r in
               reports)


def test_flags_from_env_and_macro_are_combined(workspace):
    write_package(workspace, "flags", """\
        load("@rules_python//python:defs.bzl", "py_test")
        load("//rules:defs.bzl", "gpu_autotuned_test")

        gpu_autotuned_test(
            name = "t",
            srcs = ["t.py"],
            autotune_cache = "//testdata:xla_style.textproto",
            autotune_flags = ["--load_autotune_results_from=b.textproto"],
            env = {"AUTOTUNE_FLAGS": "--load_autotune_results_from=a.textproto --autotune_miss_policy=nearest"},
            test_rule = py_test,
        )
        """, {"t.py": ""})
    write_package(workspace, "flags/twice", """\
        load("@rules_python//python:defs.bzl", "py_test")
        load("//rules:defs.bzl", "gpu_autotuned_test", "gpu_type")

        gpu_autotuned_test(
            name = "twice",
            srcs = ["t.py"],
            autotune_flags = ["--autotune_expected_gpu=H100"],
            gpu_types = gpu_type(device = "H200"),
            test_rule = py_test,
        )
        """, {"t.py": ""})
    result = run(workspace, "query", "--output=build", "//flags:t")
    assert result.returncode == 0, result.stderr
    flags = [line for line in result.stdout.splitlines()
             if '"AUTOTUNE_FLAGS"' in line][0]
    # One --load_autotune_results_from with the three files, in order.
    assert flags.count("--load_autotune_results_from=") == 1, flags
    assert ("--load_autotune_results_from=a.textproto,b.textproto,"
            "$(execpath //testdata:xla_style.textproto)") in flags, flags
    assert "--autotune_miss_policy=nearest" in flags
    result = run(workspace, "query", "//flags/twice:twice")
    assert result.returncode != 0
    assert "--autotune_expected_gpu is given twice" in result.stderr


def test_regenerate_on_an_unchanged_tree_changes_nothing(workspace):
    """The checked-in caches are incumbents of the dump targets: a
    --retune that re-measures every fusion, then an incremental regenerate
    that measures none, leave every cache byte-identical, on the
    interpreter too, where timings vary by tens of percent."""
    # The second names the load target, as a user would: it stands for its
    # dump target.
    for attempt, args in ((1, ["--retune", "//examples/..."]),
                          (2, ["//examples:fused_kernels_test"])):
        result = regenerate(workspace, *args)
        assert result.returncode == 0, result.stdout + result.stderr
        diff = git(workspace, "diff", "--exit-code", "--stat", "testdata/")
        assert diff.returncode == 0, (attempt, diff.stdout, result.stdout)
        assert "file unchanged" in result.stdout
        (dumped,) = suite.reports(workspace, SUITE + "_autotune_dump")
        if attempt == 1:
            assert "--retune: re-measuring every fusion" in result.stderr
            assert dumped["tuned"] == 6 and dumped["hits"] == 0
        else:
            assert "tuning only fusions missing or stale" in result.stderr
            assert (dumped["hits"], dumped["candidate_benchmarks"]) == (6, 0)
    assert "running 1 dump target(s)" in result.stderr, result.stderr


@pytest.mark.bazel
@pytest.mark.slow
def test_run_under_the_slot_wrapper_spreads_dumps_over_devices(workspace,
                                                               tmp_path):
    """`bazel test --run_under=//tools:gpu_slot` with two simulated
    devices: four dump-like tests, never two on one device at once."""
    probe = textwrap.dedent("""\
        import json, os, time
        start = time.time()
        time.sleep(2)
        with open(os.environ["SLOT_RECORD"], "a") as f:
            f.write(json.dumps({"device": os.environ.get(
                "CUDA_VISIBLE_DEVICES"), "start": start,
                "end": time.time()}) + "\\n")
        """)
    write_package(workspace, "slots", """\
        load("@rules_python//python:defs.bzl", "py_test")
        [py_test(name = "probe%d" % i, srcs = ["probe.py"], main = "probe.py")
         for i in range(4)]
        """, {"probe.py": probe})
    locks, record = tmp_path / "locks", tmp_path / "runs.jsonl"
    locks.mkdir()
    result = run(workspace, "test", "//slots:all", "--jobs=4",
                 "--run_under=//tools:gpu_slot",
                 f"--sandbox_writable_path={tmp_path}",
                 f"--test_env=AUTOTUNE_LOCK_DIR={locks}",
                 "--test_env=AUTOTUNE_GPU_SLOT_DEVICES=2",
                 "--test_env=AUTOTUNE_GPU_SLOT_KIND=dump",
                 f"--test_env=SLOT_RECORD={record}",
                 "--local_test_jobs=4", "--cache_test_results=no")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    import json
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted(r["device"] for r in runs) == ["0", "0", "1", "1"], runs
    for device in ("0", "1"):
        mine = sorted((r["start"], r["end"]) for r in runs
                      if r["device"] == device)
        assert mine[0][1] <= mine[1][0], runs
