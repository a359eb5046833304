"""The example suite tuned twice in fresh processes, the second with the
first's dump as incumbents: the dumped text must not change by a byte,
although interpreter timings vary widely between runs."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "examples", "fused_kernels_test.py")


def tune_suite(dump, incumbents):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT,
               AUTOTUNE_FLAGS=f"--dump_autotune_results_to={dump} "
                              f"--autotune_incumbents_from={incumbents} "
                              "--autotune_retune")
    proc = subprocess.run([sys.executable, SUITE], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_second_tune_with_incumbents_is_byte_identical(tmp_path):
    first, second = tmp_path / "first.textproto", tmp_path / "second.textproto"
    log = tune_suite(first, tmp_path / "none_yet.textproto")
    assert "does not exist yet (a first run)" in log
    log = tune_suite(second, first)
    assert "incumbents: 6 kept, 0 replaced" in log
    assert second.read_bytes() == first.read_bytes()
