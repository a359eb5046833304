"""Compiled kernels under a real, sandboxed `bazel test`, from a user's
workspace (a copy of e2e/smoke, which reaches this repository as
@rules_autotune), with a package of its own:

- `sandbox_compile_test` imports its kernels and compiles one for sm_90
  with Triton's compiler inside the test's sandbox: Triton's cache is the
  test's own folder under TEST_TMPDIR (the account's home is read-only
  there; before that rule the compile failed with "Read-only file
  system").
- `served_test` is a gpu_autotuned_test(compile_for = ["sm_90"]): a build
  action compiles the checked-in cache's winners for sm_90; the test
  replays every winner's launch with an sm_90 driver stand-in, and each
  launch's own compile is served from that directory (none compiled).
- After `bazel clean`, the same --disk_cache replays the build: the
  compile action and the tests are disk-cache hits, nothing executes.
"""
import json
import os
import re
import shutil
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

# The package of `served_test` alone (the remote cache tests use it too).
SERVED_BUILD = """\
load("@rules_autotune//rules:defs.bzl", "gpu_autotuned_test")
load("@rules_python//python:defs.bzl", "py_test")

gpu_autotuned_test(
    name = "served_test",
    srcs = ["served_test.py", "gpu_standin.py"],
    main = "served_test.py",
    autotune_cache = "compiled.textproto",
    compile_for = ["sm_90"],
    require_complete = True,
    test_rule = py_test,
    deps = ["//:mykernels"],
)
"""
BUILD = SERVED_BUILD + """
gpu_autotuned_test(
    name = "sandbox_compile_test",
    srcs = ["sandbox_compile_test.py"],
    main = "sandbox_compile_test.py",
    test_rule = py_test,
    deps = ["//:mykernels"],
)
"""

SANDBOX_COMPILE_TEST = '''\
"""Compiles the workspace's kernel for sm_90 inside the test's sandbox."""
import autotune  # first: the private Triton cache, the interpreter
import os

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from autotune import unwrap
from mykernels.scale_shift import scale_shift_kernel

jit = JITFunction(unwrap.python_function(scale_shift_kernel))
compiled = triton.compile(
    ASTSource(jit, {"x": "*fp32", "y": "*fp32", "n": "i32", "scale": "fp32",
                    "shift": "fp32", "BLOCK": "constexpr"},
              constexprs={(5,): 128}),
    target=GPUTarget("cuda", 90, 32))
assert compiled.asm["cubin"], "no cubin"
print("compiled for sm_90 into", os.environ.get("TRITON_CACHE_DIR"))
'''

SERVED_TEST = '''\
"""Every winner's launch on an sm_90 machine (a driver stand-in) is served
from the compiled kernels the build made: none compiles here."""
import os

# Kernels as a GPU machine has them (JITFunctions), on this CPU.
os.environ["TRITON_INTERPRET"] = "0"
import autotune  # noqa: E402  (the compiled kernels' cache manager)
import torch  # noqa: E402

from autotune.binaries import triton_cache  # noqa: E402
from gpu_standin import count_launch_compiles, stand_in_gpu_backend  # noqa: E402

launches = count_launch_compiles()
session = autotune.configure(backend=stand_in_gpu_backend())
from mykernels.scale_shift import scale_shift  # noqa: E402

for n in SIZES:
    scale_shift(torch.empty(n), 2.0, 1.0)
served, missed = triton_cache.ServedCounts.served, \\
    triton_cache.ServedCounts.missed
print(f"served {served} of {len(launches)} launch compiles, {missed} missed;"
      f" {session.stats.hits} hits; compiled kernels from "
      f"{os.environ.get(triton_cache.COMPILED_DIRS_ENV)} "
      f"({os.environ.get('TRITON_CACHE_MANAGER')}; "
      f"{os.environ.get('AUTOTUNE_FLAGS')})")
assert launches and served == len(launches) and missed == 0, (launches,
                                                               served, missed)
'''


def _cache_with_requests(ws, path, sizes):
    """The workspace's kernel tuned on the interpreter and dumped with its
    compile requests, as a dump target would write it."""
    script = ("import torch\nfrom mykernels.scale_shift import scale_shift\n"
              f"for n in {sizes!r}:\n    scale_shift(torch.arange(n, "
              "dtype=torch.float32), 2.0, 1.0)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ws, ROOT]),
               AUTOTUNE_FLAGS=f"--dump_autotune_results_to={path}")
    run = subprocess.run([sys.executable, "-c", script], cwd=ws, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def smoke_workspace_sharing_mykernels(tmp_path_factory):
    """A copy of e2e/smoke whose //:mykernels any package may use; returns
    its path."""
    _, ws = copy_of_smoke_workspace(tmp_path_factory.mktemp("rules_autotune"))
    root_build = os.path.join(ws, "BUILD.bazel")
    with open(root_build) as f:
        text = f.read()
    with open(root_build, "w") as f:  # the new package's tests use it
        f.write(text.replace('name = "mykernels",', 'name = "mykernels",\n'
                             '    visibility = ["//visibility:public"],', 1))
    return ws


def write_served_package(ws, package, build, files=None):
    """The package `package` with `build` for its BUILD file, `files` and
    `served_test` (with the sm_90 driver stand-in) whose checked-in cache
    holds compile requests for each size it replays; returns its path."""
    sizes = (100, 1024)  # n not divisible by 16, and divisible
    pkg = write_package(ws, package, {
        **(files or {}), "BUILD.bazel": build,
        "served_test.py": SERVED_TEST.replace("for n in SIZES",
                                              f"for n in {sizes!r}")})
    shutil.copy(os.path.join(HERE, "gpu_standin.py"), pkg)
    _cache_with_requests(ws, os.path.join(pkg, "compiled.textproto"), sizes)
    return pkg


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = smoke_workspace_sharing_mykernels(tmp_path_factory)
    write_served_package(ws, "compiled", BUILD, {
        "sandbox_compile_test.py": SANDBOX_COMPILE_TEST})
    yield ws
    suite.bazel(ws, ["shutdown"])


def _bazel(ws, *args):
    return subprocess.run([BAZEL] + suite.lock_dir_args(list(args)), cwd=ws,
                          capture_output=True, text=True)


def test_a_kernel_compiles_for_sm_90_inside_the_sandbox(workspace):
    run = _bazel(workspace, "test", "//compiled:sandbox_compile_test",
                 "--test_output=all", "--spawn_strategy=linux-sandbox",
                 "--nosandbox_debug")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "compiled for sm_90 into" in run.stdout
    assert "/triton-cache" in run.stdout


def test_winners_are_served_from_a_cached_build_action(workspace, tmp_path):
    disk = str(tmp_path / "disk-cache")
    args = ["test", "//compiled:served_test", "--test_output=all",
            "--nosandbox_debug",
            "--spawn_strategy=linux-sandbox", f"--disk_cache={disk}"]
    first = _bazel(workspace, *args)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-6000:]
    m = re.search(r"served (\d+) of (\d+) launch compiles, 0 missed", out)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 2, out[-4000:]
    assert "Compiling the autotuned kernels" in out or \
        "AutotuneCompileKernels" in out, out[-4000:]
    assert _bazel(workspace, "clean").returncode == 0
    log = str(tmp_path / "exec.json")
    again = _bazel(workspace, *args, f"--execution_log_json_file={log}")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    processes = re.search(r"INFO: (\d+) process(?:es)?: (.*)\.", out)
    assert processes, out[-4000:]
    print("after bazel clean:", processes.group(0))
    # Bazel 4 counts disk cache hits as "remote cache hit".
    assert re.search(r"(?:remote|disk) cache hit", processes.group(2)), \
        processes.group(0)
    spawns = _spawns(log)
    # A replayed test still gets its test.xml written (generate-xml.sh,
    # a TestRunner spawn of its own): not the test running.
    executed = sorted(s["mnemonic"] for s in spawns
                      if not s.get("remoteCacheHit") and not any(
                          "generate-xml" in a for a in s.get("commandArgs",
                                                             ())))
    print("executed after bazel clean:", executed)
    hits = {s["mnemonic"] for s in spawns if s.get("remoteCacheHit")}
    assert "AutotuneCompileKernels" in hits, spawns
    assert "TestRunner" in hits, spawns
    assert "AutotuneCompileKernels" not in executed
    assert "TestRunner" not in executed
    assert "(cached) PASSED" in out


def _spawns(path):
    """The spawns of a JSON execution log (concatenated JSON objects)."""
    with open(path) as f:
        text = f.read()
    decoder, at, spawns = json.JSONDecoder(), 0, []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return spawns
        obj, at = decoder.raw_decode(text, at)
        spawns.append(obj)
