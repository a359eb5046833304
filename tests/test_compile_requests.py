"""The one record of what a launch compiles
(autotune/binaries/compile_requests.py): a request held against its
entry, a request built from the record alone, and the one worker pool
that builds them. (tests/test_compile_check.py: `autotune_cache compile`
refusing requests; tests/test_compiled_kernels.py: a dump's requests
compiled and served.)"""
import os
import signal
import subprocess
import sys
import time

import triton

from autotune.binaries import compile_requests
from autotune.records import CompileRequest

from tests_support import environment, process_alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mismatch_compares_the_whole_name():
    class Entry:
        class key:
            kernel = "scale_kernel"

    request = CompileRequest("compile_check_kernels:Other.scale_kernel",
                             "x:*fp32:D", "num_warps=4", "3.9.0")
    assert "names kernel Other.scale_kernel, the entry is for " \
        "scale_kernel" in compile_requests.mismatch(request, Entry)
    # The tree knows the kernel's module: a request naming another one,
    # with the same last part, is not its launch.
    request = CompileRequest("other_kernels:scale_kernel", "x:*fp32:D",
                             "num_warps=4", "3.9.0")
    assert compile_requests.mismatch(
        request, Entry, full_names={
            "scale_kernel": "compile_check_kernels:scale_kernel"}) == (
        "compile request names kernel other_kernels:scale_kernel, the "
        "tree's scale_kernel is compile_check_kernels:scale_kernel")


def test_pool_workers_die_with_their_parent():
    """A compile killed with SIGKILL leaves no worker behind."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import time\n"
         "from autotune.binaries import compile_requests\n"
         "compile_requests.run_pool(time.sleep, [120, 120], 2)"],
        cwd=ROOT, env=environment())
    try:
        deadline = time.monotonic() + 60
        workers = []
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            workers = _children(parent.pid)
        # The pool's two workers (and multiprocessing's resource tracker).
        assert len(workers) >= 2, workers
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while any(map(process_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [pid for pid in workers if process_alive(pid)]
    for pid in alive:  # the test's own leftovers
        os.kill(pid, signal.SIGKILL)
    assert not alive, alive


def _children(pid):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def test_a_request_for_a_kernel_bound_under_another_name_is_built(
        tmp_path, monkeypatch):
    """A request names the Python function (`add_one`); the module's kernel
    made of it (`add_one_kernel`) is what is built."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    request = CompileRequest(
        "autotune.cli.doctor_kernel:add_one", "x:*fp32: n:i32: BLOCK=16 "
        '@attrs=[[[0],[]],[[1],[]],[[2],[]]]', "num_warps=1 num_stages=1",
        triton.__version__)
    [done] = compile_requests.run_pool(compile_requests.build, [(
        request, ("cuda", 90, 32), ("autotune.cli.doctor_kernel",), ())],
        1, apart=True)
    assert done["ok"], done
    assert done["config"] == "BLOCK=16 num_warps=1 num_stages=1", done
