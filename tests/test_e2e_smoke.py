"""The user's path, end to end: e2e/smoke is a separate Bazel workspace that
consumes this repository as @rules_autotune. In a temporary copy, driven
the way a user would:

1. bootstrap: no cache; its tests fail with one line naming the command
   that creates it; `bazel run @rules_autotune//tools:regenerate` creates it;
2. `bazel test //...` (the py_test in 2 shards, an sh_test): every fusion a
   hit and 0 candidate benchmarks, read from each shard's report;
3. a kernel edit: the load targets fail naming the fusion as stale, the
   cache test fails; regenerate (python3 .../regenerate.py from a
   subdirectory) and everything passes again;
4. the cache tool under `bazel run` with paths relative to where bazel ran.

Beside them, a py_test that launches a torch.distributed job of 2 ranks
(gloo on 127.0.0.1; its own cache): in each dump run (regenerate) the
ranks split the candidates and agree on every winner; in each load run
every fusion is a hit on every rank with no exchange between them. Read
from each rank's report.

Then, with a `python` that has no packages first on PATH: the cache tool
runs on the packages the --@rules_autotune//:python_deps flag brings in,
and the tools and the cache test stop with one line naming the flag when
nothing brings them. Last, rules_autotune's own targets (a non-root
module) run without the external/ runfiles links, as on Bazel 8.

One workspace, so one Bazel server and output base for every step; shut
down at the end. Prints a transcript (commands, wall times, hits and
benchmarks per shard); `pytest -s` shows it.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402
from tests_support import BAZEL, copy_of_smoke_workspace, needs_bazel  # noqa: E402

from autotune import codec  # noqa: E402

pytestmark = needs_bazel

CACHE = "testdata/smoke.textproto"
REGENERATE = "bazel run @rules_autotune//tools:regenerate"
KERNEL = "mykernels/scale_shift.py"
SHARDS = ("shard_1_of_2", "shard_2_of_2")
RANKS_TEST = "//:ranks_test"
RANKS_CACHE = "testdata/ranks.textproto"
RANK_REPORTS = ("autotune_report.json", "autotune_report.rank1.json")
RANK_FUSIONS = 2  # ranks_test.SIZES
RANK_CANDIDATES = 4  # mykernels.scale_shift.CONFIGS


class Transcript:
    def __init__(self):
        self.lines = []

    def run(self, cwd, argv, ws, env=None):
        start = time.perf_counter()
        # The tests get this run's private lock directory (shown as typed).
        ran = [argv[0]] + suite.lock_dir_args(argv[1:]) \
            if argv[0] == BAZEL else argv
        result = subprocess.run(ran, cwd=cwd, text=True, capture_output=True,
                                env=env)
        wall = time.perf_counter() - start
        where = os.path.relpath(cwd, ws)
        shown = " ".join("bazel" if a == BAZEL else "python3"
                         if a == sys.executable else os.path.relpath(a, cwd)
                         if os.path.isabs(a) and os.path.exists(a) else a
                         for a in argv)
        self.lines.append(f"$ {'' if where == '.' else f'(cd {where}) '}"
                          f"{shown}   # exit {result.returncode}, "
                          f"{wall:.1f} s")
        return result

    def note(self, text):
        self.lines.append("  " + text)


def report(ws, target, shard=None):
    data = suite.test_outputs(ws, target, shard).get("autotune_report.json")
    assert data, f"no autotune report for {target} {shard or ''}"
    return json.loads(data)


def rank_reports(ws, target):
    outputs = suite.test_outputs(ws, target)
    missing = [n for n in RANK_REPORTS if n not in outputs]
    assert not missing, f"{target}: no report {missing} ({sorted(outputs)})"
    return [json.loads(outputs[n]) for n in RANK_REPORTS]


def check_ranks(ws, target, t, tuning):
    """The ranks of ranks_test agree on every fusion's config. tuning
    (a dump run that tunes every fusion): each rank measured about half
    of each fusion's candidates; otherwise (a load run): every fusion a
    hit on every rank, with no exchange and nothing benchmarked."""
    reports = rank_reports(ws, target)
    world = len(reports)
    winners = [{(f["kernel"], f["signature"]): f["best"]
                for f in r["fusions"]} for r in reports]
    assert len(winners[0]) == RANK_FUSIONS and None not in \
        winners[0].values(), winners
    assert all(w == winners[0] for w in winners), winners
    for rank, r in enumerate(reports):
        job = r["distributed"]
        assert job and (job["rank"], job["world_size"]) == (rank, world), r
        if tuning:
            assert r["tuned"] == RANK_FUSIONS and r["hits"] == 0, r
            assert job["exchanges"] >= 2 * RANK_FUSIONS, job  # start, share
            share = r["candidate_benchmarks"] / (RANK_FUSIONS *
                                                 RANK_CANDIDATES)
            # Dealt round-robin: within one candidate per fusion of 1/world.
            assert abs(share - 1 / world) <= 1 / RANK_CANDIDATES, r
        else:
            assert r["hits"] == RANK_FUSIONS and r["misses"] == 0 and \
                r["tuned"] == 0 and r["candidate_benchmarks"] == 0, r
            assert job["exchanges"] == 0, job
        t.note(f"{target} rank {rank}: {counts(r)}, "
               f"{job['exchanges']} exchanges")
    if tuning:
        assert sum(r["candidate_benchmarks"] for r in reports) == \
            RANK_FUSIONS * RANK_CANDIDATES, reports


def log(ws, target, shard=None):
    return suite.test_log(ws, target, shard)


def summary(stdout, cache=CACHE):
    return [line for line in stdout.splitlines()
            if line.startswith(f"regenerate: {cache}")][0]


def retuned_or_changed(line):
    """The fusions a regenerate summary line counts as tuned again after a
    kernel edit; None when it also counts some as added or removed."""
    found = re.search(r"entries; 0 added, 0 removed, (\d+) changed"
                      r"(?:; (\d+) re-tuned \(kernel changed\))?", line)
    return int(found.group(1)) + int(found.group(2) or 0) if found else None


def counts(r):
    return (f"{r['hits']} hits, {r['tuned']} tuned, "
            f"{r['candidate_benchmarks']} candidate benchmarks")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """A copy of this repository; e2e/smoke inside it reaches it as
    ../.. (its local_repository and local_path_override)."""
    repo, ws = copy_of_smoke_workspace(
        tmp_path_factory.mktemp("rules_autotune"))
    transcript = Transcript()
    yield repo, ws, transcript
    transcript.run(ws, [BAZEL, "shutdown"], ws)
    print("\n" + "\n".join(transcript.lines))


def test_user_workspace_flow(smoke):
    repo, ws, t = smoke
    bazel = lambda *args, cwd=ws: t.run(cwd, [BAZEL] + list(args), ws)  # noqa: E731
    assert not os.path.exists(os.path.join(ws, "testdata"))

    # 1. Bootstrap from nothing: the tests say which command creates the
    # cache, in one line; the command creates it (and its directory).
    result = bazel("test", "//:kernels_sh_test", "//:smoke_cache_test")
    assert result.returncode != 0
    for target in ("//:kernels_sh_test", "//:smoke_cache_test"):
        lines = [line for line in log(ws, target).splitlines()
                 if "does not exist yet" in line]
        assert lines and CACHE in lines[-1] and REGENERATE in lines[-1], \
            log(ws, target)[-2000:]
    t.note(lines[-1].strip())
    result = bazel("run", "@rules_autotune//tools:regenerate")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"{CACHE}: 4 entries; 4 added" in result.stdout, result.stdout
    assert f"{RANKS_CACHE}: 2 entries; 2 added" in result.stdout, \
        result.stdout
    t.note(summary(result.stdout, RANKS_CACHE))
    check_ranks(ws, RANKS_TEST + "_autotune_dump", t, tuning=True)
    path = os.path.join(ws, CACHE)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
    t.note(summary(result.stdout))

    # 2. Load mode, sharded: every fusion a hit, nothing benchmarked.
    result = bazel("test", "//...")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    for target, shard in [("//:kernels_test", s) for s in SHARDS] + [
            ("//:kernels_sh_test", None)]:
        r = report(ws, target, shard)
        assert r["candidate_benchmarks"] == 0 and r["misses"] == 0, r
        assert r["hits"] >= 1 and r["tuned"] == 0, r
        t.note(f"{target} {shard or '(unsharded)'}: {counts(r)}")
    assert sum(report(ws, "//:kernels_test", s)["hits"] for s in SHARDS) == 3
    check_ranks(ws, RANKS_TEST, t, tuning=False)

    # 3. A kernel edit: stale, not missing; the cache test fails too.
    kernel = os.path.join(ws, KERNEL)
    with open(kernel) as f:
        source = f.read()
    edited = source.replace("v * scale + shift", "shift + v * scale")
    assert edited != source
    with open(kernel, "w") as f:
        f.write(edited)
    result = bazel("test", "//...")
    assert result.returncode != 0
    shard_logs = "".join(log(ws, "//:kernels_test", s) for s in SHARDS)
    assert "fusion(s) stale, 0 fusion(s) missing" in shard_logs, \
        shard_logs[-3000:]
    stale = [line.strip() for line in shard_logs.splitlines()
             if "scale_shift_kernel [n=" in line and "stale" in line]
    assert stale, shard_logs[-3000:]
    t.note(stale[0])
    assert "stale: the kernel changed" in log(ws, "//:kernels_sh_test")
    cache_log = log(ws, "//:smoke_cache_test")
    assert "stale: kernel changed" in cache_log and REGENERATE in cache_log
    t.note([line for line in cache_log.splitlines()
            if "stale: kernel changed" in line][0].strip())

    # Regenerate with the script, from a subdirectory of the workspace.
    sub = os.path.join(ws, "mykernels")
    result = t.run(sub, [sys.executable, os.path.join(
        repo, "tools", "regenerate.py")], ws)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # By fusion: tuned again for the edited kernel, each either with its
    # winner kept (re-tuned) or a new one (changed); none added or removed.
    assert retuned_or_changed(summary(result.stdout)) == 4, result.stdout
    t.note(summary(result.stdout))
    # The edited kernel is stale in the ranks' cache too: tuned again.
    assert retuned_or_changed(summary(result.stdout, RANKS_CACHE)) == 2, \
        result.stdout
    check_ranks(ws, RANKS_TEST + "_autotune_dump", t, tuning=True)
    result = bazel("test", "//...")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    for shard in SHARDS:
        r = report(ws, "//:kernels_test", shard)
        assert r["candidate_benchmarks"] == 0 and r["misses"] == 0, r
        t.note(f"//:kernels_test {shard}: {counts(r)}")
    check_ranks(ws, RANKS_TEST, t, tuning=False)

    # 4. The cache tool under bazel run, relative to where bazel runs;
    # --kernel_module imports from the workspace root.
    result = bazel("run", "@rules_autotune//tools:autotune_cache", "--",
                   "verify", "../" + CACHE, "--kernel_module",
                   "mykernels.scale_shift", cwd=sub)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # The verdict, on stdout; errors would be on stderr.
    assert "4 entries" in result.stdout and "verify: ok" in result.stdout, \
        result.stdout
    result = bazel("run", "@rules_autotune//tools:autotune_cache", "--",
                   "show", CACHE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"{CACHE}: 4 entries")
    t.note(result.stdout.splitlines()[0])
    assert len(codec.load_results(path)) == 4


GPUCI_RC = """
# A CI machine's settings, for `bazel test` only (query knows no gpuci):
# its runner tunes the single-process tests' cache, not the ranks' one.
test:gpuci --test_tag_filters=-autotune_cache=testdata/ranks.textproto
"""


def test_regenerate_takes_a_config_of_test_lines(smoke):
    """The workspace's .bazelrc defines `gpuci` with `test:` lines only,
    which `bazel query` refuses (Config value 'gpuci' is not defined in
    any .rc file): regenerate queries without it and runs the dumps with
    it, so its tag filter leaves the ranks' dump out (skipped, its cache
    untouched) and the shared cache is regenerated, unchanged."""
    repo, ws, t = smoke
    with open(os.path.join(ws, ".bazelrc"), "a") as f:
        f.write(GPUCI_RC)
    with open(os.path.join(ws, RANKS_CACHE), "rb") as f:
        ranks_before = f.read()
    result = t.run(ws, [BAZEL, "query", "--config=gpuci", "//:all"], ws)
    assert "Config value 'gpuci' is not defined" in result.stderr, \
        result.stderr[-2000:]
    result = t.run(ws, [BAZEL, "run", "@rules_autotune//tools:regenerate",
                        "--", "--bazel_arg=--config=gpuci"], ws)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "--config=gpuci: no rc line defines it for bazel query" in out
    assert f"skipped {RANKS_TEST}_autotune_dump: built, not run" in out, \
        out[-3000:]
    assert f"{RANKS_CACHE} left untouched" in out, out[-3000:]
    line = summary(result.stdout)
    assert "0 added, 0 removed, 0 changed" in line and \
        "file unchanged" in line, line
    t.note(line)
    with open(os.path.join(ws, RANKS_CACHE), "rb") as f:
        assert f.read() == ranks_before


def test_a_cached_pass_reruns_when_the_runner_stamp_changes(smoke,
                                                           tmp_path):
    """A gpu_autotuned_test target inherits AUTOTUNE_RUNNER_STAMP from the
    client (env_inherit, no .bazelrc line): a cached pass stands while the stamp stays, and the test
    runs again when the stamp's Triton version changes, as after an
    upgrade (here the stamp alone changes: the test then fails saying the
    stamp does not describe the runner). Back to the first stamp, the
    first result comes from the shared (disk) cache, as another runner
    with that stamp would find it in a remote cache."""
    repo, ws, t = smoke
    target = "//:kernels_sh_test"
    printed = t.run(ws, [sys.executable, os.path.join(
        repo, "tools", "runner_stamp.py")], ws)
    assert printed.returncode == 0, printed.stderr[-2000:]
    runner = printed.stdout.strip()
    upgraded = re.sub(r"(^|;)triton=[^;]*", r"\1triton=9.9.0", runner)
    assert upgraded != runner, runner

    def test_with(value):
        env = dict(os.environ, AUTOTUNE_RUNNER_STAMP=value)
        # yes, not auto: auto runs a test again after it failed, whatever
        # the cache holds.
        result = t.run(ws, [BAZEL, "test", f"--disk_cache={tmp_path}",
                            "--cache_test_results=yes", target], ws, env=env)
        line = [x for x in (result.stdout + result.stderr).splitlines()
                if x.startswith(target + " ")]
        assert line, result.stderr[-3000:]
        t.note(f"AUTOTUNE_RUNNER_STAMP=...{value[-40:]}: "
               + " ".join(line[0].split()))
        return result.returncode, line[0]

    code, line = test_with(runner)
    assert code == 0 and "PASSED" in line, line
    code, line = test_with(runner)
    assert code == 0 and "(cached) PASSED" in line, line
    code, line = test_with(upgraded)
    assert code != 0 and "(cached)" not in line and "FAILED" in line, line
    assert "AUTOTUNE_RUNNER_STAMP says triton=9.9.0, but this test runs " \
        "with triton=" in log(ws, target), log(ws, target)[-3000:]
    code, line = test_with(runner)
    assert code == 0 and "(cached) PASSED" in line, line


def _bare_python(path):
    """A virtual environment without packages: its bin, first on PATH, is
    the `python` Bazel 4.2.3's launchers start (a hermetic interpreter
    with no site-packages, as rules_python's is under Bzlmod)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(path)], check=True)
    env = dict(os.environ)
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("PYTHONPATH", None)
    return env


def _hub_with_runtime_packages(path):
    """A stand-in for a pip hub that holds absl-py and protobuf for real
    (copied from this Python), and empty torch, triton and numpy."""
    import absl
    import google.protobuf
    copies = {"absl_py": (os.path.dirname(absl.__file__), "absl"),
              "protobuf": (os.path.dirname(google.protobuf.__file__),
                           os.path.join("google", "protobuf"))}
    (path / "WORKSPACE").write_text('workspace(name = "pypi")\n')
    (path / "BUILD").write_text("")
    for package in ("absl_py", "protobuf", "numpy", "torch", "triton"):
        site = path / package / "site"
        site.mkdir(parents=True)
        if package in copies:
            source, rel = copies[package]
            shutil.copytree(source, site / rel,
                            ignore=shutil.ignore_patterns("__pycache__"))
        (path / package / "BUILD").write_text(
            'load("@rules_python//python:defs.bzl", "py_library")\n'
            f'py_library(name = "{package}", srcs = glob(["site/**/*.py"], '
            'allow_empty = True), data = glob(["site/**"], allow_empty = '
            'True, exclude = ["site/**/*.py"]), imports = ["site"], '
            'visibility = ["//visibility:public"])\n')


def _one_line_naming_the_flag(text):
    lines = [line for line in text.splitlines()
             if line.startswith("rules_autotune: ")]
    assert len(lines) == 1, text[-3000:]
    assert "--@rules_autotune//:python_deps" in lines[0], lines[0]
    assert "docs/bazel.md#python-packages" in lines[0], lines[0]
    assert "Traceback" not in text and "ModuleNotFoundError" not in text, \
        text[-3000:]
    return lines[0]


def test_python_packages_come_through_the_python_deps_flag(smoke, tmp_path):
    """The workspace's .bazelrc points --@rules_autotune//:python_deps at
    its //:autotune_python_deps (its pip hub). With an interpreter that has
    no packages at all, the cache tool runs when the hub holds absl-py and
    protobuf, and stops with one line naming the flag when the flag is
    left at its default; regenerate and the cache test, with nothing
    providing the packages, stop the same way."""
    repo, ws, t = smoke
    env = _bare_python(tmp_path / "bare")
    hub = tmp_path / "hub"
    hub.mkdir()
    _hub_with_runtime_packages(hub)

    def bazel(*args):
        start = time.perf_counter()
        result = subprocess.run([BAZEL] + list(args), cwd=ws, env=env,
                                text=True, capture_output=True)
        t.lines.append(f"$ (bare python3 on PATH) bazel {' '.join(args)}"
                       f"   # exit {result.returncode}, "
                       f"{time.perf_counter() - start:.1f} s")
        return result

    show = ["run", f"--override_repository=pypi={hub}",
            "@rules_autotune//tools:autotune_cache", "--", "show", CACHE]
    result = bazel(*show)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.startswith(f"{CACHE}: 4 entries"), result.stdout
    t.note("the hub's absl-py and protobuf, through the flag: "
           + result.stdout.splitlines()[0])

    default = "--@rules_autotune//:python_deps=" \
        "@rules_autotune//:python_deps_from_interpreter"
    result = bazel(*show[:2], default, *show[2:])
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    t.note(_one_line_naming_the_flag(result.stderr))

    # The offline hub stands in without packages: nothing provides them.
    result = bazel("run", "@rules_autotune//tools:regenerate")
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    _one_line_naming_the_flag(result.stderr)
    result = bazel("test", "//:smoke_cache_test")
    assert result.returncode != 0
    line = _one_line_naming_the_flag(log(ws, "//:smoke_cache_test"))
    assert "torch, triton" in line, line


def _run_as_bazel_test(ws, t, target, tmp_path, swap=None):
    """Runs an external test target the way `bazel test` does (Bazel's
    test-setup.sh, the target's env and args, in the main repository's
    runfiles directory) with --nolegacy_external_runfiles. Bazel 4.2.3's
    test-setup.sh cannot find an external test's own binary without the
    external/ links (later Bazel can), so the script `bazel run
    --script_path` writes is given the binary's runfiles path instead;
    nothing else changes. swap: (old, new) text to replace in the script,
    for the control run."""
    script = tmp_path / "run.sh"
    result = t.run(ws, [BAZEL, "run", "--nolegacy_external_runfiles",
                        f"--script_path={script}", target], ws)
    assert result.returncode == 0, result.stderr[-3000:]
    package, _, name = target.partition("//")[2].partition(":")
    binary = f" external/rules_autotune/{package}/{name} "
    text = script.read_text()
    assert binary in text, text
    text = text.replace(binary, f" ../rules_autotune/{package}/{name} ", 1)
    if swap:
        assert swap[0] in text, text
        text = text.replace(swap[0], swap[1])
    return subprocess.run(["bash", "-c", text], capture_output=True,
                          text=True)


def test_caches_of_a_non_root_repository_resolve_without_external_links(
        smoke, tmp_path):
    """Targets defined in rules_autotune's own BUILD files (a non-root
    module under Bzlmod), run from the user's workspace with
    --nolegacy_external_runfiles: the main repository's runfiles then have
    no external/ links, as on Bazel 8 and later, so a cache named by
    $(execpath) (external/rules_autotune/...) is not found there (the
    control run); the macros name it by its runfiles path."""
    repo, ws, t = smoke
    cache_test = "@rules_autotune//testdata:validate_xla_style"
    gpu_test = ("@rules_autotune//examples:"
                "load_autotune_results_using_execpath_test")
    runfiles_path = "../rules_autotune/testdata/xla_style.textproto"
    for target in (cache_test, gpu_test):
        result = _run_as_bazel_test(ws, t, target, tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + \
            result.stderr[-3000:]
        t.note(f"{target}: passed without external/ links")
    result = t.run(ws, [BAZEL, "query", "--output=build", gpu_test], ws)
    assert "$(rootpath //testdata:xla_style.textproto)" in result.stdout, \
        result.stdout
    # Control: the exec path $(execpath) gave before does not resolve.
    result = _run_as_bazel_test(ws, t, cache_test, tmp_path, swap=(
        runfiles_path, "external/rules_autotune/testdata/xla_style.textproto"))
    assert result.returncode != 0
    assert "does not exist yet" in result.stdout + result.stderr
