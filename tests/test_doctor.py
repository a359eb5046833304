"""The GPU runner doctor (autotune/cli/doctor.py) and its checks
(autotune/cli/doctor_checks.py), each against
stand-ins for the machine: a folder for /dev (read-only by a bind mount),
a driver version file, a ptxas answering a CUDA release, a PATH without
gcc, a broken Python.h, a read-only Triton cache folder, the client's
TRITON_* against the test's. The tiny kernel is compiled for sm_90 for
real (Triton's own ptxas, or a stand-in ptxas that fails). The sandboxed
run under `bazel test` is tests/test_gpu_doctor_bazel.py."""
import contextlib
import os
import pathlib
import stat
import subprocess
import sys
import tempfile

import pytest

from autotune.cli import doctor, doctor_checks, doctor_machine
from tests_support import ROOT, environment, tool

H200 = ("NVIDIA H200", (9, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
DRIVER_570 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  "
              "Fri Jan 24 23:00:00 UTC 2026\nGCC version:  gcc 12\n")
DRIVER_580_OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                   "580.95.05  Release Build  (dvs-builder@U16)  Thu Sep 25\n")


def machine(tmp_path, gpus=(), driver=None, nodes=(), environ=None, **kw):
    """A Machine of stand-ins in a folder of its own: no GPU, no driver,
    an empty /dev unless told otherwise. Device nodes are character
    devices (/dev/null's numbers) where mknod is allowed, as on a real
    /dev; plain files elsewhere."""
    where = pathlib.Path(tempfile.mkdtemp(dir=tmp_path))
    dev = where / "dev"
    dev.mkdir()
    for name in nodes:
        try:
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            (dev / name).write_text("")
    driver_file = where / "driver-version"
    if driver is not None:
        driver_file.write_text(driver)
    base = {"PATH": os.environ.get("PATH", "")}
    base.update(environ or {})
    defaults = dict(
        environ=base, dev=str(dev), driver_file=str(driver_file),
        smi_driver=lambda: "",
        gpus=gpus if callable(gpus) else (lambda: list(gpus)),
        torch_build=lambda: ("2.13.0", "12.8" if gpus or driver else None),
        # Triton 3.9's rule, as a stand-in (the real one: triton_ptxas).
        ptxas=lambda arch: (f"/wheel/bin/ptxas{'-blackwell' * (arch >= 90)}",
                            "13.4" if arch >= 90 else "12.9",
                            "TRITON_PTXAS_BLACKWELL_PATH" if arch >= 90
                            else "TRITON_PTXAS_PATH"),
        ldconfig=str(_script(where, "ldconfig", "")))
    defaults.update(kw)
    return doctor_machine.Machine(**defaults)


@contextlib.contextmanager
def read_only_dev(m):
    """The stand-in /dev of `m` read-only (as under the sandbox); skips
    where its nodes are plain files (a read-only mount makes those
    unwritable, real device nodes stay writable)."""
    dev = pathlib.Path(m.dev)
    if any(not stat.S_ISCHR(p.stat().st_mode) for p in dev.iterdir()):
        pytest.skip("needs mknod for stand-in device nodes")
    with read_only(dev):
        yield


def _script(tmp_path, name, body, code=0):
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{body}\nEOF\nexit {code}\n")
    path.chmod(0o755)
    return path


def state_of(m):
    """The state the earlier checks leave (gpus, driver, nodes)."""
    state = doctor_machine.State()
    doctor_checks.check_gpus(m, state)
    return state


def run(check, m, state=None):
    return check(m, state if state is not None else state_of(m))


@contextlib.contextmanager
def read_only(path):
    """`path` (a folder) made read-only for everyone, root included: a
    read-only bind mount of itself; skips where it cannot mount."""
    path.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    bind = subprocess.run(["mount", "--bind", str(path), str(path)],
                          capture_output=True)
    if bind.returncode != 0:
        pytest.skip("needs mount")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)],
                          capture_output=True).returncode != 0:
            pytest.skip("needs a read-only remount")
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


# -- gpus ------------------------------------------------------------------

def test_gpus_lists_the_visible_gpus_and_cuda_visible_devices(tmp_path):
    m = machine(tmp_path, gpus=[H200, H200], driver=DRIVER_580_OPEN,
                nodes=["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"],
                environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    state = doctor_machine.State()
    line = doctor_checks.check_gpus(m, state)
    assert line.status == "ok", line
    assert line.found == ("2 GPUs: NVIDIA H200 (sm_90) x2; "
                          "CUDA_VISIBLE_DEVICES='2,3'")
    assert state.arch == 90 and state.driver == "580.95.05"


def test_no_gpu_and_no_driver_is_said_and_only_a_warning(tmp_path):
    line = run(doctor_checks.check_gpus, machine(tmp_path))
    assert line.status == "warn", line
    assert line.found.startswith("no GPU here: no NVIDIA driver")
    assert "a CPU build" in line.found
    assert "CUDA_VISIBLE_DEVICES unset" in line.found


def test_a_driver_without_visible_gpus_fails_naming_why(tmp_path):
    cpu_torch = machine(tmp_path, driver=DRIVER_570, nodes=["nvidia0"],
                        torch_build=lambda: ("2.13.0+cpu", None))
    line = run(doctor_checks.check_gpus, cpu_torch)
    assert line.status == "FAIL", line
    assert "driver 570.86.15, 1 " in line.found and "a CPU build" in line.found
    assert "CUDA build of torch" in line.fix
    hidden = machine(tmp_path, driver=DRIVER_570, nodes=["nvidia0"],
                     environ={"CUDA_VISIBLE_DEVICES": ""})
    line = run(doctor_checks.check_gpus, hidden)
    assert line.status == "FAIL" and "CUDA_VISIBLE_DEVICES=''" in line.found
    assert "names no device" in line.fix

    def cuda_fails():
        raise RuntimeError("CUDA driver initialization failed\nmore")
    line = run(doctor_checks.check_gpus, machine(tmp_path, driver=DRIVER_570,
                                          nodes=["nvidia0"], gpus=cuda_fails))
    assert "(CUDA driver initialization failed)" in line.found, line


def test_torch_missing_fails(tmp_path):
    def no_torch():
        raise ImportError("No module named 'torch'")
    line = run(doctor_checks.check_gpus,
               machine(tmp_path, torch_build=no_torch))
    assert line.status == "FAIL" and "torch cannot be imported" in line.found


# -- device nodes ----------------------------------------------------------

def test_device_nodes_all_there_on_a_read_only_dev(tmp_path):
    m = machine(tmp_path, gpus=[H200] * 2, driver=DRIVER_580_OPEN,
                nodes=["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm",
                       "nvidia-uvm-tools"])
    with read_only_dev(m):
        line = run(doctor_checks.check_device_nodes, m)
    assert line.status == "ok", line
    assert line.found.startswith("nvidia-uvm, nvidia-uvm-tools, nvidiactl, "
                                 "nvidia0-1; ")
    assert "read-only" in line.found


def test_a_missing_uvm_node_on_a_read_only_dev_fails(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                nodes=["nvidia0", "nvidiactl"])
    with read_only_dev(m):
        line = run(doctor_checks.check_device_nodes, m)
    assert line.status == "FAIL", line
    assert "missing nvidia-uvm" in line.found
    assert "cannot make them" in line.found
    assert "nvidia-modprobe" in line.fix and "at boot" in line.fix
    # Writable (outside the sandbox): a warning, CUDA may make it as root.
    line = run(doctor_checks.check_device_nodes, m)
    assert line.status == "warn" and "writable" in line.found, line


def test_no_device_nodes_without_a_gpu_is_a_skip(tmp_path):
    m = machine(tmp_path)
    with read_only_dev(m):
        line = run(doctor_checks.check_device_nodes, m)
    assert line.status == "skip" and "read-only" in line.found, line


def test_unreadable_device_nodes_fail(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every node")
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                nodes=["nvidia0", "nvidiactl", "nvidia-uvm"])
    (pathlib.Path(m.dev) / "nvidia0").chmod(0)
    line = run(doctor_checks.check_device_nodes, m)
    assert line.status == "FAIL" and "nvidia0" in line.found


# -- libcuda ---------------------------------------------------------------

def test_libcuda_through_triton_libcuda_path(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                environ={"TRITON_LIBCUDA_PATH": str(folder)})
    line = run(doctor_checks.check_libcuda, m)
    assert line.status == "FAIL" and "holds no libcuda.so.1" in line.found
    (folder / "libcuda.so.1").write_text("")
    line = run(doctor_checks.check_libcuda, m)
    assert line.status == "ok" and "through TRITON_LIBCUDA_PATH" in line.found


def test_libcuda_through_the_ldconfig_cache(tmp_path):
    ldconfig = _script(tmp_path, "ldconfig-p", "1 libs found in cache\n"
                       "\tlibcuda.so.1 (libc6,x86-64) => "
                       "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                ldconfig=str(ldconfig))
    line = run(doctor_checks.check_libcuda, m)
    assert line.status == "ok", line
    assert line.found.startswith("/usr/lib/x86_64-linux-gnu/libcuda.so.1, "
                                 "through the ldconfig cache")


def test_libcuda_only_through_ld_library_path_is_a_warning(tmp_path):
    folder = tmp_path / "nvidia-lib"
    folder.mkdir()
    (folder / "libcuda.so.1").write_text("")
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                environ={"LD_LIBRARY_PATH": f"/nowhere:{folder}"})
    line = run(doctor_checks.check_libcuda, m)
    assert line.status == "warn", line
    assert "only through LD_LIBRARY_PATH" in line.found
    assert "incompatible_strict_action_env=false" in line.found
    assert "ld.so.conf.d" in line.fix


def test_no_libcuda_fails_with_a_driver_and_is_skipped_without(tmp_path):
    line = run(doctor_checks.check_libcuda,
               machine(tmp_path, driver=DRIVER_570, nodes=["nvidia0"]))
    assert line.status == "FAIL" and "no libcuda.so.1" in line.found, line
    line = run(doctor_checks.check_libcuda, machine(tmp_path))
    assert line.status == "skip", line


def test_a_missing_ldconfig_fails_on_a_gpu_machine(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                ldconfig=str(tmp_path / "no-ldconfig"))
    line = run(doctor_checks.check_libcuda, m)
    assert line.status == "FAIL" and "no-ldconfig -p" in line.found, line
    assert "TRITON_LIBCUDA_PATH" in line.fix


# -- the driver against ptxas ----------------------------------------------

def test_an_r570_driver_fails_against_the_wheels_cuda_13_ptxas(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_570)
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "FAIL", line
    assert "driver 570.86.15 is older than" in line.found
    assert "CUDA 13.4, from Triton's wheel) for sm_90" in line.found
    assert "R580+ driver" in line.found
    assert "TRITON_PTXAS_BLACKWELL_PATH" in line.fix and "R580+" in line.fix


def test_an_r580_driver_runs_it(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN)
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "ok", line
    assert line.found.startswith("driver 580.95.05 runs what ptxas")


def test_an_older_ptxas_for_the_older_driver_passes(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_570,
                ptxas=lambda arch: ("/usr/local/cuda-12.8/bin/ptxas", "12.8",
                                    "TRITON_PTXAS_BLACKWELL_PATH"),
                environ={"TRITON_PTXAS_BLACKWELL_PATH":
                         "/usr/local/cuda-12.8/bin/ptxas"})
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "ok", line
    assert "from TRITON_PTXAS_BLACKWELL_PATH=" in line.found


def test_sm_80_is_built_by_the_other_ptxas(tmp_path):
    line = run(doctor_checks.check_driver_ptxas,
               machine(tmp_path, gpus=[A100], driver=DRIVER_570))
    assert line.status == "ok" and "for sm_80" in line.found, line
    assert "CUDA 12.9" in line.found
    assert doctor_checks.ptxas_variable(80) == "TRITON_PTXAS_PATH"


def test_no_driver_says_which_driver_the_ptxas_needs(tmp_path):
    line = run(doctor_checks.check_driver_ptxas, machine(tmp_path))
    assert line.status == "skip", line
    assert "needs an R580+ driver" in line.found
    assert "TRITON_PTXAS_BLACKWELL_PATH" in line.fix


def test_the_driver_version_from_nvidia_smi_without_the_proc_file(tmp_path):
    m = machine(tmp_path, gpus=[H200], smi_driver=lambda: "575.51.03")
    assert doctor_machine.driver_version(m) == ("575.51.03", "nvidia-smi")
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "FAIL" and "575.51.03" in line.found


# Triton 3.6 builds sm_90 with bin/ptxas (CUDA 12.8; TRITON_PTXAS_PATH)
# and only sm_100+ with ptxas-blackwell; Triton 3.9 builds sm_90+ with
# ptxas-blackwell (CUDA 13; TRITON_PTXAS_BLACKWELL_PATH).
TRITON_36_RULE = lambda arch: (  # noqa: E731
    f"/wheel/bin/ptxas{'-blackwell' * (arch >= 100)}",
    "12.9" if arch >= 100 else "12.8",
    "TRITON_PTXAS_BLACKWELL_PATH" if arch >= 100 else "TRITON_PTXAS_PATH")


def test_the_ptxas_triton_uses_is_asked_of_triton(tmp_path, monkeypatch):
    """Whatever the installed Triton's rule: the variable the doctor names
    is the one that moves Triton to another ptxas, and no other does
    (Triton 3.9 builds sm_90 with ptxas-blackwell, 3.6 to 3.8 only sm_100
    and later, 3.5 every target with one ptxas: tests/test_doctor.py runs
    under each in .ci/matrix)."""
    ptxas = _script(tmp_path, "ptxas", "Cuda compilation tools, release "
                    "12.8, V12.8.93")
    for name in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        monkeypatch.delenv(name, raising=False)
    for arch in (80, 90, 100):
        path, release, variable = doctor_machine.triton_ptxas(arch)
        assert os.path.isfile(path) and release[:2].isdigit(), path
        assert variable in ("TRITON_PTXAS_PATH",
                            "TRITON_PTXAS_BLACKWELL_PATH")
        for name in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
            monkeypatch.setenv(name, str(ptxas))
            moved = doctor_machine.triton_ptxas(arch)
            monkeypatch.delenv(name)
            assert (moved[:2] == (str(ptxas), "12.8")) == (name == variable), \
                (arch, name, variable, moved)
        # The doctor's advice names what Triton itself was seen to read.
        assert doctor_checks.ptxas_variable(arch) == variable, (arch, variable)


def test_under_triton_36s_rule_the_advice_is_36s(tmp_path):
    """A runner on Triton 3.6 with an R570 driver: sm_90 is built by
    bin/ptxas, TRITON_PTXAS_PATH moves it; TRITON_PTXAS_BLACKWELL_PATH,
    3.9's variable, is named as unread."""
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_570,
                ptxas=TRITON_36_RULE)
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "ok", line  # CUDA 12.8 on R570
    assert "ptxas /wheel/bin/ptxas (CUDA 12.8, from Triton's wheel) for " \
        "sm_90" in line.found
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_570,
                ptxas=lambda arch: ("/opt/cuda-12.4/bin/ptxas", "12.4",
                                    "TRITON_PTXAS_PATH"),
                environ={"TRITON_PTXAS_PATH": "/opt/cuda-12.4/bin/ptxas"})
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "ok", line
    assert "from TRITON_PTXAS_PATH=/opt/cuda-12.4/bin/ptxas" in line.found
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_570,
                ptxas=TRITON_36_RULE, environ={
                    "TRITON_PTXAS_BLACKWELL_PATH": "/opt/cuda/bin/ptxas"})
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "warn", line
    assert "TRITON_PTXAS_BLACKWELL_PATH is set, but this Triton does not " \
        "read it for sm_90" in line.found
    assert line.fix.startswith("set TRITON_PTXAS_PATH instead"), line
    # A driver older than the ptxas: the fix names 3.6's variable only.
    m = machine(tmp_path, gpus=[("NVIDIA B200", (10, 0))],
                driver=DRIVER_570.replace("570.86.15", "520.61.05"),
                ptxas=TRITON_36_RULE)
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "FAIL", line
    assert "set TRITON_PTXAS_BLACKWELL_PATH (what this Triton reads for " \
        "sm_100)" in line.fix
    m = machine(tmp_path, gpus=[H200],
                driver=DRIVER_570.replace("570.86.15", "520.61.05"),
                ptxas=TRITON_36_RULE)
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "FAIL", line
    assert "TRITON_PTXAS_PATH (what this Triton reads for sm_90)" in line.fix
    assert "BLACKWELL" not in line.fix


def test_a_ptxas_variable_triton_cannot_run_is_named(tmp_path):
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN, environ={
        "TRITON_PTXAS_BLACKWELL_PATH": "/nowhere/ptxas"})
    line = run(doctor_checks.check_driver_ptxas, m)
    assert line.status == "warn", line
    assert "from Triton's wheel" in line.found
    assert "TRITON_PTXAS_BLACKWELL_PATH=/nowhere/ptxas is set, but Triton " \
        "could not run it" in line.found


# -- the C compiler and Python.h -------------------------------------------

def test_no_c_compiler_on_path(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    m = machine(tmp_path, environ={"PATH": str(empty)})
    line = run(doctor_checks.check_c_compiler, m)
    assert line.status == "warn" and "no C compiler" in line.found, line
    assert "apt-get install gcc" in line.fix
    gpu = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                  environ={"PATH": str(empty)})
    assert run(doctor_checks.check_c_compiler, gpu).status == "FAIL"
    line = run(doctor_checks.check_python_headers, m)
    assert line.status == "skip" and "no C compiler" in line.found


def test_the_c_compiler_is_chosen_as_triton_chooses(tmp_path):
    line = run(doctor_checks.check_c_compiler, machine(tmp_path))
    assert line.status == "ok" and "(gcc on PATH)" in line.found, line
    cc = _script(tmp_path, "mycc", "mycc 1.0")
    line = run(doctor_checks.check_c_compiler,
               machine(tmp_path, environ={"CC": str(cc)}))
    assert line.status == "ok" and line.found == f"{cc} (CC): mycc 1.0"
    broken = _script(tmp_path, "brokencc", "no licence", code=1)
    line = run(doctor_checks.check_c_compiler,
               machine(tmp_path, environ={"CC": str(broken)}))
    assert line.status == "warn" and "does not run" in line.found


def test_python_headers_missing_or_broken(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    m = machine(tmp_path, gpus=[H200], driver=DRIVER_580_OPEN,
                include_dir=lambda: str(include))
    line = run(doctor_checks.check_python_headers, m)
    assert line.status == "FAIL" and "no " in line.found, line
    assert "-dev" in line.fix
    (include / "Python.h").write_text("#error broken header\n")
    line = run(doctor_checks.check_python_headers, m)
    assert line.status == "FAIL" and "does not compile" in line.found, line
    line = run(doctor_checks.check_python_headers,
               machine(tmp_path, gpus=[H200]))
    assert line.status == "ok", line


# -- Triton's cache and the lock folder ------------------------------------

def test_a_read_only_triton_cache_folder_fails(tmp_path):
    with read_only(tmp_path / "cache") as folder:
        m = machine(tmp_path, environ={"TRITON_CACHE_DIR": str(folder)})
        line = run(doctor_checks.check_triton_cache, m)
    assert line.status == "FAIL", line
    assert "not writable" in line.found and str(folder) in line.found
    assert "TRITON_CACHE_DIR" in line.fix


def test_the_private_triton_cache_under_bazel(tmp_path):
    folder = tmp_path / "tmp" / "triton-cache"
    m = machine(tmp_path, environ={"TRITON_CACHE_DIR": str(folder),
                                   "TEST_TMPDIR": str(tmp_path / "tmp")})
    line = run(doctor_checks.check_triton_cache, m)
    assert line.status == "ok" and "private to this test" in line.found
    assert folder.is_dir()


def test_the_lock_folder(tmp_path):
    m = machine(tmp_path, environ={"AUTOTUNE_LOCK_DIR": str(tmp_path / "l")})
    line = run(doctor_checks.check_lock_dir, m)
    assert line.status == "ok", line
    line = run(doctor_checks.check_lock_dir,
               machine(tmp_path, environ={"AUTOTUNE_LOCK_DIR": "locks"}))
    assert line.status == "warn" and "relative path" in line.found, line
    assert "--sandbox_writable_path" in line.fix
    with read_only(tmp_path / "ro-locks") as folder:
        line = run(doctor_checks.check_lock_dir, machine(
            tmp_path, environ={"AUTOTUNE_LOCK_DIR": str(folder)}))
    assert line.status == "warn" and "not writable" in line.found, line


def test_inside_bazel_the_default_lock_folder_is_a_warning(tmp_path):
    bazel = {"TEST_TMPDIR": str(tmp_path), "TEST_SRCDIR": "/s"}
    default = {k: v for k, v in bazel.items()}
    line = run(doctor_checks.check_lock_dir,
               machine(tmp_path, environ=default))
    assert line.status == "warn", line
    assert "it is the default" in line.found and "private /tmp" in line.found
    assert "--test_env=AUTOTUNE_LOCK_DIR=DIR --sandbox_writable_path=DIR" \
        in line.fix
    # The client set one, the test did not get it.
    client = str(tmp_path / "client-locks")
    line = run(doctor_checks.check_lock_dir, machine(
        tmp_path, environ=default, client_env={"AUTOTUNE_LOCK_DIR": client}))
    assert line.status == "warn", line
    assert f"the client's AUTOTUNE_LOCK_DIR={client} did not reach this " \
        "test" in line.found
    assert f"--test_env=AUTOTUNE_LOCK_DIR={client} " \
        f"--sandbox_writable_path={client}" in line.fix
    # Another folder than the client's (regenerate's): a warning too.
    other = str(tmp_path / "other-locks")
    line = run(doctor_checks.check_lock_dir, machine(
        tmp_path, environ=dict(bazel, AUTOTUNE_LOCK_DIR=other),
        client_env={"AUTOTUNE_LOCK_DIR": client}))
    assert line.status == "warn" and "did not reach" in line.found, line
    # The client's folder, given to the test: ok.
    line = run(doctor_checks.check_lock_dir, machine(
        tmp_path, environ=dict(bazel, AUTOTUNE_LOCK_DIR=client),
        client_env={"AUTOTUNE_LOCK_DIR": client}))
    assert line.status == "ok", line
    line = run(doctor_checks.check_lock_dir, machine(
        tmp_path, environ=dict(bazel, AUTOTUNE_LOCK_DIR=client)))
    assert line.status == "ok" and "is not known here" in line.found, line


def test_client_env_keeps_the_lock_folder():
    assert doctor.parse_client_env(
        "AUTOTUNE_LOCK_DIR=/var/lock/x\nAUTOTUNE_FLAGS=y\nTRITON_A=1\n") == \
        {"AUTOTUNE_LOCK_DIR": "/var/lock/x", "TRITON_A": "1"}


# -- the runner stamp ------------------------------------------------------

RUNNING = {"device": "NVIDIA H200/sm_90/132/triton-3.6.0", "triton": "3.6.0",
           "torch": "2.11.0", "cuda": "12.8"}


def test_the_stamp_is_checked_against_this_process(tmp_path):
    from autotune.host import stamp

    def line_for(environ):
        return run(doctor_checks.check_runner_stamp, machine(
            tmp_path, environ=environ, running_stamp=lambda: RUNNING))
    good = stamp.format_stamp(dict(RUNNING, driver="580"))
    line = line_for({"AUTOTUNE_RUNNER_STAMP": good})
    assert line.status == "ok" and "driver branch 580" in line.found, line
    line = line_for({"AUTOTUNE_RUNNER_STAMP": good.replace(
        "torch=2.11.0", "torch=2.10.0")})
    assert line.status == "FAIL", line
    assert "says torch=2.10.0, this process runs with torch=2.11.0" in \
        line.found
    assert "tools/runner_stamp.py" in line.fix
    line = line_for({"AUTOTUNE_RUNNER_STAMP": good + "\nautotune: all ok"})
    assert line.status == "FAIL" and "control character" in line.found
    assert "\n" not in line.text()
    line = line_for(dict(BAZEL_ENV))
    assert line.status == "warn" and "unset" in line.found, line
    assert line_for({}).status == "skip"


def test_the_stamp_check_on_this_machine(tmp_path):
    """The real fields of this process: its own stamp is ok."""
    from autotune.host import stamp
    m = machine(tmp_path, environ={"AUTOTUNE_RUNNER_STAMP": stamp.current()})
    assert run(doctor_checks.check_runner_stamp, m).status == "ok"


# -- compiled kernels --------------------------------------------------------

def test_compiled_kernels_are_checked_for_serving_here(tmp_path):
    import triton

    from autotune.binaries import triton_cache
    assert run(doctor_checks.check_compiled,
               machine(tmp_path)).status == "skip"
    built = tmp_path / "built"
    built.mkdir()
    triton_cache.write_manifest(str(built), {
        "targets": ["sm_90"], "built": 3,
        "identity": triton_cache.build_identity(["sm_90"])})
    line = run(doctor_checks.check_compiled, machine(
        tmp_path, compiled_kernels=(str(built),)))
    assert line.status == "ok" and "served here" in line.found, line
    other = tmp_path / "other"
    other.mkdir()
    identity = dict(triton_cache.build_identity(["sm_90"]),
                    triton_version="3.4.0")
    triton_cache.write_manifest(str(other), {
        "targets": ["sm_90"], "built": 3, "identity": identity})
    line = run(doctor_checks.check_compiled, machine(
        tmp_path, compiled_kernels=(str(built), str(other))))
    assert line.status == "FAIL", line
    assert ("were built by Triton 3.4.0, this test runs Triton "
            f"{triton.__version__}") \
        in line.found and str(other) in line.found
    line = run(doctor_checks.check_compiled, machine(
        tmp_path, compiled_kernels=(str(tmp_path / "missing"),)))
    assert line.status == "FAIL" and "is not a directory" in line.found


# -- what the doctor prints --------------------------------------------------

def test_triton_values_are_printed_without_control_characters(tmp_path):
    evil = "ieee\x1b]0;pwned\x07\x1b[2J"
    m = machine(tmp_path, environ={"TRITON_F32_DEFAULT": evil})
    text = run(doctor_checks.check_triton_env, m).text()
    assert "\x1b" not in text and "\x07" not in text, text
    assert "TRITON_F32_DEFAULT=ieee\\x1b]0;pwned\\x07" in text
    m = machine(tmp_path, environ=dict(BAZEL_ENV, TRITON_F32_DEFAULT=evil),
                client_env={"TRITON_F32_DEFAULT": "ieee"})
    text = run(doctor_checks.check_triton_env, m).text()
    assert "\x1b" not in text and "test ieee\\x1b" in text, text


def test_a_read_only_test_tmpdir_is_one_clear_line(tmp_path):
    with read_only(tmp_path / "ro-tmp") as folder:
        m = machine(tmp_path, environ={"TEST_TMPDIR": str(folder),
                                       "TEST_SRCDIR": "/s"})
        lines = doctor.run_checks(m, [doctor_checks.check_gpus,
                                      doctor_checks.check_python_headers,
                                      doctor_checks.check_kernel])
    text = "\n".join(ln.text() for ln in lines)
    assert "the check itself failed" not in text, text
    named = [ln for ln in lines if f"TEST_TMPDIR={folder} is not writable"
             in ln.found]
    assert len(named) == 1 and named[0].name == "python_headers", text
    assert lines[-1].status == "ok", text  # the kernel compiled elsewhere


# -- the client's TRITON_* -------------------------------------------------

BAZEL_ENV = {"TEST_TMPDIR": "/t", "TEST_SRCDIR": "/s"}


def test_the_clients_triton_variables_unknown_inside_bazel(tmp_path):
    line = run(doctor_checks.check_triton_env,
               machine(tmp_path, environ=BAZEL_ENV))
    assert line.status == "skip" and "--client_env" in line.fix, line


def test_the_clients_triton_variables_that_differ(tmp_path):
    m = machine(tmp_path, environ=dict(BAZEL_ENV, TRITON_DEFAULT_FP_FUSION="1",
                                       TRITON_CACHE_DIR="/t/triton-cache"),
                client_env={"TRITON_F32_DEFAULT": "ieee",
                            "TRITON_DEFAULT_FP_FUSION": "1",
                            "TRITON_CACHE_DIR": "/home/me/.cache"})
    line = run(doctor_checks.check_triton_env, m)
    assert line.status == "warn", line
    assert line.found.endswith("TRITON_F32_DEFAULT client ieee test unset")
    assert "--test_env=TRITON_F32_DEFAULT " in line.fix
    m.environ["TRITON_F32_DEFAULT"] = "ieee"
    line = run(doctor_checks.check_triton_env, m)
    assert line.status == "ok", line


def test_a_triton_variable_the_test_alone_has_is_named_for_removal(
        tmp_path):
    m = machine(tmp_path, environ=dict(BAZEL_ENV, TRITON_DEBUG="1"),
                client_env={})
    line = run(doctor_checks.check_triton_env, m)
    assert line.status == "warn", line
    assert "add " not in line.fix, line
    assert line.fix.startswith("TRITON_DEBUG set for the test only"), line


def test_outside_bazel_the_shells_triton_variables_are_named(tmp_path):
    line = run(doctor_checks.check_triton_env, machine(tmp_path))
    assert line.status == "ok", line
    m = machine(tmp_path, environ={"TRITON_F32_DEFAULT": "tf32x3"})
    line = run(doctor_checks.check_triton_env, m)
    assert line.status == "warn" and "TRITON_F32_DEFAULT=tf32x3" in line.found
    assert "--test_env=TRITON_F32_DEFAULT" in line.fix


def test_client_env_text_is_env_output():
    assert doctor.parse_client_env("HOME=/root\nTRITON_A=1\nTRITON_B=x=y\n"
                                   ) == {"TRITON_A": "1", "TRITON_B": "x=y"}
    with pytest.raises(ValueError, match="TRITON_C"):
        doctor.parse_client_env("TRITON_C")


# -- the kernel ------------------------------------------------------------

def test_the_tiny_kernel_compiles_for_sm_90_here(tmp_path):
    line = run(doctor_checks.check_kernel, machine(tmp_path))
    assert line.status == "ok", line
    assert "compiled for sm_90" in line.found
    assert line.found.endswith("not launched: no GPU here")


def test_a_ptxas_that_fails_fails_the_kernel(tmp_path, monkeypatch):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then\n"
                    "echo 'Cuda compilation tools, release 13.4, V13.4.1'\n"
                    "exit 0\nfi\necho 'ptxas fatal: broken' >&2\nexit 1\n")
    fake.chmod(0o755)
    # Compiled once into the process's Triton cache: the check compiles in
    # a fresh folder of its own, so it cannot pass on that binary.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    assert run(doctor_checks.check_kernel, machine(tmp_path)).status == "ok"
    # The variable the installed Triton reads for sm_90 (3.6 and 3.9
    # differ).
    variable = doctor_checks.ptxas_variable(90)
    monkeypatch.setenv(variable, str(fake))
    line = run(doctor_checks.check_kernel, machine(tmp_path))
    assert line.status == "FAIL", line
    assert "does not compile for sm_90" in line.found
    assert variable in line.fix


def test_a_launch_that_fails_is_a_fail(tmp_path):
    state = doctor_machine.State(gpus=[H200], driver="580.95.05")
    line = doctor_checks.check_kernel(machine(tmp_path), state)
    # This machine's torch has no CUDA: the launch itself fails.
    assert line.status == "FAIL" and "its launch failed" in line.found, line
    line = doctor_checks.check_kernel(machine(tmp_path, launch=False), state)
    assert line.status == "skip" and "not launched" in line.found


# -- the command -----------------------------------------------------------

def _fixed(status):
    def check(machine, state):
        return doctor_checks.Line(status, status, "found")
    check.__name__ = f"check_{status}"
    return check


def test_exit_status_is_one_exactly_when_a_check_fails(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "CHECKS", (_fixed("ok"), _fixed("warn"),
                                           _fixed("skip")))
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "doctor: 1 ok, 1 warn, 0 FAIL, 1 skip" in out
    monkeypatch.setattr(doctor, "CHECKS", (_fixed("ok"), _fixed("FAIL")))
    assert doctor.main([]) == 1
    assert "1 FAIL, 0 skip; fix the FAIL lines" in capsys.readouterr().out

    def broken(machine, state):
        raise OSError("boom")
    monkeypatch.setattr(doctor, "CHECKS", (broken,))
    assert doctor.main([]) == 1
    assert "FAIL  broken         the check itself failed: OSError: boom" in \
        capsys.readouterr().out


def test_a_bad_client_env_is_one_line(capsys):
    assert doctor.main(["--client_env=TRITON_X"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "doctor: error: --client_env: 'TRITON_X' is not NAME=VALUE"


def test_the_cache_tool_has_the_doctor(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "CHECKS", (_fixed("ok"),))
    assert tool("doctor") == 0
    assert "ok    ok             found" in capsys.readouterr().out


def test_the_doctor_runs_on_this_machine():
    run_ = subprocess.run([sys.executable, "-m", "autotune.cli.doctor"],
                          cwd=ROOT, capture_output=True, text=True,
                          env=environment(TRITON_INTERPRET="1"), timeout=300)
    assert run_.returncode == 0, run_.stdout + run_.stderr
    lines = run_.stdout.splitlines()
    assert lines[0].startswith("GPU runner doctor (outside Bazel;")
    assert [ln.split()[1] for ln in lines[1:-1]] == [
        c.__name__[len("check_"):] for c in doctor.CHECKS]
    assert lines[-1].startswith("doctor: ") and "0 FAIL" in lines[-1]


def test_the_bazel_target_gets_what_a_gpu_autotuned_test_gets():
    import re
    macro = open(os.path.join(ROOT, "rules", "private",
                              "gpu_autotuned_test.bzl")).read()
    build = open(os.path.join(ROOT, "tools", "BUILD.bazel")).read()
    target = build[build.index('name = "gpu_doctor_test"'):]

    def strings(text):
        return re.findall(r'"([^"]+)"', text)
    inherit = strings(re.search(r"^GPU_ENV_INHERIT = \[(.*?)\]", macro,
                                re.M | re.S).group(1))
    tags = strings(re.search(r"^DEFAULT_GPU_TAGS = \[(.*?)\]", macro,
                             re.M | re.S).group(1))
    assert strings(re.search(r"env_inherit = \[(.*?)\]", target,
                             re.S).group(1)) == inherit
    assert sorted(strings(re.search(r"tags = \[(.*?)\]", target,
                                    re.S).group(1))) == sorted(
        tags + ["manual"])
