"""Two runners share test results and compiled kernels through a real HTTP
remote cache, under a real `bazel test`.

nginx (Debian's, with its WebDAV module) serves `--remote_cache=http://
127.0.0.1:PORT` from a temporary root. Two output bases stand in for two
runners of one GPU type, in a copy of e2e/smoke with a
gpu_autotuned_test(compile_for = ["sm_90"]) of its own (the compiled
kernels' test: an AutotuneCompileKernels build action and a test that
serves every launch from its output):

- runner 1 executes the compile action and the test and PUTs their
  results (nginx's root then holds ac/ and cas/ files);
- runner 2, whose client PATH has one more entry, executes neither: both
  are remote cache hits. That holds because the workspace's .bazelrc fixes
  the actions' PATH (`build --action_env=PATH=...`, "Sharing a remote
  cache between runners" in docs/bazel.md); with the documented
  strict-action-env line alone (the control test), the client's PATH is
  part of every action's key and such a runner re-runs everything.

Skipped when nginx is not installed, unless AUTOTUNE_REQUIRE_NGINX=1
(.ci/run installs nginx-light and sets it). Prints each runner's process
line, executed spawns and wall time (`pytest -s` shows them).
"""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402
import test_compiled_kernels_bazel as compiled  # noqa: E402
from nginx_support import NginxCache, require_nginx  # noqa: E402
from tests_support import BAZEL, needs_bazel  # noqa: E402

pytestmark = [needs_bazel, pytest.mark.bazel, pytest.mark.slow]

TARGET = "//shared:served_test"
BUILD = compiled.SERVED_BUILD
# Spawns of a replayed test that are not the test running: its test.xml
# (generate-xml.sh) and, under `bazel coverage`, the coverage merger.
NOT_THE_TEST = ("generate-xml", "collect_coverage", "lcov_merger")


def fixed_path():
    """The PATH every action gets: the directory of the `python` tests
    start (the virtual environment's), then the system's."""
    python = shutil.which("python") or sys.executable
    return os.pathsep.join([os.path.dirname(python), "/usr/local/bin",
                            "/usr/bin", "/bin"])


@pytest.fixture(scope="module")
def nginx():
    require_nginx()
    server = NginxCache()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, nginx):
    ws = compiled.smoke_workspace_sharing_mykernels(tmp_path_factory)
    with open(os.path.join(ws, ".bazelrc"), "a") as f:
        f.write("# Runners share the remote cache only with the same "
                "action keys: one PATH for every action.\n"
                f"build --action_env=PATH={fixed_path()}\n")
    compiled.write_served_package(ws, "shared", BUILD)
    output_bases = []
    yield ws, output_bases
    for base in output_bases:
        subprocess.run([BAZEL, f"--output_base={base}", "shutdown"], cwd=ws,
                       capture_output=True)


def run_as_runner(ws, output_base, path, remote_cache, log, *extra):
    """`bazel test TARGET` as one runner: its own output base (Bazel
    server, action cache, outputs), its own client PATH."""
    env = dict(os.environ, PATH=path)
    args = [BAZEL, f"--output_base={output_base}"] + suite.lock_dir_args(
        ["test", TARGET, f"--remote_cache={remote_cache}",
         f"--execution_log_json_file={log}", "--nosandbox_debug"]
        + list(extra), env)
    start = time.perf_counter()
    run = subprocess.run(args, cwd=ws, env=env, capture_output=True,
                         text=True)
    wall = time.perf_counter() - start
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    processes = re.search(r"INFO: \d+ process(?:es)?: .*\.", out)
    assert processes, out[-4000:]
    spawns = compiled._spawns(log)
    executed = sorted(s["mnemonic"] for s in spawns
                      if not s.get("remoteCacheHit") and not any(
                          part in arg for arg in s.get("commandArgs", ())
                          for part in NOT_THE_TEST))
    hits = sorted(s["mnemonic"] for s in spawns if s.get("remoteCacheHit"))
    print(f"{os.path.basename(output_base)}: {processes.group(0)} executed {executed}, "
          f"remote cache hits {hits}, {wall:.1f} s")
    return out, executed, hits


def test_a_second_runner_executes_no_test_and_no_compile(workspace, nginx,
                                                         tmp_path):
    ws, output_bases = workspace
    output_bases += [str(tmp_path / "runner1"), str(tmp_path / "runner2")]
    client_path = os.environ["PATH"]
    # Runner 2's PATH has one more entry (a tool directory of its own).
    extra = tmp_path / "runner2-tools"
    extra.mkdir()

    out, executed, hits = run_as_runner(
        ws, output_bases[-2], client_path, nginx.url, tmp_path / "r1.json")
    assert "AutotuneCompileKernels" in executed, executed
    assert "TestRunner" in executed, executed
    puts = [(path, status) for method, path, status in nginx.requests()
            if method == "PUT"]
    assert puts and all(status in (200, 201, 204) for _, status in puts), \
        puts
    assert nginx.stored("ac") and nginx.stored("cas"), os.listdir(nginx.root)
    requests_before = len(nginx.requests())

    out, executed, hits = run_as_runner(
        ws, output_bases[-1], f"{extra}{os.pathsep}{client_path}", nginx.url,
        tmp_path / "r2.json")
    assert executed == [], executed
    assert "AutotuneCompileKernels" in hits and "TestRunner" in hits, hits
    assert "remote cache hit" in out
    assert re.search(rf"{re.escape(TARGET)}\s+\(cached\) PASSED", out), \
        out[-3000:]
    served = [(method, status) for method, _, status
              in nginx.requests()[requests_before:]]
    assert ("GET", 200) in served, served
    print(f"nginx: runner 1 {_counted(nginx.requests()[:requests_before])}; "
          f"runner 2 {_counted(nginx.requests()[requests_before:])}")


def test_without_a_fixed_path_one_more_entry_reruns_everything(
        workspace, nginx, tmp_path):
    """The control: the documented strict-action-env line alone (the
    actions inherit the client's PATH; `--action_env=PATH` without a
    value undoes the fixed one): the second runner's PATH, with one more
    entry, is another key, and it executes the compile and the test
    again."""
    ws, output_bases = workspace
    output_bases += [str(tmp_path / "inherited1"),
                     str(tmp_path / "inherited2")]
    client_path = os.environ["PATH"]
    extra = tmp_path / "runner2-tools"
    extra.mkdir()
    _, executed, _ = run_as_runner(
        ws, output_bases[-2], client_path, nginx.url, tmp_path / "r1.json",
        "--action_env=PATH")
    _, executed, hits = run_as_runner(
        ws, output_bases[-1], f"{extra}{os.pathsep}{client_path}", nginx.url,
        tmp_path / "r2.json", "--action_env=PATH")
    assert "AutotuneCompileKernels" in executed, executed
    assert "TestRunner" in executed, executed
    assert hits == [], hits


def _counted(requests):
    counts = {}
    for method, path, status in requests:
        key = f"{method} {path.split('/')[1]} {status}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {key}" for key, n in sorted(counts.items()))
