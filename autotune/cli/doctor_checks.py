"""The GPU runner doctor's checks (autotune/cli/doctor.py runs them): each
looks at the machine (autotune/cli/doctor_machine.py) and answers one
Line: its status, what it found and, where something is wrong, the fix
(docs/gpu-runners.md has the set-up step behind each)."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

from autotune.errors import AutotuneError, DeviceLockError
from autotune.log import printable
from autotune.binaries import compile_check, triton_cache
from autotune.host import lock_files, stamp
from autotune.cli.doctor_machine import (driver_version, nvidia_nodes,
                                         triton_ptxas)

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
DOCS = "docs/gpu-runners.md"
# The lowest Linux driver of each CUDA major release (minor version
# compatibility: a driver of the major's first release runs every
# binary of that major's later toolkits).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# TRITON_ variables that say where Triton works, not what it compiles
# (checked by triton_cache; TRITON_INTERPRET is set by `import autotune`
# from the backend).
PLACES = ("TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_CACHE_MANAGER",
          "TRITON_INTERPRET")
CLIENT_ENV_ARG = ('--test_arg=--client_env="$(env | grep -E '
                  "'^(TRITON_|AUTOTUNE_LOCK_DIR=)')\"")
# The client's variables --client_env keeps: TRITON_* (compared with the
# test's) and the lock folder (regenerate hands the client's to its dump
# targets).
CLIENT_ENV_PREFIXES = ("TRITON_", "AUTOTUNE_LOCK_DIR=")


@dataclasses.dataclass
class Line:
    status: str
    name: str
    found: str
    fix: str = ""

    def text(self):
        found = " ".join(self.found.split())
        fix = " ".join(self.fix.split())
        return f"{self.status:<4}  {self.name:<14} {found}" + (
            f"  fix: {fix}" if fix else "")

# -- the checks ----------------------------------------------------------------

def check_gpus(machine, state):
    visible = machine.environ.get("CUDA_VISIBLE_DEVICES")
    cvd = ("CUDA_VISIBLE_DEVICES unset (every GPU)" if visible is None
           else f"CUDA_VISIBLE_DEVICES={visible!r}")
    try:
        version, cuda = machine.torch_build()
    except ImportError as e:
        return Line(FAIL, "gpus", f"torch cannot be imported ({e})",
                    "install torch (a CUDA build) in the Python the tests run")
    try:
        state.gpus = list(machine.gpus())
        problem = ""
    except Exception as e:  # torch's reason CUDA did not start
        state.gpus, problem = [], str(e).strip().splitlines()[0][:200]
    state.driver, _ = driver_version(machine)
    state.nodes = nvidia_nodes(machine.dev)
    if state.gpus:
        kinds = {}
        for name, (major, minor) in state.gpus:
            kinds.setdefault(f"{name} (sm_{major}{minor})", 0)
            kinds[f"{name} (sm_{major}{minor})"] += 1
        listed = ", ".join(f"{n} x{c}" if c > 1 else n
                           for n, c in kinds.items())
        return Line(OK, "gpus", f"{len(state.gpus)} GPU"
                    f"{'s' if len(state.gpus) > 1 else ''}: {listed}; {cvd}")
    build = f"torch {version} ({f'CUDA {cuda}' if cuda else 'a CPU build'})"
    if not (state.driver or state.nodes):
        return Line(WARN, "gpus", f"no GPU here: no NVIDIA driver, no "
                    f"{machine.dev}/nvidia*; {build}; {cvd}; GPU tests run "
                    "on Triton's interpreter, the GPU-only checks below are "
                    "skipped",
                    f"on a GPU runner install the NVIDIA driver ({DOCS})")
    why = [problem] if problem else []
    if not cuda:
        fix = "install a CUDA build of torch in the Python the tests run"
    elif visible is not None and not any(
            p.strip() and p.strip() != "-1" for p in visible.split(",")):
        fix = ("CUDA_VISIBLE_DEVICES names no device: unset it or name "
               "GPUs in the client (gpu_autotuned_test targets inherit it)")
    else:
        fix = "see the device_nodes, libcuda and driver_ptxas lines"
    here = ", ".join(filter(None, [
        f"driver {state.driver}" if state.driver else "",
        f"{len(state.nodes)} {machine.dev}/nvidia* nodes"
        if state.nodes else ""]))
    return Line(FAIL, "gpus", f"no GPU visible to {build}, but {here} here"
                + "".join(f" ({w})" for w in why) + f"; {cvd}", fix)


def check_device_nodes(machine, state):
    dev = machine.dev
    writable = os.access(dev, os.W_OK)
    dev_text = f"{dev} {'writable' if writable else 'read-only'}"
    nodes = state.nodes or nvidia_nodes(dev)
    boot = ("create them at boot, as root, before any test: `nvidia-smi` "
            "(nvidiactl, nvidiaN) and `nvidia-modprobe -u -c=0` "
            f"(nvidia-uvm) ({DOCS}#device-nodes-at-boot)")
    if not nodes:
        if state.gpu_here:
            return Line(FAIL, "device_nodes", f"no {dev}/nvidia*, yet torch "
                        f"sees GPUs; {dev_text}", boot)
        return Line(SKIP, "device_nodes", f"no {dev}/nvidia* (no GPU "
                    f"here); {dev_text}: on a GPU runner the nodes must be "
                    "made before the tests")
    numbered = [n for n in nodes if re.fullmatch(r"nvidia\d+", n)]
    missing = [n for n in ("nvidiactl", "nvidia-uvm") if n not in nodes]
    if not numbered:
        missing.insert(0, "nvidia0")
    unusable = [n for n in nodes if n in ("nvidiactl", "nvidia-uvm")
                or n in numbered
                if not os.access(os.path.join(dev, n), os.R_OK | os.W_OK)]
    shown = ", ".join([n for n in nodes if n not in numbered] + (
        [f"nvidia0-{len(numbered) - 1}" if len(numbered) > 1
         else numbered[0]] if numbered else []))
    if unusable:
        return Line(FAIL, "device_nodes", f"{shown}; not readable and "
                    f"writable by uid {os.getuid()}: {', '.join(unusable)}",
                    "give the runner's account access (mode 0666, or its "
                    "group), as the driver's NVreg_DeviceFileMode does")
    if missing:
        if writable:
            return Line(WARN, "device_nodes", f"{shown}; missing "
                        f"{', '.join(missing)}; {dev_text}: the first CUDA "
                        "start makes them only as root, and never inside "
                        "the sandbox", boot)
        return Line(FAIL, "device_nodes", f"{shown}; missing "
                    f"{', '.join(missing)}; {dev_text}, so CUDA's first "
                    "start cannot make them", boot)
    return Line(OK, "device_nodes", f"{shown}; {dev_text} (the nodes were "
                "made before the test, as they must be)")


def _ldconfig_libcuda(machine):
    """(paths of libcuda.so.1 in the ldconfig cache, error text)."""
    try:
        out = subprocess.run([machine.ldconfig, "-p"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError) as e:
        why = getattr(e, "strerror", None) or e
        return [], f"{machine.ldconfig} -p: {why}"
    return [line.split()[-1] for line in out.splitlines()
            if "libcuda.so.1" in line], ""


def check_libcuda(machine, state):
    env = machine.environ
    needed = state.gpu_here or bool(state.driver)
    bad = FAIL if needed else SKIP
    given = env.get("TRITON_LIBCUDA_PATH")
    if given:
        if os.path.exists(os.path.join(given, "libcuda.so.1")):
            return Line(OK, "libcuda", f"{given}/libcuda.so.1, through "
                        "TRITON_LIBCUDA_PATH (Triton looks nowhere else)")
        return Line(FAIL, "libcuda", f"TRITON_LIBCUDA_PATH={given} holds no "
                    "libcuda.so.1 (Triton looks nowhere else)",
                    "point TRITON_LIBCUDA_PATH at the folder of libcuda.so.1, "
                    "or unset it")
    cached, error = _ldconfig_libcuda(machine)
    if cached:
        return Line(OK, "libcuda", f"{', '.join(cached)}, through the "
                    f"ldconfig cache ({machine.ldconfig} -p, as Triton "
                    "looks)")
    if error:
        return Line(bad, "libcuda", f"{error}: Triton runs it to find "
                    "libcuda.so.1 and stops without it",
                    "install ldconfig (libc-bin) at /sbin/ldconfig, or set "
                    "TRITON_LIBCUDA_PATH to libcuda.so.1's folder"
                    if needed else "")
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    through = [d for d in dirs
               if os.path.exists(os.path.join(d, "libcuda.so.1"))]
    if through:
        return Line(WARN, "libcuda", f"{through[0]}/libcuda.so.1, only "
                    "through LD_LIBRARY_PATH: a Bazel test gets it only "
                    "while the .bazelrc keeps "
                    "--incompatible_strict_action_env=false",
                    f"add {through[0]} to the ldconfig cache (a file in "
                    "/etc/ld.so.conf.d/, then ldconfig)")
    if not needed:
        return Line(SKIP, "libcuda", "no libcuda.so.1 (no driver here): "
                    "not in the ldconfig cache, not on LD_LIBRARY_PATH, "
                    "TRITON_LIBCUDA_PATH unset")
    return Line(FAIL, "libcuda", "no libcuda.so.1: not in the ldconfig "
                "cache, not on LD_LIBRARY_PATH, TRITON_LIBCUDA_PATH unset",
                "install the driver's user-space libraries, then run "
                "ldconfig (or set TRITON_LIBCUDA_PATH)")


def ptxas_variable(arch):
    """The variable that points the installed Triton at another ptxas for
    `arch` (Triton's own rule: triton_ptxas)."""
    return triton_ptxas(arch)[2]


def _ptxas_origin(machine, path, variable):
    """Where the ptxas came from: the variable, when it names that ptxas,
    else Triton's wheel; and a note when the variable is set but Triton
    did not use it (not runnable: Triton falls back to its own)."""
    given = machine.environ.get(variable) if variable else None
    if given and os.path.realpath(given) == os.path.realpath(path):
        return f"{variable}={printable(given)}", ""
    if given:
        return "Triton's wheel", (f"{variable}={printable(given)} is set, "
                                  "but Triton could not run it and took its "
                                  "own")
    return "Triton's wheel", ""


def _unread_ptxas_variables(machine, variable, arch):
    """TRITON_PTXAS*_PATH set here that Triton does not read for `arch`."""
    return sorted(k for k in machine.environ
                  if k.startswith("TRITON_PTXAS") and k.endswith("_PATH")
                  and k != variable)


def check_driver_ptxas(machine, state):
    arch = state.arch
    try:
        path, release, variable = machine.ptxas(arch)
    except ImportError as e:
        return Line(FAIL, "driver_ptxas", f"triton cannot be imported ({e})",
                    "install triton in the Python the tests run")
    except Exception as e:
        return Line(FAIL, "driver_ptxas", f"no ptxas for sm_{arch}: {e}",
                    "reinstall triton")
    try:
        major = int(release.split(".")[0])
    except ValueError:
        major = None
    need = MIN_DRIVER.get(major)
    origin, unused = _ptxas_origin(machine, path, variable)
    ignored = _unread_ptxas_variables(machine, variable, arch)
    notes = "".join(
        f"; {n}" for n in [unused] + [
            f"{k} is set, but this Triton does not read it for sm_{arch}"
            for k in ignored] if n)
    ptxas = f"ptxas {path} (CUDA {release}, from {origin}) for sm_{arch}"
    wants = f"R{need}+ driver" if need else "driver of CUDA " + release
    other = (f"or set {variable} (what this Triton reads for sm_{arch}) "
             "to the ptxas of a CUDA release the driver runs (a CUDA 12 "
             "toolkit's bin/ptxas for an R525-R575 driver)" if variable
             else "this Triton reads no variable for another ptxas")
    # A variable Triton does not read for this target, with the one it
    # reads unset, is most likely the runner's intent gone astray.
    astray = ignored and not machine.environ.get(variable)
    status_if_fine = WARN if (unused or astray) else OK
    if not state.driver:
        return Line(SKIP, "driver_ptxas", f"no NVIDIA driver here; {ptxas} "
                    f"needs an {wants}{notes}", f"on the GPU runner: an "
                    f"{wants}, " + other)
    if need is None:
        return Line(WARN, "driver_ptxas", f"driver {state.driver}; {ptxas}: "
                    f"a CUDA release this check does not know{notes}")
    try:
        branch = int(state.driver.split(".")[0])
    except ValueError:
        return Line(WARN, "driver_ptxas", f"driver {state.driver!r}: not a "
                    f"version; {ptxas} needs an {wants}{notes}")
    if branch >= need:
        return Line(status_if_fine, "driver_ptxas", f"driver {state.driver} "
                    f"runs what {ptxas} builds (needs an {wants}){notes}",
                    "" if status_if_fine == OK else
                    f"set {variable} instead (what this Triton reads for "
                    f"sm_{arch}), or fix the path")
    return Line(FAIL, "driver_ptxas", f"driver {state.driver} is older than "
                f"{ptxas} needs (an {wants}): the binaries it builds do "
                f"not load{notes}", f"upgrade the driver to R{need}+, "
                + other)


def _compiler(machine):
    """(command, how it was chosen) as Triton's build chooses: CC, else
    gcc, else clang on PATH; (None, "") when none."""
    given = machine.environ.get("CC")
    if given:
        return given, "CC"
    for name in ("gcc", "clang"):
        found = machine.which(name)
        if found:
            return found, f"{name} on PATH"
    return None, ""


def check_c_compiler(machine, state):
    cc, how = _compiler(machine)
    bad = FAIL if state.gpu_here else WARN
    fix = ("install gcc (`apt-get install gcc`) or set CC: Triton builds "
           "its CUDA launcher (cuda_utils) with it when the driver starts")
    if cc is None:
        return Line(bad, "c_compiler", "no C compiler: CC unset, no gcc or "
                    "clang on PATH" + ("" if state.gpu_here else
                                       " (needed once a GPU is here)"), fix)
    try:
        out = subprocess.run([cc, "--version"], capture_output=True,
                             text=True, timeout=30, check=False)
        version = (out.stdout or out.stderr).strip().splitlines()
        version = version[0] if version else ""
        runs = out.returncode == 0
    except (OSError, subprocess.SubprocessError) as e:
        version, runs = str(e), False
    if not runs:
        return Line(bad, "c_compiler", f"{cc} ({how}) does not run: "
                    f"{version[:150]}", fix)
    return Line(OK, "c_compiler", f"{cc} ({how}): {version[:100]}")


def _scratch(machine):
    """(folder for the checks' temporary files, note): TEST_TMPDIR when it
    is writable (Bazel makes it so for every test), else the system's
    temporary folder, with a note naming TEST_TMPDIR."""
    tmp = machine.environ.get("TEST_TMPDIR")
    if not tmp:
        return None, ""
    try:
        with tempfile.TemporaryDirectory(dir=tmp):
            return tmp, ""
    except OSError as e:
        return tempfile.gettempdir(), (
            f"TEST_TMPDIR={printable(tmp)} is not writable "
            f"({e.strerror or e}): files went to {tempfile.gettempdir()}")


def check_python_headers(machine, state):
    include = machine.include_dir()
    header = os.path.join(include, "Python.h")
    bad = FAIL if state.gpu_here else WARN
    version = "%d.%d" % sys.version_info[:2]
    fix = (f"install the headers of the Python the tests run "
           f"({sys.executable}): `apt-get install python{version}-dev` "
           "(python3-dev)")
    if not os.path.exists(header):
        return Line(bad, "python_headers", f"no {header}" + (
            "" if state.gpu_here else " (needed once a GPU is here)"), fix)
    cc, _ = _compiler(machine)
    if cc is None:
        return Line(SKIP, "python_headers", f"{header}; not compiled: no C "
                    "compiler (see c_compiler)")
    scratch, note = _scratch(machine)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        source = os.path.join(folder, "probe.c")
        with open(source, "w") as f:
            f.write("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            out = subprocess.run([cc, "-c", f"-I{include}", source, "-o",
                                  os.path.join(folder, "probe.o")],
                                 capture_output=True, text=True, timeout=60,
                                 check=False)
            failed = out.returncode != 0 and \
                (out.stderr.strip().splitlines() or ["exit status "
                                                     f"{out.returncode}"])[0]
        except (OSError, subprocess.SubprocessError) as e:
            failed = str(e)
    if failed:
        return Line(bad, "python_headers", f"{header}: a file including it "
                    f"does not compile with {cc}: {failed[:150]}", fix)
    if note:
        return Line(WARN, "python_headers", f"{header} (a file including it "
                    f"compiles with {cc}); {note}", "Bazel gives each test a "
                    "writable TEST_TMPDIR: a test that writes there (Triton's "
                    "private cache, its outputs) fails; check the runner's "
                    "sandbox flags")
    return Line(OK, "python_headers", f"{header} (a file including it "
                f"compiles with {cc})")


def check_triton_cache(machine, state):
    env = machine.environ
    folder = triton_cache.cache_dir(env)
    tmp = env.get("TEST_TMPDIR")
    if env.get("TRITON_CACHE_DIR"):
        if tmp and os.path.abspath(folder).startswith(
                os.path.abspath(tmp) + os.sep):
            how = ("private to this test (under TEST_TMPDIR, chosen by "
                   "`import autotune`): every test compiles afresh; a "
                   f"persistent one: {DOCS}#a-persistent-triton-cache")
        else:
            how = "TRITON_CACHE_DIR"
    elif env.get("TRITON_HOME"):
        how = "TRITON_HOME"
    else:
        how = "Triton's default under the home"
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as e:
        return Line(FAIL, "triton_cache", f"{folder} ({how}) is not "
                    f"writable: {e.strerror or e}",
                    triton_cache.unwritable_message(folder, e).split(
                        ": every compile would fail; ", 1)[-1])
    return Line(OK, "triton_cache", f"{folder} is writable ({how})")


def check_lock_dir(machine, state):
    env = machine.environ
    folder = lock_files.lock_dir(env)
    given = bool(env.get(lock_files.LOCK_DIR_ENV))
    fix = (f"pass one folder to every test: --test_env="
           f"{lock_files.LOCK_DIR_ENV}=DIR --sandbox_writable_path=DIR in "
           f"the runner's .bazelrc ({DOCS}#the-lock-folder)")
    try:
        lock_files.checked_lock_dir(env, DeviceLockError)
        writable = os.access(folder, os.W_OK | os.X_OK)
        problem = "" if writable else "not writable"
    except DeviceLockError as e:
        problem = str(e)
    how = (f"{lock_files.LOCK_DIR_ENV}={printable(folder)}" if given
           else f"the default {folder} ({lock_files.LOCK_DIR_ENV} unset)")
    if problem:
        # A warning, not a FAIL: a load target whose fusions all hit never
        # takes a lock; a tuning one (a miss, a dump target) stops here.
        return Line(WARN, "lock_dir", f"{how}: {printable(problem)}; a test "
                    "that tunes (a miss, a dump target) stops there", fix)
    if not machine.in_bazel_test():
        note = "" if given else (": per user; a sandbox with a private "
                                 "/tmp (Bazel 7+) gives each test its own")
        return Line(OK, "lock_dir", f"{how} is writable{note}")
    # Inside bazel test: the folder regenerate hands its dump targets is
    # the client's AUTOTUNE_LOCK_DIR (else the client's default); every
    # test must take its turn in that one.
    client = (machine.client_env or {}).get(lock_files.LOCK_DIR_ENV)
    lost = (f"; the client's {lock_files.LOCK_DIR_ENV}={printable(client)} "
            "did not reach this test (a test gets only --test_env "
            "variables)") if client and client != env.get(
                lock_files.LOCK_DIR_ENV) else ""
    if not given:
        return Line(WARN, "lock_dir", f"{how} is writable here, but it is "
                    "the default: a sandbox with a private /tmp (Bazel 7+) "
                    "gives each test its own, so two tunings on one GPU "
                    f"time each other's kernels{lost}",
                    f"set {lock_files.LOCK_DIR_ENV} for every test: "
                    f"--test_env={lock_files.LOCK_DIR_ENV}="
                    f"{printable(client) if client else 'DIR'} "
                    f"--sandbox_writable_path="
                    f"{printable(client) if client else 'DIR'} in the "
                    "runner's .bazelrc, the folder regenerate hands its "
                    f"dump targets ({DOCS}#the-lock-folder)")
    if lost:
        return Line(WARN, "lock_dir", f"{how} is writable{lost}: regenerate "
                    "hands its dump targets the client's, so they and this "
                    "test take turns in different folders",
                    f"give the tests the client's folder: --test_env="
                    f"{lock_files.LOCK_DIR_ENV}={printable(client)} "
                    f"--sandbox_writable_path={printable(client)}")
    known = "" if client else (
        f" (the client's {lock_files.LOCK_DIR_ENV}, which regenerate hands "
        f"its dump targets, is not known here: pass it with "
        f"{CLIENT_ENV_ARG})")
    return Line(OK, "lock_dir", f"{how} is writable{known}")


def _triton_vars(env):
    return {k: v for k, v in env.items()
            if k.startswith("TRITON_") and k not in PLACES}


def check_triton_env(machine, state):
    here = _triton_vars(machine.environ)
    shown = ", ".join(f"{printable(k)}={printable(v)}"
                      for k, v in sorted(here.items())) or "none"
    client = machine.client_env
    if client is None and machine.in_bazel_test():
        return Line(SKIP, "triton_env", f"the client's TRITON_* are not known "
                    f"inside bazel test; the test sees: {shown}",
                    f"to compare, add {CLIENT_ENV_ARG}")
    if client is None:
        if not here:
            return Line(OK, "triton_env", "no TRITON_* set here: a bazel "
                        "test compiles as this shell does")
        return Line(WARN, "triton_env", f"set here: {shown}; a bazel test "
                    "sees none of them unless passed", "add "
                    + " ".join(f"--test_env={printable(k)}"
                               for k in sorted(here))
                    + " to the runner's .bazelrc, or unset them")
    client = _triton_vars(client)
    differ = sorted(k for k in set(client) | set(here)
                    if client.get(k) != here.get(k))
    if not differ:
        return Line(OK, "triton_env", "the test sees the client's TRITON_* "
                    f"({shown})")
    return Line(WARN, "triton_env", "differ from the client's (other "
                "numerics, other cache keys): " + ", ".join(
                    f"{printable(k)} client "
                    f"{printable(client.get(k, 'unset'))} test "
                    f"{printable(here.get(k, 'unset'))}" for k in differ),
                _triton_env_fix([k for k in differ if k in client],
                                 [k for k in differ if k not in client]))


def _triton_env_fix(from_client, test_only):
    """The fix for TRITON_* that differ: the client's passed on, the
    test's own (set by the runner's .bazelrc) removed."""
    fixes = []
    if from_client:
        fixes.append("add " + " ".join(f"--test_env={printable(k)}"
                                        for k in from_client)
                     + " to the runner's .bazelrc (the client's value), or "
                     "unset them in the client")
    if test_only:
        fixes.append(", ".join(map(printable, test_only))
                     + " set for the test only (a "
                     "--test_env or --action_env of the runner's .bazelrc): "
                     "remove it, or set it in the client too")
    return "; ".join(fixes)


def _kernel_compile_fix(arch):
    try:
        variable = ptxas_variable(arch)
    except Exception:  # Triton's answer is the driver_ptxas line's
        variable = ""
    return "see the driver_ptxas line" + (
        f" ({variable} picks the ptxas)" if variable else "")


def check_kernel(machine, state):
    arch = state.arch
    try:
        import triton  # heavy: only when the check runs
        from triton.runtime.jit import JITFunction

        from autotune.cli import doctor_kernel  # imports triton.language
    except Exception as e:
        return Line(FAIL, "kernel", f"triton cannot be imported ({e})",
                    "install triton in the Python the tests run")
    target = compile_check.Target(f"sm_{arch}", arch)
    folder = tempfile.mkdtemp(prefix="doctor-triton-cache.",
                              dir=_scratch(machine)[0])
    saved = os.environ.get("TRITON_CACHE_DIR")
    # A fresh folder: the compile runs, not a binary found on disk.
    os.environ["TRITON_CACHE_DIR"] = folder
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore",
                                    message="TRITON_DEFAULT_FP_FUSION")
            # In a spawned process: what this one ran (the interpreter, in
            # a test run) cannot change the compile.
            [done] = compile_check.run_tasks([(
                doctor_kernel.__name__, None, "add_one_kernel",
                doctor_kernel.SIGNATURE,
                {"kwargs": {"BLOCK": doctor_kernel.BLOCK}, "num_warps": 1,
                 "num_stages": 1}, (target.name, target.capability))],
                jobs=1, apart=True)
            result = compile_check.Result(**done)
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
        shutil.rmtree(folder, ignore_errors=True)
    what = f"a tiny kernel (Triton {triton.__version__})"
    if not result.ok:
        return Line(FAIL, "kernel", f"{what} does not compile for sm_{arch}: "
                    f"{result.reason}", _kernel_compile_fix(arch))
    compiled = f"{what} compiled for sm_{arch} in {result.seconds:.1f} s"
    if not state.gpu_here:
        return Line(OK, "kernel", f"{compiled}; not launched: no GPU here")
    if not machine.launch:
        return Line(SKIP, "kernel", f"{compiled}; not launched (--no_launch)")
    try:
        import torch  # heavy: only on a GPU
        kernel = JITFunction(doctor_kernel.add_one)
        x = torch.zeros(doctor_kernel.BLOCK, device="cuda")
        start = time.perf_counter()
        kernel[(1,)](x, doctor_kernel.BLOCK, BLOCK=doctor_kernel.BLOCK)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        right = bool((x == 1).all().item())
    except Exception as e:
        text = f"{type(e).__name__}: {e}".strip().splitlines()[0][:200]
        return Line(FAIL, "kernel", f"{compiled}; its launch failed: {text}",
                    "see the c_compiler, python_headers, libcuda and "
                    "driver_ptxas lines")
    if not right:
        return Line(FAIL, "kernel", f"{compiled}; launched, but its result "
                    "is wrong", "a driver or GPU fault: check nvidia-smi -q")
    return Line(OK, "kernel", f"{compiled}; launched on cuda:0 "
                f"({seconds:.1f} s with the driver's start)")


def check_runner_stamp(machine, state):
    text = machine.environ.get(stamp.STAMP_ENV, "")
    export = (f'export {stamp.STAMP_ENV}="$(python3 '
              'RULES_AUTOTUNE/tools/runner_stamp.py)" on the runner, with '
              "the Python the tests run")
    if not text.strip():
        if machine.in_bazel_test():
            return Line(WARN, "runner_stamp", f"{stamp.STAMP_ENV} unset: a "
                        "GPU test's cached result stands after a Triton, "
                        "torch, CUDA, GPU or driver upgrade", export)
        return Line(SKIP, "runner_stamp", f"{stamp.STAMP_ENV} unset (it "
                    "keys GPU tests' cached results under bazel test)")
    try:
        stamped = stamp.parse(text)
    except AutotuneError as e:
        return Line(FAIL, "runner_stamp", str(e), export)
    differing = stamp.first_difference(stamped, machine.stamp_fields())
    if differing:
        name, said, running = differing
        return Line(FAIL, "runner_stamp", f"{stamp.STAMP_ENV} says "
                    f"{name}={printable(said)}, this process runs with "
                    f"{name}={printable(running)}: every GPU test fails "
                    "on this stamp", export)
    checked = [n for n in stamp.CHECKED if n in stamped]
    return Line(OK, "runner_stamp", f"{stamp.STAMP_ENV} describes this "
                f"process ({', '.join(checked) or 'no checked field'}"
                f"{' match' if checked else ''}"
                + (f"; driver branch {printable(stamped['driver'])}"
                   if "driver" in stamped else "") + ")")


def _serving_verdict(root):
    """(served, reason) for one compiled-kernel directory: whether this
    process's launches would be served from it, by the runtime's own
    build-identity check (triton_cache.identity_problem)."""
    problem = triton_cache.identity_problem(root)
    return problem is None, problem or ""


def check_compiled(machine, state):
    roots = list(machine.compiled_kernels)
    if not roots:
        return Line(SKIP, "compiled", "no compiled kernels given "
                    "(--compiled_kernels DIR checks whether this process "
                    "would be served from them)")
    refused = []
    for root in roots:
        if not os.path.isdir(root):
            refused.append(f"{printable(root)} is not a directory")
            continue
        served, reason = _serving_verdict(os.path.abspath(root))
        if not served:
            refused.append(printable(reason or f"{root}: not served"))
    if refused:
        return Line(FAIL, "compiled", "; ".join(refused), "rebuild them "
                    "(`autotune_cache compile`) with the Triton, Python and "
                    "TRITON_* the tests run with")
    import triton
    return Line(OK, "compiled", f"{', '.join(map(printable, roots))}: built "
                f"by this Triton ({triton.__version__}) with the same "
                "cache-invalidating variables: served here")
