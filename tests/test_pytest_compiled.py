"""The pytest side of compiled kernels, from a user's project: an update
records a compile request per winner launch, `autotune_cache compile`
builds them, and `--autotune-compiled=DIR` (ini `autotune_compiled`) makes
the session's Triton cache read DIR first; a DIR that is not there stops
the run naming it."""
import json
import os
import subprocess
import sys
import textwrap

from test_pytest_plugin import CACHE, PLUGIN, ROOT, run_pytest, write_project

pytest_plugins = ["pytester"]

ENV_TEST = '''
import os

def test_compiled_kernels_are_served():
    from autotune.binaries import triton_cache
    assert os.environ["TRITON_CACHE_MANAGER"] == triton_cache.MANAGER
    dirs = triton_cache.compiled_dirs()
    assert dirs == [os.path.abspath(os.environ["EXPECTED_COMPILED"])]
'''


def test_update_records_requests_and_the_compiled_option_serves_them(
        pytester, monkeypatch):
    from autotune import codec
    write_project(pytester.path)
    assert run_pytest(pytester, *PLUGIN, "--autotune-update").returncode == 0
    entries = codec.load_results(str(pytester.path / CACHE))
    assert len(entries) == 3
    assert all(e.compile_requests for e in entries), entries
    out = pytester.path / "compiled"
    built = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", str(pytester.path / CACHE), "--target", "sm_90", "-o",
         str(out), "--import_path", str(pytester.path),
         "--kernel_module", "kernels"],
        capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "0 of 3 entries without a compile request" in built.stdout
    assert "refused" not in built.stdout, built.stdout
    (pytester.path / "test_env.py").write_text(textwrap.dedent(ENV_TEST))
    monkeypatch.setenv("EXPECTED_COMPILED", str(out))
    run = run_pytest(pytester, *PLUGIN, "--autotune-compiled=compiled",
                     "--autotune-report=report.json", "test_env.py")
    assert run.returncode == 0, run.output
    # Counted in the terminal summary and the JSON report (on the
    # interpreter nothing compiles, so nothing is served either).
    assert "autotune: compiled kernels: 0 served, 0 compiled" in run.output
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["compiled_kernels"] == {
        "directories": [str(out)], "served": 0, "compiled": 0,
        "compiled_kernels": []}
    # Under pytest-xdist the controller adds up its workers' counts.
    run = run_pytest(pytester, *PLUGIN, "--autotune-compiled=compiled",
                     "--autotune-report=report.json", "-n", "2",
                     "test_env.py")
    assert run.returncode == 0, run.output
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["compiled_kernels"] == {
        "directories": [str(out)], "served": 0, "compiled": 0,
        "compiled_kernels": []}
    # The ini key, relative to the ini file.
    with open(pytester.path / "pyproject.toml", "a") as f:
        f.write('autotune_compiled = "compiled"\n')
    run = run_pytest(pytester, *PLUGIN, "test_env.py")
    assert run.returncode == 0, run.output


def test_a_missing_compiled_directory_stops_the_run(pytester):
    write_project(pytester.path)
    assert run_pytest(pytester, *PLUGIN, "--autotune-update").returncode == 0
    run = run_pytest(pytester, *PLUGIN, "--autotune-compiled=nowhere")
    assert run.returncode != 0
    assert "--autotune-compiled: nowhere is not a directory" in run.output
