"""The GPU runner doctor under a real, sandboxed `bazel test`, run as a
user runs it: `bazel test @rules_autotune//tools:gpu_doctor_test
--test_output=all` from a user's workspace (a copy of e2e/smoke, which
reaches this repository as @rules_autotune), on this machine (no GPU):

- one line per check; the machine has no GPU and the doctor says so, the
  GPU-only checks are `skip`, the tiny kernel compiles for sm_90 inside
  the sandbox, /dev is read-only there, Triton's cache is the test's
  private folder; no FAIL, so the test passes;
- the client's CUDA_VISIBLE_DEVICES reaches it (as it reaches a
  gpu_autotuned_test); the client's TRITON_* do not, and the doctor names
  the one that differs when the client's set is passed
  (--test_arg=--client_env=...), and sees none once --test_env passes it;
- a FAIL (an unwritable Triton cache folder) fails the test;
- the runner stamp keys the GPU targets alone: when it changes, a
  gpu_autotuned_test target runs again while a CPU-only test of the same
  workspace stays a cache hit (--disk_cache).
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402
from tests_support import (BAZEL, copy_of_smoke_workspace, needs_bazel,  # noqa: E402
                           write_package)

pytestmark = needs_bazel

TARGET = "@rules_autotune//tools:gpu_doctor_test"
CHECKS = ["gpus", "device_nodes", "libcuda", "driver_ptxas", "c_compiler",
          "python_headers", "triton_cache", "lock_dir", "triton_env",
          "runner_stamp", "compiled", "kernel"]
SAVED = os.environ.get("AUTOTUNE_DOCTOR_OUTPUT")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    _, ws = copy_of_smoke_workspace(tmp_path_factory.mktemp("rules_autotune"))
    yield ws
    suite.bazel(ws, ["shutdown"])


def _doctor(ws, *args, expect=0, **env):
    environ = {k: v for k, v in os.environ.items()
               if k != "CUDA_VISIBLE_DEVICES" and not k.startswith("TRITON_")}
    environ.update(env)
    run = subprocess.run(
        [BAZEL] + suite.lock_dir_args(
            ["test", TARGET, "--test_output=all", "--cache_test_results=no",
             "--spawn_strategy=linux-sandbox"] + list(args)),
        cwd=ws, env=environ, capture_output=True, text=True)
    out = run.stdout + run.stderr
    assert run.returncode == expect, out[-4000:]
    lines = {}
    for line in out.splitlines():
        match = re.match(r"^(ok|warn|FAIL|skip)\s+(\w+)\s+(.*)$", line)
        if match:
            lines[match.group(2)] = (match.group(1), match.group(3))
    return out, lines


def test_the_doctor_checks_this_machine_inside_the_sandbox(workspace):
    out, lines = _doctor(workspace, CUDA_VISIBLE_DEVICES="3")
    shown = "\n".join(ln for ln in out.splitlines()
                      if re.match(r"^(ok|warn|FAIL|skip) |^GPU runner doctor"
                                  r"|^doctor: ", ln))
    print(shown)
    if SAVED:
        with open(SAVED, "w") as f:
            f.write(shown + "\n")
    assert list(lines) == CHECKS, shown
    assert "GPU runner doctor (inside bazel test;" in out
    assert not [n for n, (s, _) in lines.items() if s == "FAIL"], shown
    status, found = lines["gpus"]
    assert status == "warn" and found.startswith("no GPU here"), found
    assert "CUDA_VISIBLE_DEVICES='3'" in found  # inherited from the client
    status, found = lines["device_nodes"]
    assert status == "skip" and "/dev read-only" in found, found
    assert lines["driver_ptxas"][0] == "skip"
    assert "ptxas-blackwell (CUDA 13." in lines["driver_ptxas"][1]
    assert "R580+ driver" in lines["driver_ptxas"][1]
    assert lines["c_compiler"][0] == "ok"
    assert lines["python_headers"][0] == "ok"
    status, found = lines["triton_cache"]
    assert status == "ok" and "private to this test" in found, found
    assert "/triton-cache is writable" in found, found
    status, found = lines["kernel"]
    assert status == "ok" and "compiled for sm_90" in found, found
    assert "not launched: no GPU here" in found
    status, found = lines["triton_env"]
    assert status == "skip" and "--client_env" in found, found
    status, found = lines["runner_stamp"]
    assert status == "warn" and "AUTOTUNE_RUNNER_STAMP unset" in found, found
    assert lines["compiled"][0] == "skip"
    assert re.search(r"^doctor: \d+ ok, \d+ warn, 0 FAIL, \d+ skip$", out,
                     re.M), shown


def test_the_clients_triton_variables_are_compared(workspace):
    client = "TRITON_F32_DEFAULT=ieee\nTRITON_DEFAULT_FP_FUSION=0"
    _, lines = _doctor(workspace, f"--test_arg=--client_env={client}",
                       TRITON_F32_DEFAULT="ieee",
                       TRITON_DEFAULT_FP_FUSION="0")
    status, found = lines["triton_env"]
    assert status == "warn", found
    assert "TRITON_F32_DEFAULT client ieee test unset" in found, found
    assert "TRITON_DEFAULT_FP_FUSION client 0 test unset" in found, found
    assert "--test_env=TRITON_DEFAULT_FP_FUSION --test_env=" \
        "TRITON_F32_DEFAULT" in found
    _, lines = _doctor(workspace, f"--test_arg=--client_env={client}",
                       "--test_env=TRITON_F32_DEFAULT",
                       "--test_env=TRITON_DEFAULT_FP_FUSION",
                       TRITON_F32_DEFAULT="ieee",
                       TRITON_DEFAULT_FP_FUSION="0")
    status, found = lines["triton_env"]
    assert status == "ok" and "sees the client's" in found, found


def test_the_lock_folder_and_the_stamp_as_the_test_sees_them(workspace):
    """The client's AUTOTUNE_LOCK_DIR reaches a test only through
    --test_env: the doctor says so when the client's value is passed and
    the test has another. The stamp reaches the doctor (env_inherit, as
    for gpu_autotuned_test's targets) and matches this process."""
    from autotune.host import stamp
    client = "/var/lock/rules_autotune-client"
    _, lines = _doctor(workspace,
                       f"--test_arg=--client_env=AUTOTUNE_LOCK_DIR={client}",
                       AUTOTUNE_RUNNER_STAMP=stamp.current())
    status, found = lines["lock_dir"]
    assert status == "warn", found
    assert f"the client's AUTOTUNE_LOCK_DIR={client} did not reach this " \
        "test" in found, found
    status, found = lines["runner_stamp"]
    assert status == "ok" and "describes this process" in found, found


def test_a_failing_check_fails_the_test(workspace):
    # Outside the test's writable folders the sandbox is read-only.
    out, lines = _doctor(workspace,
                         "--test_env=TRITON_CACHE_DIR=/usr/doctor-cache",
                         expect=3)
    status, found = lines["triton_cache"]
    assert status == "FAIL" and "/usr/doctor-cache" in found, found
    assert "not writable" in found
    assert re.search(r"^doctor: .* 1 FAIL", out, re.M), out[-3000:]


def test_a_stamp_change_reruns_gpu_targets_only(workspace, tmp_path):
    """A runner whose stamp changed (here its driver branch, a field the
    tests do not check) runs the gpu_autotuned_test target again, while a
    CPU-only test of the same workspace keeps its cached result."""
    write_package(workspace, "stamped", {
        "BUILD.bazel":
            'load("@rules_autotune//rules:defs.bzl", "gpu_autotuned_test")\n'
            'sh_test(name = "cpu_only_test", srcs = ["probe.sh"])\n'
            'gpu_autotuned_test(name = "gpu_test", srcs = ["probe.sh"], '
            'test_rule = sh_test)\n',
        "probe.sh": "#!/bin/sh\necho probe\n"},
        executables=["probe.sh"])
    gpu, cpu = "//stamped:gpu_test", "//stamped:cpu_only_test"
    printed = subprocess.run([sys.executable, os.path.join(
        ROOT, "tools", "runner_stamp.py")], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr[-2000:]
    runner = printed.stdout.strip()

    def test_with(driver):
        environ = dict(os.environ,
                       AUTOTUNE_RUNNER_STAMP=f"{runner};driver={driver}")
        run = subprocess.run(
            [BAZEL] + suite.lock_dir_args(
                ["test", f"--disk_cache={tmp_path / 'disk'}",
                 "--cache_test_results=yes", gpu, cpu]),
            cwd=workspace, env=environ, capture_output=True, text=True)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-4000:]
        status = {t: " ".join(ln.split()[1:]) for ln in out.splitlines()
                  for t in (gpu, cpu) if ln.startswith(t + " ")}
        processes = [ln for ln in out.splitlines()
                     if re.match(r"^INFO: \d+ process", ln)]
        print(f"driver={driver}: {status} {processes}")
        return status

    first = test_with("570")
    assert "(cached)" not in first[cpu] and "PASSED" in first[cpu], first
    again = test_with("580")
    assert again[cpu].startswith("(cached) PASSED"), again
    assert "(cached)" not in again[gpu] and "PASSED" in again[gpu], again


def test_a_kept_triton_cache_keeps_the_per_process_builds(workspace,
                                                          tmp_path):
    """The runner page's recipe (docs/gpu-runners.md#a-persistent-triton-cache):
    Triton's per-process C builds (cuda_utils; launchers on 3.6) are made
    in every test process while each test has its private Triton cache,
    and once only with --test_env=TRITON_CACHE_DIR=DIR
    --sandbox_writable_path=DIR. A stub libcuda.so.1 stands in for the
    driver (one folder for every run: Triton 3.9 keys the modules by it)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import json

    import per_process_builds
    stub = tmp_path / "stub-libcuda"
    stub.mkdir()
    per_process_builds._stub_libcuda(str(stub))
    script = os.path.join(os.path.dirname(os.path.dirname(workspace)),
                          "bench", "per_process_builds.py")
    write_package(workspace, "builds", {
        "BUILD.bazel": 'sh_test(name = "builds_test", '
                       'srcs = ["builds_test.sh"])\n',
        # As `import autotune` does: a private cache unless one is given.
        "builds_test.sh": "#!/bin/sh\nset -e\n"
                          ': "${TRITON_CACHE_DIR:=$TEST_TMPDIR/triton-cache}"\n'
                          "export TRITON_CACHE_DIR\n"
                          f"exec python3 {script} --stub\n"},
        executables=["builds_test.sh"])
    target = "//builds:builds_test"
    kept = tmp_path / "kept-triton-cache"
    kept.mkdir()

    def builds(*args):
        run = subprocess.run(
            [BAZEL, "test", target, "--cache_test_results=no",
             f"--test_env=TRITON_LIBCUDA_PATH={stub}"] + list(args),
            cwd=workspace, capture_output=True, text=True)
        assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        figures = json.loads([ln for ln in suite.test_log(
            workspace, target).splitlines() if ln.startswith('{"triton"')][-1])
        print(per_process_builds.summary_line(figures, figures))
        return figures["cuda_utils_builds"] + figures["launcher_builds"]

    private = [builds(), builds()]
    assert private[0] >= 1 and private[1] == private[0], private
    recipe = [f"--test_env=TRITON_CACHE_DIR={kept}",
              f"--sandbox_writable_path={kept}"]
    assert builds(*recipe) == private[0]
    assert builds(*recipe) == 0
