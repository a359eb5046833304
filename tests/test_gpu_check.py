"""The GPU check's dry run: every section runs on the interpreter, and the
report names every section and figure."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_check  # noqa: E402


@pytest.mark.slow
def test_dry_run_report_has_every_section_and_figure(tmp_path):
    # On this Python (and its Triton): the one the tests run on.
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
    env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run(["bash", os.path.join(ROOT, "bench",
                                                "gpu_check.sh"), "--dry-run"],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=2400)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    # The report is all that goes to $OUT (the device machine returns at
    # most 8 files).
    assert len(os.listdir(tmp_path)) <= 8, os.listdir(tmp_path)
    with open(tmp_path / "gpu_check.json") as f:
        report = json.load(f)
    markdown = (tmp_path / "gpu_check.md").read_text()
    for name, _ in gpu_check.SECTIONS:
        section = report["sections"][name]
        assert section["status"] == "ok", (name, section)
        for figure in gpu_check.FIGURES[name]:
            assert figure in section["results"], (name, figure)
        assert f"## {name}" in markdown
        # What it compiled and found on disk: the interpreter compiles
        # nothing (zeros, counted); the preflight's runner doctor compiles
        # its tiny kernel for the GPU, in a folder of its own.
        assert section["triton_cache"] == {
            "compiled": 1 if name == "preflight" else 0, "found_on_disk": 0,
            "new_binaries": 0,
            "folder": "a fresh one of its own" if name == "kernels"
            else "the run's"}, (name, section["triton_cache"])
    assert "| compiled | found on disk | new binaries |" in markdown
    # Skipped only where the interpreter cannot run them, saying why.
    skipped = report["sections"]["side_by_side"]["results"].get("skipped",
                                                                {})
    assert all("cannot run a loop bounded by a kernel argument" in why
               for why in skipped.values())
    side = report["sections"]["side_by_side"]["results"]["kernels"]
    assert set(side) | set(skipped) == {"softmax", "matmul_bias_relu"}
    assert "softmax" in side
    for row in side.values():
        for figure in gpu_check.FIGURES["side_by_side"][:-1]:
            assert set(row[figure]) == {"ours", "theirs"}, figure
            assert f"| {figure} |" in markdown
        assert set(row["ratio_ours_over_triton"]) == {
            "cold_tuning_s", "hit_overhead_us", "regret"}
    assert "ours / triton" in markdown
    results = report["sections"]["side_by_side"]["results"]
    assert results["warm_up_s"] > 0
    for who in ("ours", "theirs"):
        timing = results["timing_calls"][who]
        assert timing["calls"] > 0 and timing["wall_ms"] > 0, (who, timing)
    for row in side.values():
        assert set(row["triton_cache_cold"]) == {"ours", "theirs"}
        assert row["triton_cache_cold"]["ours"] == {"compiled": 0,
                                                    "found_on_disk": 0}
    assert "triton_cache_cold (compiled / on disk)" in markdown
    assert "| timing calls of |" in markdown
    kernels = report["sections"]["kernels"]["results"]
    assert kernels["copy_gbps"] > 0
    assert kernels["warm_up_s"] > 0
    assert kernels["triton_cache_dir"] != report["triton_cache"]["dir"]
    assert set(kernels["timing_calls"]) == {"tuning", "figures"}
    assert all(r["triton_cache"] == {"compiled": 0, "found_on_disk": 0}
               for r in kernels["rows"] + kernels["matmul"])
    assert {r["kernel"] for r in kernels["rows"]} | set(
        kernels.get("skipped", {})) >= {"softmax", "layernorm"}
    assert "GB/s" in markdown
    assert "TFLOP/s" in markdown or "matmul_bias_relu" in kernels["skipped"]


def test_interpreter_problem_is_probed_on_the_interpreter_only():
    assert gpu_check.interpreter_problem(dry_run=False) is None
    import numpy
    import triton
    problem = gpu_check.interpreter_problem(dry_run=True)
    triton_version = tuple(int(p) for p in triton.__version__.split(".")[:2])
    numpy_version = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    # Triton 3.6 with NumPy 2.4 fails the probe; the pinned Triton passes.
    if triton_version == (3, 6) and numpy_version >= (2, 4):
        assert "NumPy < 2.4 runs them" in problem
    elif triton_version >= (3, 9):
        assert problem is None, problem


def test_section_budgets_fit_in_the_whole():
    # Five minutes on the GPU, the report's 10 s included.
    assert sum(b for _, b in gpu_check.SECTIONS) <= gpu_check.TOTAL_S <= 290
    assert [n for n, _ in gpu_check.SECTIONS + gpu_check.OPTIONAL_SECTIONS] \
        == list(gpu_check.FIGURES)


def test_sections_option_picks_some_in_the_checks_order():
    assert [n for n, _ in gpu_check.parse_sections("kernels,preflight")] \
        == ["preflight", "kernels"]
    assert gpu_check.parse_sections(None) == gpu_check.SECTIONS
    assert [n for n, _ in gpu_check.parse_sections("compile_jobs")] == \
        ["compile_jobs"]
    with pytest.raises(SystemExit) as raised:
        gpu_check.parse_sections("kernels,nope")
    assert "nope" in str(raised.value) and "\n" not in str(raised.value)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
        return f.read().split(") ")[-1][0] != "Z"


def test_a_cut_child_is_killed_with_its_own_children():
    """The budget kills the whole process group: the grandchild a
    section started (a pytest, an example, a compile pool) goes too."""
    import time
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        gpu_check.run_group(["bash", "-c", "sleep 300 & echo $!; wait"],
                            timeout=2, grace_s=0.5)
    grandchild = int(raised.value.stdout.split()[0])
    assert time.monotonic() - start < 30
    time.sleep(0.5)
    assert not _alive(grandchild)


def _preflight(tmp_path, **env):
    out = tmp_path / "out"
    run_env = dict(os.environ, **env)
    run_env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"),
         "--dry-run", "--sections", "preflight", "--out", str(out)],
        cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=600)
    with open(out / "gpu_check.json") as f:
        return proc, json.load(f), sorted(os.listdir(out))


def test_preflight_alone_writes_only_the_report(tmp_path):
    proc, report, files = _preflight(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert files == ["gpu_check.json", "gpu_check.md"]
    assert list(report["sections"]) == ["preflight"]
    assert report["sections"]["preflight"]["results"]["device_lock_wait_s"] \
        < 5


def test_preflight_records_the_runner_doctors_lines(tmp_path):
    from autotune.cli import doctor
    proc, report, _ = _preflight(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = report["sections"]["preflight"]["results"]["doctor"]
    assert [ln.split()[1] for ln in lines] == [
        c.__name__.removeprefix("check_") for c in doctor.CHECKS]
    assert not [ln for ln in lines if ln.startswith("FAIL")], lines
    with open(tmp_path / "out" / "gpu_check.md") as f:
        page = f.read()
    assert "The GPU runner doctor (docs/gpu-runners.md):" in page
    assert lines[0] in page


def test_a_doctor_fail_stops_the_check_before_the_costly_sections(tmp_path):
    out = tmp_path / "out"
    run_env = dict(os.environ, TRITON_LIBCUDA_PATH=str(tmp_path / "nowhere"))
    run_env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"),
         "--dry-run", "--sections", "preflight,tests", "--out", str(out)],
        cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert "the preflight failed: nothing else can run" in proc.stderr + \
        proc.stdout
    with open(out / "gpu_check.json") as f:
        report = json.load(f)
    assert list(report["sections"]) == ["preflight"]  # tests never ran
    section = report["sections"]["preflight"]
    assert section["status"] == "failed"
    assert section["error"].startswith(
        "RuntimeError: the runner doctor: 1 FAIL: FAIL  libcuda "), section
    assert "holds no libcuda.so.1" in section["error"]
    assert any(ln.startswith("FAIL  libcuda")
               for ln in section["results"]["doctor"])


def test_a_held_device_lock_fails_the_check_naming_the_holder(tmp_path):
    """The check waits a bounded time for the device lock, and the failed
    section's report line is its exception, not a stderr line."""
    from autotune.host import device_lock
    from autotune.measure import backends
    backend = backends.select_backend("interpreter")
    lock_dir = str(tmp_path / "locks")
    held = device_lock.DeviceTurn(backend, directory=lock_dir).lock
    assert held.try_acquire()
    try:
        proc, report, _ = _preflight(tmp_path, AUTOTUNE_LOCK_DIR=lock_dir,
                                     GPU_CHECK_LOCK_TIMEOUT_S="2")
    finally:
        held.release()
    assert proc.returncode == 1
    section = report["sections"]["preflight"]
    assert section["status"] == "failed"
    assert section["error"].startswith("RuntimeError: the device lock ")
    assert f"held by pid {os.getpid()}" in section["error"]
    assert "not free within 2 s" in section["error"]


def test_tests_on_a_gpu_exclude_cpu_only_assertions_and_do_not_stop_early():
    # Assertions that expect the CPU backend's device key: their file is
    # not run on the GPU, or they are deselected.
    cpu_only = [
        "tests/test_session.py::test_cache_of_another_device_is_reported_"
        "not_used", "tests/test_session.py::test_expected_gpu_mismatch"]
    for test in cpu_only:
        path, name = test.split("::")
        assert f"def {name}(" in open(os.path.join(ROOT, path)).read()
        assert path not in gpu_check.GPU_TESTS or \
            test in gpu_check.GPU_DESELECT, test
    for test in gpu_check.GPU_DESELECT:
        assert test.split("::")[0] in gpu_check.GPU_TESTS, test
    for path in gpu_check.GPU_TESTS:
        path, _, name = path.partition("::")
        assert os.path.exists(os.path.join(ROOT, path)), path
        assert not name or f"def {name}(" in open(
            os.path.join(ROOT, path)).read(), name
    assert "tests/test_dropin_api.py" in gpu_check.GPU_TESTS
    # Trimmed to fit its budget: the CPU-side compile checks and all but
    # one drop-in round trip are left to the CPU machines.
    assert "tests/test_compile_check.py" not in gpu_check.GPU_TESTS
    assert "tests/test_dropin.py" not in gpu_check.GPU_TESTS
    import inspect
    assert '"-x"' not in inspect.getsource(gpu_check.section_tests)


def test_side_by_side_gives_each_tuner_its_own_kernel_and_cache():
    """Triton's tuner never launches a binary ours compiled: each side has
    its own kernel object and, cold, its own Triton cache directory; the
    side that goes first is the one asked for."""
    case = next(c for c in gpu_check._side_by_side_cases(dry_run=True)
                if c[0] == "softmax")
    kernels = gpu_check.side_kernels(case)
    assert kernels["ours"] is not kernels["theirs"]
    assert case[1] not in kernels.values()
    before = os.environ.get("TRITON_CACHE_DIR")
    picks = gpu_check._tune_once(case, True, kernels, ("theirs", "ours"))
    assert list(picks) == ["theirs", "ours"]
    dirs = gpu_check._SIDE_CACHE_DIRS
    assert dirs["ours"] != dirs["theirs"]
    assert os.environ.get("TRITON_CACHE_DIR") == before


def test_compiled_section_dry_run(tmp_path):
    """--sections compiled on the interpreter: the suite's winners are
    compiled for sm_90 on this CPU and both load runs pass (the
    interpreter compiles nothing, so both record 0 binaries)."""
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"),
         "--dry-run", "--sections", "compiled", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    with open(tmp_path / "gpu_check.json") as f:
        section = json.load(f)["sections"]["compiled"]
    assert section["status"] == "ok", section
    results = section["results"]
    for figure in gpu_check.FIGURES["compiled"]:
        assert figure in results, figure
    assert results["target"] == "sm_90"
    assert results["compile"]["binaries"] >= 1
    assert results["compile"]["entries_without_request"] == 0
    assert results["load_with_compiled"]["binaries_compiled"] == 0
    # The run's own Triton cache folder, recorded and (not kept) removed.
    with open(tmp_path / "gpu_check.json") as f:
        folder = json.load(f)["triton_cache"]
    assert folder["dir"].startswith(tempfile.gettempdir()) and \
        not folder["kept"]
    assert not os.path.exists(folder["dir"])


_COMPILE_TWICE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, {root!r})
from autotune.binaries import compile_check as cc
from autotune.kernels import softmax
signature = {{"x": "*fp32", "y": "*fp32", "n_rows": "i32", "n_cols": "i32",
             "stride": "i32", "BLOCK_COLS": 32}}
for _ in range(2):  # compiled, then found in the on-disk cache
    result = cc.compile_one(softmax.softmax_kernel, signature, {{"ROWS": 1}},
                            1, 1, 1, cc.Target("sm_90", 90))
    assert result.ok, result.reason
"""


def test_a_section_counts_what_it_compiled_and_found_on_disk(tmp_path):
    """Real sm_90 compiles in a child process started with a section's
    environment: the compile counter (first on PYTHONPATH) logs one
    compile and one on-disk hit, and the run's cache folder holds one new
    binary; a section with its own folder leaves the run's untouched."""
    run_cache = tmp_path / "run_cache"
    run_cache.mkdir()
    env = dict(os.environ, TRITON_CACHE_DIR=str(run_cache),
               PYTHONPATH=os.pathsep.join([gpu_check.COMPILE_COUNTER_DIR,
                                           ROOT]))
    env.pop("TRITON_INTERPRET", None)
    script = _COMPILE_TWICE.format(root=ROOT)
    for name, folder in (("tests", "the run's"),
                         ("kernels", "a fresh one of its own")):
        before = gpu_check._binaries_in(str(run_cache))
        section_env, log_dir, caches = gpu_check._section_env(
            name, str(tmp_path / "work"), env)
        proc = subprocess.run([sys.executable, "-c", script], env=section_env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        counted = gpu_check.section_triton_cache(
            name, str(run_cache), before, log_dir, caches, listener=True)
        assert counted == {"compiled": 1, "found_on_disk": 1,
                           "folder": folder, "new_binaries": 1}, counted
    # The run's folder got the first section's binary only.
    assert gpu_check._binaries_in(str(run_cache)) == 1


def test_the_compile_counter_runs_the_next_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    marker = tmp_path / "ran"
    (other / "sitecustomize.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [gpu_check.COMPILE_COUNTER_DIR, str(other)]))
    proc = subprocess.run([sys.executable, "-c", "import sitecustomize; "
                           "print(sitecustomize.__file__)"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(gpu_check.COMPILE_COUNTER_DIR)
    assert marker.exists()


def test_every_timing_call_of_the_check_records_its_ask_and_its_cost():
    ledger = gpu_check.Ledger()
    time_ms = gpu_check._timer(dry_run=True, ledger=ledger)
    time_ms(lambda: time.sleep(0.01))
    summary = ledger.summary()
    assert summary["calls"] == 1
    assert summary["wall_ms"] >= 30 and summary["asked_ms"] >= 30


def test_the_compiled_section_holds_only_when_nothing_compiled():
    """With compiled kernels given, one compile in the load run (a key that
    missed them) is a failure, whatever the return codes say."""
    def load_run(found, compiled, binaries):
        return {"ok": True, "compile_calls_found_on_disk": found,
                "compile_calls_compiled": compiled,
                "binaries_compiled": binaries}
    verdict = gpu_check.compiled_counts(load_run(6, 0, 0), dry_run=False)
    assert verdict["served"] == 6 and verdict["compiled"] == 0
    assert verdict["compiled_nothing"]
    for run in (load_run(0, 6, 6), load_run(5, 1, 1), load_run(6, 0, 1)):
        verdict = gpu_check.compiled_counts(run, dry_run=False)
        assert not verdict["compiled_nothing"], run
        assert verdict["compiled"] >= 1
    # Served nothing and compiled nothing on a GPU: nothing was looked up.
    assert not gpu_check.compiled_counts(load_run(0, 0, 0),
                                         dry_run=False)["compiled_nothing"]
    assert gpu_check.compiled_counts(load_run(0, 0, 0),
                                     dry_run=True)["compiled_nothing"]
    assert "served" in verdict["counts_mean"]


def test_the_script_prints_the_versions_first_and_needs_no_wheels(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path))
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "gpu_check.sh"), "--dry-run",
         "--sections", "nope"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("gpu_check: versions: python "), proc.stdout
    for name in ("torch", "triton", "protobuf", "numpy", "absl-py",
                 "pytest", "driver"):
        assert f" {name} " in first, first
    assert "missing" not in first
    # It got as far as the check itself (which refuses the section).
    assert "unknown section(s) nope" in proc.stderr, proc.stderr
    assert proc.returncode == 1


def test_a_triton_older_than_the_floor_is_one_line(tmp_path):
    """An old Triton first on the path (its metadata is what pip reads)."""
    site = tmp_path / "site"
    info = site / "triton-3.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\n"
                                   "Version: 3.2.0\n")
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(site))
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "gpu_check.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "triton 3.2.0" in proc.stdout.splitlines()[0]
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        floor = re.search(r'"triton>=([\d.]+)"', f.read()).group(1)
    assert proc.stderr.strip() == (
        f"gpu_check: Triton 3.2.0 is older than {floor}, the oldest this "
        "project supports (pyproject.toml)")


def test_per_process_builds_are_measured_cold_and_kept():
    """Triton's own cuda_utils (and, on Triton 3.6, launcher) builds in a
    fresh process, then none in a second one given the first's cache."""
    import triton
    from triton.backends.nvidia import driver

    import per_process_builds
    cold, kept = per_process_builds.cold_and_kept(stub=True)
    assert cold["triton"] == triton.__version__
    assert cold["cuda_utils_builds"] == 1 and cold["cuda_utils_build_s"] > 0
    # Triton 3.6 builds a launcher per signature; 3.9 launches through
    # cuda_utils.
    launchers = len(per_process_builds.LAUNCH_SIGNATURES) if hasattr(
        driver, "make_launcher") else 0
    assert cold["launcher_builds"] == launchers
    assert kept["cuda_utils_builds"] + kept["launcher_builds"] == 0
    assert kept["build_s"] == 0
    line = per_process_builds.summary_line(cold, kept)
    assert line.startswith(f"per-process builds (Triton {triton.__version__}")
    assert line.endswith("with one, 0 builds, 0.00 s")
