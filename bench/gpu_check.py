"""The GPU check: what a machine with one NVIDIA GPU can tell us that the
CPU machines cannot, in one command (bench/gpu_check.sh runs this).

    python bench/gpu_check.py [--dry-run] [--out DIR]

Sections, each in a process of its own with its own time budget inside the
whole one (GPU_CHECK_LIMIT_S, 8 minutes): a section that runs over is cut
and reported as cut, with what it had written so far; the report
(gpu_check.json and gpu_check.md in --out, default $OUT) is rewritten after
every section, so a timeout or a crash loses nothing that was measured.

preflight     the GPU runner doctor's checks (autotune/cli/doctor.py; a
              FAIL stops the check here, naming the fix), versions, the
              device key, one small kernel compiled and launched (a
              missing C compiler, Python headers or libcuda shows here,
              in seconds)
tests         the GPU-relevant tests on the GPU backend (no -x: one failure
              does not hide the others)
suite         the example suite cold (tunes, dumps) then warm (loads; 0
              candidate benchmarks, every fusion a hit)
side_by_side  this autotuner and triton.autotune on the same kernels and
              configs in one process: cold tuning wall time and the share
              that is compilation, hit overhead against a plain launch,
              regret against an oracle pass, agreement over K fresh tunings
kernels       the tuned matmul+bias+activation against torch in TFLOP/s at
              4096^3 and two skinny shapes; softmax and layernorm in GB/s
              against the device's copy bandwidth measured in the same run
compile_jobs  cold tuning of the matmul with --autotune_compile_jobs=1 and
              with all jobs

--dry-run: every section on Triton's interpreter with tiny sizes, so CI
checks the script itself; the figures mean nothing there.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

# (name, budget seconds) on one H200 with a 16-core host, each next to the
# estimate it is the budget of. Estimates: a fresh Python with torch and
# Triton imported 4-6 s; CUDA context 1-2 s; Triton compiles for sm_90,
# measured on a 2-core CPU machine with Triton 3.9's sm_90 compiler
# (GPUTarget("cuda", 90, 32), no GPU: `python3 tools/compile_check.py
# --targets sm_90 --module autotune.kernels.matmul --jobs 1` in an empty
# TRITON_CACHE_DIR, and compile_check.compile_one for the softmax):
# the 20 bf16 matmul GPU configs (as a 4096^3 launch specialises them) in
# 21.8 s serially, 1.07 s median, 0.69-1.52 s each (fp16 the same); the
# softmax's 6 bf16 configs 0.14-0.81 s each (2.4 s for 2048-wide rows, 11 s
# for 8192-wide ones, where three spill); a small kernel 0.2-1 s. Figures
# from an fp32 compile (8 s a config) overstated bf16 compiles eightfold.
# GPU time of the figures is small next to compilation. Their sum stays
# within the whole limit (GPU_CHECK_LIMIT_S, 300 s) less the report's
# 10 s. Each section's report says what it compiled and found on disk, and
# its seconds: the estimates are checked on every run.
SECTIONS = [
    # imports 6 s + the runner doctor's checks (one compile, gcc on a
    # file including Python.h: 2 s) + CUDA 2 s + one compile 1 s + the
    # device lock check (free: 0 s): about 12 s.
    # ... and the per-process builds, cold then with a kept cache (two
    # fresh processes importing Triton, 2-3 s each; cuda_utils 0.7 s of
    # gcc and, on Triton 3.6, two launchers 0.4-0.7 s each): 8 s more.
    ("preflight", 35),
    # pytest start 6 s; the GPU test files (GPU_TESTS) tune tiny kernels
    # with small config lists: about 40 compiles of tiny kernels, 0.2-0.8 s
    # each (20 s), the drop-in API in process, one drop-in round trip (two
    # processes of 6 s start-up and their compiles: 20 s): 40-60 s, leaving
    # 30 s of the budget (five files with five round trips and the CPU-side
    # compile checks took 80-120 s).
    ("tests", 80),
    # two example tests cold (tunes, compiles ahead in 8 jobs) and warm
    # (loads): four processes of 6 s start-up, the cold matmul fusions
    # compile about 20 configs in 8 jobs (about 1 s each: 3-5 s a fusion
    # with the pool's start): 30-45 s.
    ("suite", 60),
    # two kernels x (two tunings per side with short do_bench, the
    # oracle's plain launches, 200 hit launches per side), after one
    # warm-up launch (driver start, 1-2 s): each side compiles in its own
    # cache softmax's 6 configs (2.4 s) and 4 matmul GPU configs (about
    # 1.1 s each: 4.4 s), 14 s for both sides; launches 5 s; about 30 s
    # with start-up; fresh tunings (binaries loaded from disk, 6-8 s a
    # process) in the time left.
    ("side_by_side", 60),
    # in a Triton cache folder of its own (OWN_CACHE_SECTIONS): copy
    # bandwidth, three matmul shapes tuned (the 4096^3 one compiles its 20
    # configs ahead in 8 jobs, 3 s plus the pool's 2-4 s start; the other
    # shapes specialise alike and reuse them: timing only, 5 s), softmax at
    # two row widths (6 configs each, 2.4 s and 1.6 s) and layernorm (6
    # configs, reused at the second shape): 30-35 s.
    ("kernels", 45),
]
# compile_jobs (cold tuning with 1 job and with all) is not in the default
# run: two more cold matmul tunings, about 55 s; --sections compile_jobs
# runs it in a second call.
OPTIONAL_SECTIONS = [
    # 20 bf16 configs serially (about 1.1 s each: 22 s) against 8 jobs
    # (3 s and the pool's start), each in a fresh process (8 s) with its
    # timing (3 s): 35 s and 17 s.
    ("compile_jobs", 90),
    # The example suite tuned once (compiles ahead in 8 jobs: 20-30 s),
    # its winners compiled for the GPU by `autotune_cache compile` (6
    # binaries, bf16 about 1 s each, in parallel: 5 s with start-up), then
    # two load runs with fresh Triton caches, without and with the
    # compiled kernels (6-8 s each): about 50 s.
    ("compiled", 80),
]
TOTAL_S = float(os.environ.get("GPU_CHECK_LIMIT_S", "300")) - 10.0
# The dry run interprets every kernel on a CI machine: the same sections,
# budgets this many times longer (gpu_check.sh raises the whole limit too).
DRY_RUN_SCALE = 6.0
# A section cut by its budget gets SIGTERM (it kills the process groups of
# its own children), then SIGKILL for its whole group this long after.
KILL_GRACE_S = 3.0
# How long the preflight waits for the device's tuning lock.
DEVICE_LOCK_TIMEOUT_S = float(os.environ.get("GPU_CHECK_LOCK_TIMEOUT_S",
                                             "20"))

# The GPU-relevant tests: the GPU path and the tuner's launch, restore and
# failure checks on the GPU backend, the drop-in API in process and one
# drop-in round trip. Left to the CPU machines, where they run the same:
# tests/test_compile_check.py (it compiles for sm_90 and sm_80 with the
# wheel's ptxas, on any machine) and the other round trips of
# tests/test_dropin.py (two processes each).
GPU_TESTS = ["tests/test_gpu_path.py", "tests/test_tuner.py",
             "tests/test_dropin_api.py",
             "tests/test_dropin.py::"
             "test_zero_edit_path_runs_triton_autotune_kernels_unchanged"]
# Interpreter-only assertions (they expect the CPU backend's device key).
GPU_DESELECT = []

# Printed next to regret: ours does not take the argmin of one pass.
SELECTION_RULE = (
    "ours: a screen, then rounds that time again the candidates the "
    "screen cannot separate; configs within 2 % (or a quarter of a "
    "standard error) count as tied and the smaller is kept "
    "(autotune.measure.selection:ContestRule), so a regret up to about "
    "1.02 against an oracle (and triton.autotune's argmin) is by design; "
    "triton.autotune: the argmin of one do_bench pass")

# Every figure the report names, by section (tests/test_gpu_check.py reads
# this list against a dry run's report).
FIGURES = {
    "preflight": ["doctor", "device_key", "launch_seconds",
                  "per_process_builds"],
    "tests": ["summary", "ok"],
    "suite": ["cold", "warm"],
    "side_by_side": ["cold_tuning_s", "compile_share", "hit_overhead_us",
                     "regret", "winner_flip_rate", "within_2pct_of_best",
                     "ratio_ours_over_triton"],
    "kernels": ["matmul", "copy_gbps", "rows"],
    "compile_jobs": ["cold_tuning_s_1_job", "cold_tuning_s_all_jobs",
                     "jobs"],
    "compiled": ["target", "compile", "load_without_compiled",
                 "load_with_compiled", "served", "compiled"],
}


def log(text):
    print(f"gpu_check: {text}", flush=True)


# -- what each section compiled and what it found on disk --------------------

# bench/compile_counter/sitecustomize.py, first on every section's
# PYTHONPATH: each Python process a section starts (pytest, the examples,
# compile pools) logs every Triton compile() call, a hit (binary found in
# the on-disk cache) or a miss (compiled), into the folder this names.
COMPILE_COUNTER_DIR = os.path.join(ROOT, "bench", "compile_counter")
COMPILE_LOG_ENV = "GPU_CHECK_COMPILE_LOG"
# Where a section's own Triton cache folders go (the cold tunings' and the
# kernels section's), so the check counts the binaries in them.
SECTION_CACHES_ENV = "GPU_CHECK_SECTION_CACHES"
# Sections run in a fresh Triton cache folder of their own, not the run's:
# the kernels section's 4096^3 tuning would otherwise find on disk the
# binaries the suite's runs compiled (same specialisation) and time no
# compiling.
OWN_CACHE_SECTIONS = ("kernels",)


def _fresh_cache_dir(prefix):
    """An empty Triton cache folder, under the section's folder of caches
    (counted by the check) when there is one."""
    parent = os.environ.get(SECTION_CACHES_ENV)
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent or None)


def _binaries_in(cache_dir):
    return sum(name.endswith((".cubin", ".hsaco"))
               for _, _, names in os.walk(cache_dir) for name in names)


def compile_counts(log_dir):
    """{"compiled": n, "found_on_disk": m}: Triton compile() calls logged
    under log_dir by the processes of a section (see COMPILE_LOG_ENV)."""
    counts = {"compiled": 0, "found_on_disk": 0}
    if not log_dir or not os.path.isdir(log_dir):
        return counts
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                if line.strip() == "miss":
                    counts["compiled"] += 1
                elif line.strip() == "hit":
                    counts["found_on_disk"] += 1
    return counts


def _compile_listener_available():
    """Whether this Triton tells a listener about every compile() call and
    whether it found the binary on disk (knobs.compilation.listener)."""
    try:
        from triton import knobs
    except ImportError:
        return False
    return hasattr(getattr(knobs, "compilation", None), "listener")


def _counted_here():
    """This section's compile counts so far (every process of it)."""
    return compile_counts(os.environ.get(COMPILE_LOG_ENV))


def _counts_since(before):
    now = _counted_here()
    return {k: now[k] - before[k] for k in now}


# -- child processes, each in a process group of its own ---------------------

# Process groups of the children this process started and has not reaped:
# killed whole when this process is told to stop.
_CHILD_GROUPS = set()


def _kill_group(pgid, sig=signal.SIGKILL):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _summed_compile_seconds(stdout):
    """The seconds `autotune_cache compile` spent compiling, from its
    closing line; None when the line is not there."""
    found = re.search(r"; ([\d.]+) s compiling\)", stdout or "")
    return float(found.group(1)) if found else None


def run_group(cmd, timeout=None, grace_s=0.0, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True) in a new session
    (its own process group): on timeout every process of the group is
    killed (SIGTERM, then SIGKILL grace_s later), grandchildren included,
    and TimeoutExpired raised with the output read so far."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    _CHILD_GROUPS.add(proc.pid)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if grace_s > 0:
                _kill_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    pass
            _kill_group(proc.pid)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout, out, err)
        # A child's own children may outlive it: none may hold the GPU
        # after the section moves on.
        _kill_group(proc.pid)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        _CHILD_GROUPS.discard(proc.pid)


def _stop_children_on_term():
    """In a section process: SIGTERM (its budget ran out) kills the groups
    of its own children, then this process."""
    def stop(signum, frame):
        for pgid in list(_CHILD_GROUPS):
            _kill_group(pgid)
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)


def _figure(value):
    return None if value is None else float(f"{value:.4g}")


class Partial:
    """A section's results, written to disk whenever one is added: what a
    cut section had measured survives it."""

    def __init__(self, path):
        self.path = path
        self.data = {}

    def __setitem__(self, key, value):
        self.data[key] = value
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True, default=str)
        os.replace(tmp, self.path)

    def __getitem__(self, key):
        return self.data[key]


# -- timing -----------------------------------------------------------------

class Ledger:
    """Timing calls, what they asked for and the wall time they cost (do_bench
    runs one launch and five estimate launches behind an L2 flush before
    its repetitions, so a short call costs more than its ask)."""

    def __init__(self):
        self.calls, self.asked_ms, self.wall_ms = 0, 0.0, 0.0

    def add(self, asked_ms, wall_ms):
        self.calls += 1
        self.asked_ms += asked_ms
        self.wall_ms += wall_ms

    def add_summary(self, before, after):
        """The backend ledger's calls between two summaries."""
        self.calls += after["calls"] - before["calls"]
        self.asked_ms += after["asked_ms"] - before["asked_ms"]
        self.wall_ms += after["wall_ms"] - before["wall_ms"]

    def summary(self):
        return {"calls": self.calls, "asked_ms": round(self.asked_ms, 1),
                "wall_ms": round(self.wall_ms, 1),
                "wall_over_asked": (round(self.wall_ms / self.asked_ms, 2)
                                    if self.asked_ms else None)}


def _backend_timing():
    """The current session's backend's timing summary
    (autotune.measure.backends.TimingLedger)."""
    import autotune
    return autotune.session().backend.timing_ledger().summary()


# The check's own figures (the tuned kernels against torch): do_bench with
# this warm-up and repetition time.
FIGURE_WARMUP_MS, FIGURE_REP_MS = 10, 40


def _timer(dry_run, ledger=None):
    """Median milliseconds of fn: do_bench on the GPU, wall clock on the
    interpreter; each call's ask and wall time added to `ledger`."""
    if not dry_run:
        from triton.testing import do_bench

        def bench(fn):
            return do_bench(fn, warmup=FIGURE_WARMUP_MS, rep=FIGURE_REP_MS,
                            return_mode="median")
        asked = FIGURE_WARMUP_MS + FIGURE_REP_MS
    else:
        def bench(fn):
            samples = []
            for _ in range(3):
                start = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - start) * 1e3)
            return statistics.median(samples)
        asked = None

    def time_ms(fn):
        start = time.perf_counter()
        value = bench(fn)
        wall = (time.perf_counter() - start) * 1e3
        if ledger is not None:
            ledger.add(asked if asked is not None else 3 * value, wall)
        return value
    return time_ms


def warm_up(dry_run):
    """Starts Triton's driver (on a GPU: its cuda_utils module, built with
    gcc the first time, about 1 s) and launches one scratch kernel, so
    that no timed tuning after it pays for them; returns the seconds."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1.0,
                 mask=offs < n)
    start = time.perf_counter()
    x = torch.zeros(16, device="cpu" if dry_run else "cuda")
    add_one[(1,)](x, 16, BLOCK=16)
    _sync(dry_run)
    seconds = round(time.perf_counter() - start, 3)
    if not bool((x == 1).all().item()):
        raise RuntimeError("the scratch kernel did not run")
    return seconds


def _sync(dry_run):
    if not dry_run:
        import torch
        torch.cuda.synchronize()


# -- sections ---------------------------------------------------------------

def interpreter_problem(dry_run):
    """On the interpreter: why kernels whose loops run to a kernel
    argument (the matmul's K loop, the layernorm's column loops) cannot
    run here, or None. Triton 3.6's interpreter calls int() on the
    one-element array such a bound is, which NumPy 2.4 and later refuse;
    Triton 3.9, or NumPy before 2.4, runs them. Probed, not guessed from
    version numbers."""
    if not dry_run:
        return None
    import numpy
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def loop_to_argument(x, n):
        acc = tl.load(x)
        for i in range(1, n):
            acc += tl.load(x + i)
        tl.store(x, acc)
    try:
        loop_to_argument[(1,)](torch.ones(4), 4)
        return None
    except Exception as e:  # noqa: BLE001 -- reported, with its text
        lines = str(e).strip().splitlines() or [type(e).__name__]
        return (f"Triton {triton.__version__}'s interpreter with NumPy "
                f"{numpy.__version__} cannot run a loop bounded by a kernel "
                f"argument ({lines[-1][:120]}): the matmul and layernorm "
                "are skipped in this dry run (NumPy < 2.4 runs them)")


def _device_lock_free(backend, timeout_s):
    """Waits at most timeout_s for the device's tuning lock (the one every
    tuning takes, autotune.host.device_lock), then lets it go: a check
    whose sections would wait forever on a holder stops here, naming it.
    Returns the seconds waited."""
    from autotune.host import device_lock
    lock = device_lock.DeviceTurn(backend).lock
    start = time.monotonic()
    while not lock.try_acquire():
        if time.monotonic() - start > timeout_s:
            holder = device_lock.holder_of(lock.path)
            raise RuntimeError(
                f"the device lock {lock.path} is held by "
                + (f"pid {holder}" if holder else "another process")
                + f" and was not free within {timeout_s:.0f} s")
        time.sleep(0.2)
    lock.release()
    return round(time.monotonic() - start, 2)


def section_preflight(out, dry_run, env):
    from autotune.cli import doctor
    from autotune.measure import backends
    # The GPU runner doctor's checks first, its lines in the report: a
    # machine that cannot run a GPU test stops here, naming the fix.
    lines = doctor.run_checks(doctor.Machine())
    out["doctor"] = [line.text() for line in lines]
    failed = [line for line in lines if line.status == doctor.FAIL]
    if failed:
        raise RuntimeError(f"the runner doctor: {len(failed)} FAIL: "
                           + "; ".join(line.text() for line in failed))
    backend = backends.select_backend("interpreter" if dry_run else "gpu")
    out["device_key"] = backend.device_key()
    out["device_lock_wait_s"] = _device_lock_free(backend,
                                                  DEVICE_LOCK_TIMEOUT_S)
    out["versions"] = versions(dry_run)
    out["launch_seconds"] = round(warm_up(dry_run), 2)
    # What every test process compiles with gcc (Triton's cuda_utils and,
    # on 3.6, a launcher per kernel signature), without and with a kept
    # Triton cache (docs/gpu-runners.md#a-persistent-triton-cache).
    import per_process_builds
    try:
        cold, kept = per_process_builds.cold_and_kept(
            stub=dry_run or not _driver_here(), timeout=30)
        out["per_process_builds"] = {
            "what": "seconds of the C compiler in one fresh test process "
                    "(Triton's own builds), cold and with the first "
                    "process's Triton cache kept",
            "cold": cold, "kept": kept,
            "line": per_process_builds.summary_line(cold, kept)}
        log(out["per_process_builds"]["line"])
    except Exception as e:  # a figure, not a gate
        out["per_process_builds"] = {"error": f"{type(e).__name__}: {e}"}
    out["compile_listener"] = _compile_listener_available()
    out["ok"] = True


def _driver_here():
    return os.path.exists("/proc/driver/nvidia/version") or \
        shutil.which("nvidia-smi") is not None


def versions(dry_run=True):
    """{package: version} of what this check runs with, "" for one that
    is missing; the driver from nvidia-smi where it answers."""
    import importlib.metadata
    found = {"python": platform.python_version()}
    for name, dist in (("torch", "torch"), ("triton", "triton"),
                       ("protobuf", "protobuf"), ("numpy", "numpy"),
                       ("absl-py", "absl-py"), ("pytest", "pytest")):
        try:
            found[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[name] = ""
    from autotune.host import stamp
    found["driver"] = stamp.driver_version()
    try:
        import torch
        found["cuda"] = torch.version.cuda or ""
        found["gpu"] = torch.cuda.get_device_name() if not dry_run else ""
    except Exception:  # torch missing or without a GPU: said by preflight
        found.setdefault("cuda", "")
    return found


def section_tests(out, dry_run, env):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if dry_run:
        # The interpreter runs these in CI already; a few check the step.
        cmd += ["tests/test_gpu_path.py", "-k",
                "classified or tolerance or quartiles"]
    else:
        cmd += GPU_TESTS + [f"--deselect={d}" for d in GPU_DESELECT]
    out["command"] = " ".join(cmd[1:])
    start = time.perf_counter()
    proc = run_group(cmd, cwd=ROOT, env=env)
    lines = proc.stdout.strip().splitlines() or [""]
    out["failures"] = [ln for ln in lines if ln.startswith("FAILED")][:20]
    out["summary"] = lines[-1]
    out["seconds"] = round(time.perf_counter() - start, 1)
    out["ok"] = proc.returncode == 0
    if not out["ok"]:
        print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)


def section_suite(out, dry_run, env):
    examples = ["examples/xla_style_test.py"] if dry_run else \
        ["examples/fused_kernels_test.py", "examples/xla_style_test.py"]
    work = tempfile.mkdtemp(prefix="gpu_check_suite.")
    cold, warm = {}, {}
    for example in examples:
        name = os.path.splitext(os.path.basename(example))[0]
        outputs = os.path.join(work, name)
        os.makedirs(outputs, exist_ok=True)
        cache = os.path.join(outputs, "autotune_cache.textproto")
        for phase, flags, table in (
                ("cold", f"--dump_autotune_results_to={cache}", cold),
                ("warm", f"--load_autotune_results_from={cache} "
                         "--require_complete_autotune_results", warm)):
            report_path = os.path.join(work, f"{name}.{phase}.json")
            run_env = dict(env, TEST_UNDECLARED_OUTPUTS_DIR=outputs,
                           AUTOTUNE_FLAGS=(f"{flags} --autotune_report_to="
                                           f"{report_path}"))
            start = time.perf_counter()
            proc = run_group([sys.executable, example], cwd=ROOT,
                             env=run_env)
            seconds = time.perf_counter() - start
            report = {}
            if os.path.exists(report_path):
                with open(report_path) as f:
                    report = json.load(f)
            fusions = report.get("fusions", [])
            result = {"ok": proc.returncode == 0,
                      "wall_seconds": round(seconds, 2),
                      "fusions": len(fusions),
                      "candidate_benchmarks":
                          report.get("candidate_benchmarks")}
            if phase == "warm":
                result["ok"] = result["ok"] and bool(fusions) and all(
                    f["status"] == "hit" for f in fusions) and \
                    report.get("candidate_benchmarks") == 0
            if not result["ok"]:
                print(proc.stdout[-3000:], proc.stderr[-3000:],
                      file=sys.stderr)
            table[name] = result
            out[phase] = table
            log(f"{name} {phase}: {'ok' if result['ok'] else 'FAILED'}, "
                f"{seconds:.1f} s, {result['fusions']} fusions")
    out["ok"] = all(r["ok"] for r in list(cold.values()) +
                    list(warm.values()))


# Side by side: the same JIT kernels and configs under both autotuners.

def _side_by_side_cases(dry_run, host_bound=False):
    """[(name, jit kernel, [autotune.Config], key, make_args(),
    grid(meta))]: the softmax example and the matmul, at one small shape
    on the interpreter; host_bound: shapes whose launch costs the host
    more than the GPU (for hit overhead, which a GPU-bound launch hides)."""
    import torch
    import triton

    from autotune.kernels import matmul, softmax
    dev = "cpu" if dry_run else "cuda"
    dtype = torch.float32 if dry_run else torch.bfloat16
    rows, cols = (8, 64) if dry_run or host_bound else (4096, 2048)
    m, n, k = (32, 32, 32) if dry_run else \
        (64, 64, 64) if host_bound else (4096, 4096, 4096)

    def softmax_args():
        x = torch.randn(rows, cols, device=dev, dtype=dtype)
        y = torch.empty_like(x)
        return (x, y, rows, cols, x.stride(0)), \
            {"BLOCK_COLS": triton.next_power_of_2(cols)}

    def matmul_args():
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        bias = torch.randn(n, device=dev, dtype=dtype)
        c = torch.empty(m, n, device=dev, dtype=dtype)
        return (a, b, bias, c, m, n, k, a.stride(0), a.stride(1),
                b.stride(0), b.stride(1), c.stride(0), c.stride(1)), \
            {"ACTIVATION": "relu", "INPUT_PRECISION": "ieee"}
    # Two configs each on the interpreter: the script is checked, not the
    # figures. On the GPU the softmax's 6 and the first 4 of the matmul's
    # 20 (each side compiles them serially, in its own cache: the budget).
    keep = 2 if dry_run else None
    mm_configs = matmul.matmul_bias_act_kernel.configs[:2 if dry_run else 4]
    return [
        ("softmax", softmax.softmax_kernel.kernel,
         softmax.softmax_kernel.configs[:keep], ["n_rows", "n_cols"],
         softmax_args,
         lambda meta: (triton.cdiv(rows, meta["ROWS"]),)),
        ("matmul_bias_relu", matmul.matmul_bias_act_kernel.kernel,
         mm_configs, ["M", "N", "K"], matmul_args,
         lambda meta: (triton.cdiv(m, meta["BLOCK_M"])
                       * triton.cdiv(n, meta["BLOCK_N"]),))]


def _triton_configs(configs):
    import triton
    return [triton.Config(dict(c.kwargs), num_warps=c.num_warps,
                          num_stages=c.num_stages) for c in configs]


def _config_text(kwargs, num_warps, num_stages):
    return " ".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + \
        f" w{num_warps} s{num_stages}"


# triton.autotune's timing calls in this process (its do_bench, given to
# its Autotuner), next to ours (the session backend's ledger).
THEIR_TIMING = Ledger()


def _cpu_do_bench(fn, quantiles=None, **_):
    """Triton's autotuner on the interpreter: a wall-clock do_bench."""
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    THEIR_TIMING.add(sum(samples), sum(samples))
    return [samples[1]] * len(quantiles) if quantiles else samples[1]


# Where the check tunes only to compare the two tuners: shorter timing
# than either's default, the same for both.
COMPARE_WARMUP_MS, COMPARE_REP_MS = 5, 25


def side_kernels(case):
    """{'ours': JITFunction, 'theirs': JITFunction}: one kernel object per
    side, so neither launches a binary the other compiled in memory."""
    import triton
    jit = case[1]
    # triton.jit: an InterpretedFunction on the interpreter, as the
    # module's own kernel is there.
    return {who: triton.jit(jit.fn) for who in ("ours", "theirs")}


def _compare_do_bench(fn, quantiles=None, **_):
    from triton.testing import do_bench
    start = time.perf_counter()
    value = do_bench(fn, warmup=COMPARE_WARMUP_MS, rep=COMPARE_REP_MS,
                     quantiles=quantiles)
    THEIR_TIMING.add(COMPARE_WARMUP_MS + COMPARE_REP_MS,
                     (time.perf_counter() - start) * 1e3)
    return value


def _make_tuners(case, dry_run, kernels):
    """{'ours': ..., 'theirs': ...}: fresh autotuners of one config list,
    each over its own side's kernel object."""
    import triton.runtime.autotuner as triton_autotuner

    import autotune
    name, _, configs, key, _, _ = case
    return {
        "ours": autotune.tune(kernels["ours"], configs, key=key,
                              name=f"{name}_ours"),
        "theirs": triton_autotuner.Autotuner(
            kernels["theirs"], kernels["theirs"].arg_names,
            _triton_configs(configs), key, None, None,
            do_bench=_cpu_do_bench if dry_run else _compare_do_bench)}


# The Triton cache directory each side's last cold tuning filled.
_SIDE_CACHE_DIRS = {}
# Our side's timing calls in this process (summed over its sessions).
OUR_TIMING = Ledger()


def _fresh_session(dry_run):
    import autotune
    autotune.configure()  # an empty in-memory cache
    if not dry_run:
        backend = autotune.session().backend
        backend.warmup_ms, backend.rep_ms = COMPARE_WARMUP_MS, COMPARE_REP_MS


def _tune_once(case, dry_run, kernels, order=("ours", "theirs"),
               cold=True):
    """Tunings in this process, sides in `order`: {'ours': (seconds,
    config text, {"compiled": n, "found_on_disk": m}), 'theirs': ...}.
    cold: each side compiles into an empty Triton cache directory of its
    own (the on-disk cache of one side is not the other's)."""
    _, _, _, _, make_args, grid = case
    out = {}
    tuners = _make_tuners(case, dry_run, kernels)
    saved = os.environ.get("TRITON_CACHE_DIR")
    try:
        for who in order:
            if cold:
                os.environ["TRITON_CACHE_DIR"] = _SIDE_CACHE_DIRS[who] = \
                    _fresh_cache_dir(f"gpu_check_{who}_cache.")
            _fresh_session(dry_run)
            tuner = tuners[who]
            args, kwargs = make_args()
            counted = _counted_here()
            timing = _backend_timing()
            start = time.perf_counter()
            tuner[grid](*args, **kwargs)
            _sync(dry_run)
            seconds = time.perf_counter() - start
            OUR_TIMING.add_summary(timing, _backend_timing())
            best = tuner.best_config
            out[who] = (seconds, _config_text(best.kwargs, best.num_warps,
                                              best.num_stages),
                        _counts_since(counted))
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
    return out


def _oracle(case, dry_run, rounds, jit):
    """True time (ms) of every config: do_bench of plain launches of `jit`
    (a kernel object that compiled them already), rounds interleaved
    across configs, median per config."""
    _, _, configs, _, make_args, grid = case
    time_ms = _timer(dry_run)
    args, kwargs = make_args()
    times = {}
    for _ in range(rounds):
        for c in configs:
            text = _config_text(c.kwargs, c.num_warps, c.num_stages)

            def launch(c=c):
                jit[grid](*args, **kwargs, **c.all_kwargs())
            try:
                times.setdefault(text, []).append(time_ms(launch))
            except Exception:  # noqa: BLE001 -- a config that cannot run
                times.setdefault(text, []).append(float("inf"))
    return {t: statistics.median(v) for t, v in times.items()}


def _hit_overhead_us(case, dry_run, calls, kernels):
    """Per-call host time of a tuned kernel on its hit path minus a plain
    JITFunction launch of the same config, interleaved; per autotuner.
    `case` is a host-bound one: on a GPU-bound launch the queue hides the
    host's time and the difference is noise."""
    name, jit, configs, key, make_args, grid = case
    tuners = _make_tuners(case, dry_run, kernels)
    ours, theirs = tuners["ours"], tuners["theirs"]
    _fresh_session(dry_run)
    args, kwargs = make_args()
    timing = _backend_timing()
    ours[grid](*args, **kwargs)
    OUR_TIMING.add_summary(timing, _backend_timing())
    theirs[grid](*args, **kwargs)
    _sync(dry_run)
    best = {"ours": ours.best_config.all_kwargs(),
            "theirs": theirs.best_config.all_kwargs()}
    per_call = {"ours": [], "theirs": [], "plain_ours": [],
                "plain_theirs": []}
    for _ in range(5):
        for who, fn in (
                ("ours", lambda: ours[grid](*args, **kwargs)),
                ("plain_ours", lambda: kernels["ours"][grid](
                    *args, **kwargs, **best["ours"])),
                ("theirs", lambda: theirs[grid](*args, **kwargs)),
                ("plain_theirs", lambda: kernels["theirs"][grid](
                    *args, **kwargs, **best["theirs"]))):
            _sync(dry_run)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            _sync(dry_run)
            per_call[who].append((time.perf_counter() - start) / calls * 1e6)
    med = {k: statistics.median(v) for k, v in per_call.items()}
    return {"ours": med["ours"] - med["plain_ours"],
            "theirs": med["theirs"] - med["plain_theirs"]}


def _fresh_tunings(case_name, dry_run, count, env, deadline):
    """Picks of `count` fresh processes (empty caches)."""
    picks = {"ours": [], "theirs": []}
    for _ in range(count):
        left = deadline - time.time()
        if left < 5:
            break
        cmd = [sys.executable, os.path.abspath(__file__), "--tune-once",
               case_name] + (["--dry-run"] if dry_run else [])
        try:
            proc = run_group(cmd, timeout=left, cwd=ROOT, env=env)
        except subprocess.TimeoutExpired:
            break
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        for who in picks:
            picks[who].append(result[who][1])
    return picks


def section_side_by_side(out, dry_run, env, budget_s=110):
    deadline = time.time() + budget_s - 10
    fresh = 1 if dry_run else 4
    results = {}
    # Neither side's first cold tuning pays for the driver's start.
    out["warm_up_s"] = warm_up(dry_run)
    problem = interpreter_problem(dry_run)
    if problem:
        out["skipped"] = {"matmul_bias_relu": problem}
    for case in _side_by_side_cases(dry_run):
        if problem and case[0] == "matmul_bias_relu":
            continue
        name = case[0]
        row = {}
        kernels = side_kernels(case)
        # Cold, each side in its own cache; which side goes first
        # alternates between the kernels (clocks warmed by the first).
        order = ("ours", "theirs") if len(results) % 2 == 0 else \
            ("theirs", "ours")
        first = _tune_once(case, dry_run, kernels, order)
        # Again in the same process, the other side first, each on its own
        # kernel object (its binaries in memory now): the difference is
        # the compilation in the first tuning.
        again = _tune_once(case, dry_run, kernels, order[::-1], cold=False)
        row["first"] = order[0]
        row["cold_tuning_s"] = {w: _figure(first[w][0]) for w in first}
        # Whether the cold tunings compiled (each side in an empty folder
        # of its own: all its configs) and the second ones did not.
        row["triton_cache_cold"] = {w: first[w][2] for w in first}
        row["triton_cache_again"] = {w: again[w][2] for w in again}
        row["compile_share"] = {
            w: _figure(max(0.0, first[w][0] - again[w][0]) / first[w][0])
            for w in first}
        results[name] = row
        out["kernels"] = results
        small = next(c for c in _side_by_side_cases(dry_run, True)
                     if c[0] == name)
        row["hit_overhead_shape"] = "host-bound (8x64 rows, 64^3 matmul)"
        # The same kernel objects: the 64^3 matmul specialises as the
        # 4096^3 one does (every size a multiple of 16), so it launches
        # the binaries they hold instead of compiling them again.
        row["hit_overhead_us"] = {
            w: _figure(v) for w, v in _hit_overhead_us(
                small, dry_run, 3 if dry_run else 200, kernels).items()}
        out["kernels"] = results
        oracle = _oracle(case, dry_run, 1 if dry_run else 3,
                         kernels["ours"])
        best = min(oracle.values())
        row["oracle_best"] = min(oracle, key=oracle.get)
        row["regret"] = {w: _figure(oracle[first[w][1]] / best)
                         for w in first}
        out["kernels"] = results
        picks = _fresh_tunings(name, dry_run, fresh, dict(
            env, TRITON_CACHE_DIR=_SIDE_CACHE_DIRS["ours"]), deadline)
        for w in picks:
            picks[w] = [first[w][1], again[w][1]] + picks[w]
        row["picks"] = picks
        row["winner_flip_rate"] = {
            w: _figure(1.0 - max(p.count(x) for x in p) / len(p))
            for w, p in picks.items()}
        row["within_2pct_of_best"] = {
            w: _figure(sum(oracle.get(x, float("inf")) <= 1.02 * best
                           for x in p) / len(p)) for w, p in picks.items()}
        row["ratio_ours_over_triton"] = {
            fig: _figure(row[fig]["ours"] / row[fig]["theirs"])
            if row[fig]["theirs"] else None
            for fig in ("cold_tuning_s", "hit_overhead_us", "regret")}
        out["kernels"] = results
        log(f"side by side {name}: {row['ratio_ours_over_triton']}")
    for fig in FIGURES["side_by_side"]:
        out[fig] = {n: r.get(fig) for n, r in results.items()}
    # What the two sides' timing calls asked for and cost (the cold
    # tunings, the second tunings and the hit-overhead tunings).
    out["timing_calls"] = {"ours": OUR_TIMING.summary(),
                           "theirs": THEIR_TIMING.summary()}


def section_kernels(out, dry_run, env):
    import torch

    import autotune
    from autotune.kernels import layernorm, matmul, softmax
    autotune.configure()
    dev = autotune.device()
    figures = Ledger()
    time_ms = _timer(dry_run, figures)
    torch.manual_seed(0)
    # In a Triton cache folder of its own (OWN_CACHE_SECTIONS): each
    # tuning below compiles what it does not find from an earlier one of
    # this section, and says so.
    out["triton_cache_dir"] = os.environ.get("TRITON_CACHE_DIR")
    out["warm_up_s"] = warm_up(dry_run)
    # The device's copy bandwidth: read + write of a large buffer.
    size = 1 << 16 if dry_run else 1 << 28
    src = torch.empty(size, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    out["copy_gbps"] = _figure(2.0 * size / time_ms(lambda: dst.copy_(src))
                               / 1e6)
    dtype = torch.float32 if dry_run else torch.bfloat16
    shapes = [(64, 64, 64)] if dry_run else \
        [(4096, 4096, 4096), (16384, 1024, 1024), (64, 8192, 4096)]
    problem = interpreter_problem(dry_run)
    if problem:
        out["skipped"] = {"matmul_bias_relu": problem, "layernorm": problem}
        shapes = []
    # softmax and layernorm tune their interpreter-sized config lists
    # (ROWS 1-4, BLOCK 32-128) on the GPU too: their GB/s reflect those.
    out["config_lists"] = (
        "matmul: the GPU space (20 Hopper-sized configs); softmax and "
        "layernorm: their small config lists (6 each), so their GB/s "
        "reflect those lists, not a GPU-sized search")
    rows = []
    out["matmul"] = rows
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        bias = torch.randn(n, device=dev, dtype=dtype)
        counted = _counted_here()
        start = time.perf_counter()
        matmul.matmul_bias_act(a, b, bias, "relu")  # tunes
        tune_s = time.perf_counter() - start
        triton_cache = _counts_since(counted)
        ours = time_ms(lambda: matmul.matmul_bias_act(a, b, bias, "relu"))
        # torch's best for this epilogue: one GEMM with the bias fused
        # (addmm), the relu in place.
        theirs = time_ms(lambda: torch.addmm(bias, a, b).relu_())
        flops = 2.0 * m * n * k
        peak, peak_source = _bf16_peak(dev, dry_run)
        rows.append({"kernel": "matmul_bias_relu", "dtype": str(dtype),
                     "shape": f"{m}x{n}x{k}", "tuning_s": round(tune_s, 2),
                     "triton_cache": triton_cache,
                     "tuned_tflops": _figure(flops / ours / 1e9),
                     "torch_tflops": _figure(flops / theirs / 1e9),
                     # The project's GPU goals are written as this share.
                     "share_of_bf16_peak": _figure(flops / ours / 1e-3
                                                   / peak) if peak else None,
                     "bf16_peak_source": peak_source})
        out["matmul"] = rows
    # Rows of 2048 and 1024 (128 and 64 MiB of bf16): none of the six
    # configs spills there; at 8192 columns three do (ROWS=4 with 2 warps
    # spills 4.9 KB and compiles in 5.6 s for sm_90 on the CPU machines, the
    # six in 11 s against 2.4 s at 2048).
    row_shapes = [(8, 64)] if dry_run else [(16384, 2048), (65536, 1024)]
    bandwidth_rows = []
    out["rows"] = bandwidth_rows
    for r, c in row_shapes:
        x = torch.randn(r, c, device=dev, dtype=dtype)
        w = torch.randn(c, device=dev, dtype=dtype)
        bb = torch.randn(c, device=dev, dtype=dtype)
        moved = 2.0 * x.numel() * x.element_size()  # read x, write y
        for name, ours_fn, theirs_fn in (
                ("softmax", lambda: softmax.softmax(x),
                 lambda: torch.softmax(x, dim=-1)),
                ("layernorm", lambda: layernorm.layernorm(x, w, bb),
                 lambda: torch.nn.functional.layer_norm(x, (c,), w, bb,
                                                        1e-5))):
            if name in out.data.get("skipped", {}):
                continue
            counted = _counted_here()
            ours_fn()  # tunes
            triton_cache = _counts_since(counted)
            ours_gbps = moved / time_ms(ours_fn) / 1e6
            bandwidth_rows.append({
                "kernel": name, "dtype": str(dtype), "shape": f"{r}x{c}",
                "triton_cache": triton_cache,
                "tuned_gbps": _figure(ours_gbps),
                "torch_gbps": _figure(moved / time_ms(theirs_fn) / 1e6),
                "share_of_copy": _figure(ours_gbps / out["copy_gbps"])})
            out["rows"] = bandwidth_rows
    out["timing_calls"] = {"tuning": _backend_timing(),
                           "figures": figures.summary()}
    autotune.session().finish()


def _share_of_peak(row):
    share = row.get("share_of_bf16_peak")
    return "" if share is None else f"{share} of bf16 peak"


def _bf16_peak(dev, dry_run):
    """(dense bf16 FLOP/s, where it came from) of the device, from the
    datasheet table autotune/report/roofline.py keeps; (None, why) where
    there is none."""
    if dry_run:
        return None, "dry run (fp32 on the interpreter): no bf16 peak"
    # Heavy, and only on a GPU run: torch and the package's table.
    import torch

    from autotune.report import roofline
    name = torch.cuda.get_device_name(dev)
    gpu = roofline.known_gpu(name)
    if gpu is None:
        return None, f"{name}: not in the datasheet table"
    return gpu.peaks["bf16"], f"{gpu.source} dense bf16 peak"


def section_compile_jobs(out, dry_run, env):
    """Cold tuning of the matmul in a fresh process, compile jobs 1 and
    all (a fresh Triton cache directory each, so both compile)."""
    jobs = min(os.cpu_count() or 1, 8)
    out["jobs"] = jobs
    problem = interpreter_problem(dry_run)
    if problem:
        out["skipped"] = {"matmul_bias_relu": problem}
        out["cold_tuning_s_1_job"] = out["cold_tuning_s_all_jobs"] = None
        return
    for label, n in (("cold_tuning_s_1_job", 1),
                     ("cold_tuning_s_all_jobs", jobs)):
        cache_dir = _fresh_cache_dir("gpu_check_triton_cache.")
        run_env = dict(env, TRITON_CACHE_DIR=cache_dir,
                       AUTOTUNE_FLAGS=f"--autotune_compile_jobs={n}")
        cmd = [sys.executable, os.path.abspath(__file__),
               "--tune-example"] + (["--dry-run"] if dry_run else [])
        proc = run_group(cmd, cwd=ROOT, env=run_env)
        if proc.returncode != 0:
            out[label] = None
            out[label + "_error"] = (proc.stderr.strip().splitlines()
                                     or [""])[-1][:200]
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        out[label] = _figure(result["ours"][0])
        out[label.replace("cold_tuning_s", "binaries")] = \
            _binaries_in(cache_dir)


def _gpu_target(dry_run):
    if dry_run:
        return "sm_90"  # compiled on this CPU; the interpreter never loads
    import torch
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def section_compiled(out, dry_run, env):
    """What compile_for saves on a GPU runner: the example suite's winners
    compiled on the CPU by `autotune_cache compile`, then a load run of
    the suite in a fresh Triton cache without them (every winner compiled
    here) and with them (none should be): wall time and the binaries each
    run compiled."""
    example = "examples/xla_style_test.py" if dry_run else \
        "examples/fused_kernels_test.py"
    work = tempfile.mkdtemp(prefix="gpu_check_compiled.")
    # In the dump run's test outputs, as a dump target writes it.
    cache = os.path.join(work, "tune", "autotune_cache.textproto")
    triton_env = {"TRITON_DEFAULT_FP_FUSION": "1"}
    target = out["target"] = _gpu_target(dry_run)

    def run_suite(flags, label):
        cache_dir = _fresh_cache_dir(f"gpu_check_{label}.")
        outputs = os.path.join(work, label)
        os.makedirs(outputs, exist_ok=True)
        run_env = dict(env, TRITON_CACHE_DIR=cache_dir,
                       TEST_UNDECLARED_OUTPUTS_DIR=outputs,
                       AUTOTUNE_FLAGS=flags, **triton_env)
        before = _counted_here()
        start = time.perf_counter()
        proc = run_group([sys.executable, example], cwd=ROOT, env=run_env)
        counts = _counts_since(before)
        result = {"ok": proc.returncode == 0,
                  "wall_seconds": round(time.perf_counter() - start, 2),
                  # The run's Triton cache folder starts empty: a binary
                  # there was compiled by this run.
                  "binaries_compiled": _binaries_in(cache_dir),
                  # Triton compile() calls of the run (its listener): a
                  # hit was found on disk (with compiled kernels: served
                  # from them), a miss compiled.
                  "compile_calls_compiled": counts["compiled"],
                  "compile_calls_found_on_disk": counts["found_on_disk"]}
        if not result["ok"]:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        log(f"{label}: {'ok' if result['ok'] else 'FAILED'}, "
            f"{result['wall_seconds']} s, {result['binaries_compiled']} "
            f"binaries compiled, compile() calls: {counts['compiled']} "
            f"compiled, {counts['found_on_disk']} found on disk")
        return result

    tuned = run_suite(f"--dump_autotune_results_to={cache}", "tune")
    if not tuned["ok"]:
        out["ok"] = False
        return
    compiled = os.path.join(work, "compiled")
    jobs = min(os.cpu_count() or 1, 8)
    start = time.perf_counter()
    proc = run_group(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", cache, "--target", target, "-o", compiled, "--jobs",
         str(jobs)] + [f"--triton_env={k}={v}" for k, v in
                       triton_env.items()]
        # compile imports only the modules named: the example's kernels.
        + [f"--kernel_module=autotune.kernels.{name}"
           for name in ("layernorm", "matmul", "softmax")],
        cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    manifest = {}
    if os.path.exists(os.path.join(compiled, "autotune-compiled.json")):
        with open(os.path.join(compiled, "autotune-compiled.json")) as f:
            manifest = json.load(f)
    out["compile"] = {"ok": proc.returncode == 0, "jobs": jobs,
                      "wall_seconds": round(wall, 2),
                      # The manifest holds no timings (the tree is
                      # reproducible): compile's closing line sums them.
                      "compile_seconds": _summed_compile_seconds(proc.stdout),
                      "binaries": manifest.get("built"),
                      "entries_without_request":
                          manifest.get("entries_without_request")}
    log(f"compile for {target}: {out['compile']}")
    load = (f"--load_autotune_results_from={cache} "
            "--require_complete_autotune_results")
    out["load_without_compiled"] = run_suite(load, "without")
    with_compiled = out["load_with_compiled"] = run_suite(
        f"{load} --autotune_compiled_kernels={compiled}", "with")
    for key, value in compiled_counts(with_compiled, dry_run).items():
        out[key] = value  # each written to the section's results at once
    log(f"compiled: served {out['served']}, compiled {out['compiled']} in "
        "the load run with compiled kernels")
    out["ok"] = out["compile"]["ok"] and all(
        out[k]["ok"] for k in ("load_without_compiled", "load_with_compiled")
    ) and out["compiled_nothing"]


def compiled_counts(with_compiled, dry_run):
    """The compiled section's verdict from the load run given compiled
    kernels: what it was served and what it compiled. It holds only when
    that run compiled nothing (and, on a GPU, was served something)."""
    served = with_compiled["compile_calls_found_on_disk"]
    compiled = max(with_compiled["binaries_compiled"],
                   with_compiled["compile_calls_compiled"] or 0)
    return {
        "served": served, "compiled": compiled,
        "compiled_nothing": compiled == 0 and (dry_run or bool(served)),
        "counts_mean": (
            "served: Triton compile() calls of the load run with compiled "
            "kernels that found their binary on disk (its Triton cache "
            "starts empty, so in the compiled kernels); compiled: binaries "
            "that run compiled (the most of its new binaries and its "
            "compile() misses)" + (
                "; on the interpreter nothing is compiled or served, so "
                "both are 0" if dry_run else ""))}


def _tune_example(dry_run):
    import torch

    from autotune.kernels import matmul
    dev = "cpu" if dry_run else "cuda"
    size = 32 if dry_run else 4096
    dtype = torch.float32 if dry_run else torch.bfloat16
    a = torch.randn(size, size, device=dev, dtype=dtype)
    b = torch.randn(size, size, device=dev, dtype=dtype)
    bias = torch.randn(size, device=dev, dtype=dtype)
    warm_up(dry_run)  # the driver's start is not the tuning's
    start = time.perf_counter()
    matmul.matmul_bias_act(a, b, bias, "relu")
    _sync(dry_run)
    return time.perf_counter() - start


SECTION_FUNCTIONS = {"preflight": section_preflight, "tests": section_tests,
                     "suite": section_suite,
                     "side_by_side": section_side_by_side,
                     "kernels": section_kernels,
                     "compile_jobs": section_compile_jobs,
                     "compiled": section_compiled}


# -- the report -------------------------------------------------------------

def _cell(value):
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    return str(value)


def _counted(counts):
    """'compiled / found on disk' of a {"compiled", "found_on_disk"}."""
    if not isinstance(counts, dict):
        return ""
    return f"{counts.get('compiled')} / {counts.get('found_on_disk')}"


def _timing_lines(ledgers):
    """Timing calls: what they asked for beside what they cost."""
    if not ledgers:
        return []
    lines = ["", "| timing calls of | calls | asked ms | wall ms | "
             "wall / asked |", "|---|---|---|---|---|"]
    for who, t in ledgers.items():
        lines.append(f"| {who} | {t.get('calls')} | {t.get('asked_ms')} | "
                     f"{t.get('wall_ms')} | {t.get('wall_over_asked')} |")
    return lines


def markdown(report):
    pre = report["sections"].get("preflight", {}).get("results", {})
    lines = [f"# GPU check: {pre.get('device_key', '?')}", ""]
    if pre.get("versions"):
        lines += [", ".join(f"{k} {v}" for k, v in pre["versions"].items()
                            if v), ""]
    if report["dry_run"]:
        lines += ["Dry run on Triton's interpreter: the figures mean "
                  "nothing, the sections and their figures are checked.", ""]
    lines += ["Compiled / found on disk: Triton compile() calls in every "
              "process of the section that compiled a binary / found it in "
              "an on-disk cache (binaries held in a kernel object's memory "
              "are neither); new binaries: those that appeared in the "
              "section's Triton cache folders.", "",
              "| section | status | seconds | budget s | compiled | "
              "found on disk | new binaries | Triton cache | error |",
              "|---|---|---|---|---|---|---|---|---|"]
    order = [n for n, _ in SECTIONS + OPTIONAL_SECTIONS
             if n in report["sections"]]
    for name in order:
        s = report["sections"][name]
        tc = s.get("triton_cache", {})
        lines.append(f"| {name} | {s['status']} | {s.get('seconds', '')} | "
                     f"{s.get('budget_s', '')} | {tc.get('compiled', '')} | "
                     f"{tc.get('found_on_disk', '')} | "
                     f"{tc.get('new_binaries', '')} | "
                     f"{tc.get('folder', '')} | {s.get('error', '')} |")
    for name in order:
        s = report["sections"].get(name)
        if not s:
            continue
        res = s.get("results", {})
        lines += ["", f"## {name} ({s['status']})", ""]
        if s.get("error"):
            lines += [f"error: `{s['error']}`", ""]
        for kernel, why in res.get("skipped", {}).items():
            lines += [f"Skipped {kernel}: {why}.", ""]
        if name == "preflight" and res.get("doctor"):
            lines += ["The GPU runner doctor (docs/gpu-runners.md):", "",
                      "```"] + res["doctor"] + ["```", ""]
        builds = res.get("per_process_builds", {}) if name == "preflight" \
            else {}
        if builds:
            lines += [builds.get("line") or f"Per-process builds: {builds}",
                      ""]
        if name == "side_by_side":
            firsts = ", ".join(f"{k}: {r.get('first')} first"
                               for k, r in res.get("kernels", {}).items())
            lines += [f"Selection rule: {SELECTION_RULE}.", "",
                      "Each side on its own kernel object, cold in its own "
                      f"Triton cache directory ({firsts}); hit overhead on "
                      "host-bound shapes (8x64 rows, 64^3 matmul).", "",
                      "| kernel | figure | ours | triton.autotune | "
                      "ours / triton |", "|---|---|---|---|---|"]
            for kernel, row in res.get("kernels", {}).items():
                ratios = row.get("ratio_ours_over_triton", {})
                for fig in FIGURES["side_by_side"][:-1]:
                    v = row.get(fig)
                    if not isinstance(v, dict):
                        continue
                    lines.append(f"| {kernel} | {fig} | {v.get('ours')} | "
                                 f"{v.get('theirs')} | "
                                 f"{ratios.get(fig, '')} |")
                for fig in ("triton_cache_cold", "triton_cache_again"):
                    v = row.get(fig, {})
                    lines.append(f"| {kernel} | {fig} (compiled / on disk) "
                                 f"| {_counted(v.get('ours'))} | "
                                 f"{_counted(v.get('theirs'))} | |")
            lines += ["", f"Warm-up before the first timed tuning (driver "
                      f"start, one scratch kernel): {res.get('warm_up_s')} s."]
            lines += _timing_lines(res.get("timing_calls", {}))
            continue
        if name == "kernels":
            lines += [f"copy_gbps (device copy bandwidth): "
                      f"{res.get('copy_gbps')}", "",
                      f"Config lists: {res.get('config_lists', '')}.", "",
                      "torch baseline of matmul_bias_relu: "
                      "torch.addmm(bias, a, b).relu_().", "",
                      f"Warm-up before the first timed tuning: "
                      f"{res.get('warm_up_s')} s; in its own Triton cache "
                      "folder, so its first tuning compiles.", "",
                      "| kernel | dtype | shape | tuned | torch | unit | "
                      "share of roof | tuning s | compiled / on disk |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for row in res.get("matmul", []):
                lines.append(f"| {row['kernel']} | {row['dtype']} | "
                             f"{row['shape']} | {row['tuned_tflops']} | "
                             f"{row['torch_tflops']} | TFLOP/s | "
                             f"{_share_of_peak(row)} | "
                             f"{row.get('tuning_s', '')} | "
                             f"{_counted(row.get('triton_cache'))} |")
            for row in res.get("rows", []):
                lines.append(f"| {row['kernel']} | {row['dtype']} | "
                             f"{row['shape']} | {row['tuned_gbps']} | "
                             f"{row['torch_gbps']} | GB/s | "
                             f"{row['share_of_copy']} of copy | | "
                             f"{_counted(row.get('triton_cache'))} |")
            peak_sources = sorted({row.get("bf16_peak_source") for row in
                                   res.get("matmul", [])} - {None})
            if peak_sources:
                lines += ["", "bf16 peak: " + "; ".join(peak_sources) + "."]
            lines += _timing_lines(res.get("timing_calls", {}))
            continue
        for key in FIGURES.get(name, []):
            if key in res and key not in ("doctor", "per_process_builds"):
                lines.append(f"- {key}: {_cell(res[key])}")
        for key in sorted(set(res) - set(FIGURES.get(name, []))):
            if key not in ("versions", "doctor", "per_process_builds"):
                lines.append(f"- {key}: {_cell(res[key])}")
    lines += ["", f"Total: {report['seconds']} s of {report['limit_s']} s; "
              f"ok: {report['ok']}", ""]
    return "\n".join(lines)


def write_report(out_dir, report):
    for name, text in (("gpu_check.json",
                        json.dumps(report, indent=1, sort_keys=True,
                                   default=str)),
                       ("gpu_check.md", markdown(report))):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out_dir, name))


def _section_env(name, work_dir, env):
    """The section's environment: its compile log folder, its folder of
    Triton caches and, for OWN_CACHE_SECTIONS, a fresh Triton cache folder
    of its own. Returns (env, log folder, caches folder)."""
    log_dir = os.path.join(work_dir, f"{name}.compiles")
    caches = os.path.join(work_dir, f"{name}.caches")
    for folder in (log_dir, caches):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    section_env = dict(env, **{COMPILE_LOG_ENV: log_dir,
                               SECTION_CACHES_ENV: caches})
    if name in OWN_CACHE_SECTIONS:
        section_env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(
            prefix=f"gpu_check_{name}_cache.", dir=caches)
    return section_env, log_dir, caches


def section_triton_cache(name, run_cache, binaries_before, log_dir, caches,
                         listener):
    """What a section compiled and what it found on disk: Triton compile()
    calls in all its processes (misses compiled, hits found in an on-disk
    cache; None where this Triton has no compilation listener) and the
    binaries new in the Triton cache folders it was given (the run's, its
    own)."""
    counts = compile_counts(log_dir) if listener else \
        {"compiled": None, "found_on_disk": None}
    return dict(
        counts,
        folder=("a fresh one of its own" if name in OWN_CACHE_SECTIONS
                else "the run's"),
        new_binaries=(_binaries_in(run_cache) - binaries_before
                      + _binaries_in(caches)) if run_cache else
        _binaries_in(caches))


def run_section(name, budget_s, work_dir, env, dry_run, listener=True,
                keep_caches=False):
    """Runs one section in a child process of its own session within
    budget_s (the whole group is killed when it runs over); returns its
    entry for the report (status ok, failed, cut). The section writes its
    results into work_dir (not $OUT): they are folded into the report,
    with what it compiled and found on disk (section_triton_cache)."""
    path = os.path.join(work_dir, f"{name}.json")
    if os.path.exists(path):
        os.remove(path)
    run_cache = env.get("TRITON_CACHE_DIR")
    binaries_before = _binaries_in(run_cache) if run_cache else 0
    env, log_dir, caches = _section_env(name, work_dir, env)
    cmd = [sys.executable, os.path.abspath(__file__), "--section", name,
           "--work", work_dir, "--budget", str(budget_s)] + \
        (["--dry-run"] if dry_run else [])
    start = time.perf_counter()
    entry = {"budget_s": round(budget_s)}
    stderr = ""
    try:
        proc = run_group(cmd, timeout=budget_s, grace_s=KILL_GRACE_S,
                         cwd=ROOT, env=env)
        entry["status"] = "ok" if proc.returncode == 0 else "failed"
        stderr = proc.stderr
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            entry["error"] = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        entry["status"] = "cut"
        entry["error"] = f"ran over its budget of {budget_s:.0f} s"
        stderr = e.stderr or ""
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
    entry["seconds"] = round(time.perf_counter() - start, 1)
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    # The section's own exception, when it raised one, names the failure.
    if results.get("exception"):
        entry["error"] = results.pop("exception")
    entry["results"] = results
    entry["triton_cache"] = section_triton_cache(
        name, run_cache, binaries_before, log_dir, caches, listener)
    if not keep_caches:
        shutil.rmtree(caches, ignore_errors=True)
    if entry["status"] == "ok" and results.get("ok") is False:
        entry["status"] = "failed"
        entry.setdefault("error", "a check of the section failed "
                         "(see its results)")
    if entry["status"] != "ok" and stderr.strip():
        entry["stderr_tail"] = stderr.strip()[-1500:]
        print(stderr[-3000:], file=sys.stderr)
    return entry


def _run_section_here(args, env):
    """The child side of run_section: the section function, its results
    written as they come, its exception (type and message) recorded."""
    _stop_children_on_term()
    os.environ.update(TRITON_INTERPRET=env["TRITON_INTERPRET"])
    os.environ.pop("AUTOTUNE_FLAGS", None)
    out = Partial(os.path.join(args.work, f"{args.section}.json"))
    fn = SECTION_FUNCTIONS[args.section]
    try:
        if args.section == "side_by_side":
            fn(out, args.dry_run, env, budget_s=args.budget)
        else:
            fn(out, args.dry_run, env)
    except BaseException as e:
        import traceback
        traceback.print_exc()
        text = f"{type(e).__name__}: {e}".strip().splitlines()
        out["exception"] = (text[0] if text else type(e).__name__)[:300]
        return 1
    return 0


def parse_sections(text):
    """--sections a,b: the sections to run, in the check's order."""
    known = dict(SECTIONS + OPTIONAL_SECTIONS)
    if not text:
        return list(SECTIONS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"gpu_check: --sections: unknown section(s) "
                         f"{', '.join(unknown) or '(none given)'}; known: "
                         f"{', '.join(known)}")
    return [(n, b) for n, b in SECTIONS + OPTIONAL_SECTIONS if n in names]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument("--sections", default=None,
                        help="comma-separated sections to run (default: "
                        + ",".join(n for n, _ in SECTIONS) + "; also: "
                        + ",".join(n for n, _ in OPTIONAL_SECTIONS) + ")")
    parser.add_argument("--keep-triton-cache", action="store_true",
                        help="keep this run's fresh Triton cache folder "
                        "(default: removed at the end)")
    parser.add_argument("--section", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, default=60.0,
                        help=argparse.SUPPRESS)
    parser.add_argument("--tune-once", help=argparse.SUPPRESS)
    parser.add_argument("--tune-example", action="store_true",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sections = parse_sections(args.sections)
    env = dict(os.environ)
    # The compile counter first (its sitecustomize runs the next one).
    env["PYTHONPATH"] = os.pathsep.join(
        [COMPILE_COUNTER_DIR, ROOT]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # The tests' conftest picks the interpreter unless told otherwise.
    env["TRITON_INTERPRET"] = "1" if args.dry_run else "0"
    os.environ["TRITON_INTERPRET"] = env["TRITON_INTERPRET"]
    if args.tune_example:
        # A fresh process, AUTOTUNE_FLAGS from the caller: one cold tuning
        # of the example matmul (module-level, so its candidates can be
        # compiled ahead), its seconds on stdout.
        print(json.dumps({"ours": [_tune_example(args.dry_run), ""]}))
        return 0
    if args.tune_once:  # a fresh process: one cold tuning, picks on stdout
        os.environ.pop("AUTOTUNE_FLAGS", None)
        case = next(c for c in _side_by_side_cases(args.dry_run)
                    if c[0] == args.tune_once)
        # Fresh kernel objects; binaries from the cache directory the
        # section's cold tuning filled (agreement is measured here, not
        # compile time).
        print(json.dumps(_tune_once(case, args.dry_run, side_kernels(case),
                                    cold=False)))
        return 0
    env.pop("AUTOTUNE_FLAGS", None)
    if args.section:
        return _run_section_here(args, env)
    start = time.time()
    out_dir = args.out or tempfile.mkdtemp(prefix="gpu_check.")
    os.makedirs(out_dir, exist_ok=True)
    # Section results and scratch files live outside $OUT: the report
    # (gpu_check.json, gpu_check.md) is all that goes there.
    work_dir = tempfile.mkdtemp(prefix="gpu_check_work.")
    scale = DRY_RUN_SCALE if args.dry_run else 1.0
    # A fresh Triton cache folder per check run: a second check on a warm
    # machine is as cold as the first (Triton's default cache outlives
    # the process), and every section compiles what it reports compiling.
    # Sections that time a cold tuning still take folders of their own.
    triton_cache = tempfile.mkdtemp(prefix="gpu_check_triton_cache.")
    env["TRITON_CACHE_DIR"] = triton_cache
    listener = _compile_listener_available()
    report = {"dry_run": args.dry_run, "limit_s": TOTAL_S, "sections": {},
              "seconds": 0.0, "ok": False,
              "selection_rule": SELECTION_RULE,
              "triton_cache": {"dir": triton_cache,
                               "kept": bool(args.keep_triton_cache),
                               "compiles_counted": listener}}
    for name, budget in sections:
        budget *= scale
        left = TOTAL_S - (time.time() - start)
        if left < 10:
            report["sections"][name] = {"status": "cut", "budget_s": 0,
                                        "error": "no time left"}
            continue
        entry = run_section(name, min(budget, left), work_dir, env,
                            args.dry_run, listener,
                            bool(args.keep_triton_cache))
        report["sections"][name] = entry
        report["seconds"] = round(time.time() - start, 1)
        write_report(out_dir, report)
        log(f"{name}: {entry['status']} in {entry['seconds']} s"
            + (f": {entry['error']}" if entry.get("error") else ""))
        if name == "preflight" and entry["status"] != "ok":
            log("the preflight failed: nothing else can run")
            break
    report["seconds"] = round(time.time() - start, 1)
    report["ok"] = bool(report["sections"]) and all(
        s["status"] == "ok" for s in report["sections"].values())
    if not args.keep_triton_cache:
        shutil.rmtree(triton_cache, ignore_errors=True)
    write_report(out_dir, report)
    log(f"report: {out_dir}/gpu_check.json and gpu_check.md; "
        f"{report['seconds']} s; {'ok' if report['ok'] else 'FAILED'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
