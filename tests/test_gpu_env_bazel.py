"""What a GPU test sees of the device environment under a real, sandboxed
`bazel test`, from a user's workspace (a copy of e2e/smoke, which reaches
this repository as @rules_autotune), with a package of its own:

- `CUDA_VISIBLE_DEVICES=3 bazel test ...`: the load and dump targets of a
  gpu_autotuned_test (a py_test and an sh_test) see 3 (the macros give
  them `env_inherit = ["CUDA_VISIBLE_DEVICES"]`; without it Bazel hands a
  test a fresh environment and every test sees every GPU). A caller's own
  env_inherit is joined to it. Unset in the client, it is unset in the test.
- `import autotune` in a test sets MPLCONFIGDIR to a folder under the
  test's TEST_TMPDIR (the account's home is read-only in the sandbox, and
  matplotlib warns at import that its config folder is not writable).
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
from tests_support import (BAZEL, copy_of_smoke_workspace,  # noqa: E402
                           needs_bazel, write_package)

pytestmark = needs_bazel

BUILD = """\
load("@rules_autotune//rules:defs.bzl", "gpu_autotuned_test")
load("@rules_python//python:defs.bzl", "py_test")
load("@rules_shell//shell:sh_test.bzl", "sh_test")

gpu_autotuned_test(
    name = "visible_py_test",
    srcs = ["visible_py_test.py"],
    main = "visible_py_test.py",
    test_rule = py_test,
)

gpu_autotuned_test(
    name = "visible_sh_test",
    srcs = ["visible_sh_test.sh"],
    env_inherit = ["GPU_ENV_PROBE"],
    test_rule = sh_test,
)

# A test of the same workspace that is no GPU test.
sh_test(
    name = "plain_sh_test",
    srcs = ["visible_sh_test.sh"],
)
"""

PY_TEST = '''\
import os

import autotune  # noqa: F401  (MPLCONFIGDIR under TEST_TMPDIR)

print("py sees CUDA_VISIBLE_DEVICES=%s"
      % os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
mpl = os.environ.get("MPLCONFIGDIR", "<unset>")
tmp = os.environ["TEST_TMPDIR"]
try:
    import matplotlib  # creates its config folder, or warns and uses /tmp
    used = matplotlib.get_configdir()
except ImportError:
    used = mpl
print("py sees MPLCONFIGDIR under TEST_TMPDIR: %s"
      % (mpl.startswith(tmp + os.sep) and used == mpl))
'''

SH_TEST = """\
#!/bin/sh
echo "sh sees CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
echo "sh sees GPU_ENV_PROBE=${GPU_ENV_PROBE-<unset>}"
echo "sh sees AUTOTUNE_RUNNER_STAMP=${AUTOTUNE_RUNNER_STAMP-<unset>}"
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    _, ws = copy_of_smoke_workspace(tmp_path_factory.mktemp("rules_autotune"))
    write_package(ws, "gpuenv", {"BUILD.bazel": BUILD,
                                 "visible_py_test.py": PY_TEST,
                                 "visible_sh_test.sh": SH_TEST},
                  executables=["visible_sh_test.sh"])
    # The stamp reaches the GPU targets through the macro alone: no
    # --test_env line hands it to every test.
    rc = os.path.join(ws, ".bazelrc")
    with open(rc) as f:
        lines = [line for line in f
                 if "--test_env=AUTOTUNE_RUNNER_STAMP" not in line]
    with open(rc, "w") as f:
        f.writelines(lines)
    yield ws
    suite.bazel(ws, ["shutdown"])


TARGETS = ["//gpuenv:visible_py_test", "//gpuenv:visible_sh_test",
           "//gpuenv:visible_py_test_autotune_dump"]


def _test(ws, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("CUDA_VISIBLE_DEVICES", "GPU_ENV_PROBE",
                            "AUTOTUNE_RUNNER_STAMP")}
    environ.update(env)
    run = subprocess.run(
        [BAZEL] + suite.lock_dir_args(
            ["test", "--test_output=all", "--spawn_strategy=linux-sandbox"]
            + TARGETS), cwd=ws, env=environ, capture_output=True, text=True)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    return out


def _seen(out, what):
    return re.findall(rf"^{what} sees CUDA_VISIBLE_DEVICES=(\S+)$", out, re.M)


def test_the_clients_visible_devices_reach_the_tests(workspace):
    out = _test(workspace, CUDA_VISIBLE_DEVICES="3", GPU_ENV_PROBE="probe")
    print("CUDA_VISIBLE_DEVICES=3 bazel test ...:",
          sorted(set(re.findall(r"^\w+ sees .*$", out, re.M))))
    assert _seen(out, "py") == ["3", "3"], out[-4000:]  # load and dump
    assert _seen(out, "sh") == ["3"], out[-4000:]
    assert "sh sees GPU_ENV_PROBE=probe" in out  # the caller's, joined
    assert out.count("py sees MPLCONFIGDIR under TEST_TMPDIR: True") == 2


def test_unset_in_the_client_is_unset_in_the_test(workspace):
    out = _test(workspace)
    assert _seen(out, "py") == ["<unset>", "<unset>"], out[-4000:]
    assert _seen(out, "sh") == ["<unset>"], out[-4000:]


def _stamped(ws, stamp):
    """`bazel test` of a GPU target and a plain test under a stamp: what
    each saw, which ran, and Bazel's process line."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("CUDA_VISIBLE_DEVICES", "GPU_ENV_PROBE")}
    environ["AUTOTUNE_RUNNER_STAMP"] = stamp
    run = subprocess.run(
        [BAZEL, "test", "--test_output=all", "--spawn_strategy=linux-sandbox",
         "//gpuenv:visible_sh_test", "//gpuenv:plain_sh_test"],
        cwd=ws, env=environ, capture_output=True, text=True)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    cached = set(re.findall(r"^//gpuenv:(\w+)\s+\(cached\) PASSED", out, re.M))
    processes = re.search(r"^INFO: \d+ process(es)?:.*$", out, re.M)
    return out, cached, processes.group(0) if processes else ""


def test_the_stamp_keys_the_gpu_targets_and_no_other_test(workspace):
    """The macro's targets inherit AUTOTUNE_RUNNER_STAMP (env_inherit, on
    Bazel 4.2.3): a GPU target sees it and reruns when it changes; a plain
    test of the same workspace does not see it and stays a cache hit."""
    first, _, line = _stamped(workspace, "device=A;triton=1")
    print("stamp device=A;triton=1:", line)
    assert "sh sees AUTOTUNE_RUNNER_STAMP=device=A;triton=1" in first
    assert "sh sees AUTOTUNE_RUNNER_STAMP=<unset>" in first  # plain_sh_test
    again, cached, line = _stamped(workspace, "device=A;triton=1")
    print("the same stamp again:", line, sorted(cached))
    assert cached == {"visible_sh_test", "plain_sh_test"}, again[-3000:]
    changed, cached, line = _stamped(workspace, "device=A;triton=2")
    print("stamp device=A;triton=2:", line, sorted(cached))
    assert cached == {"plain_sh_test"}, changed[-3000:]
    assert "sh sees AUTOTUNE_RUNNER_STAMP=device=A;triton=2" in changed
