"""The GPU check's dry run: every section runs on the interpreter, and the
report names every section and figure."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_check  # noqa: E402


@pytest.mark.slow
def test_dry_run_report_has_every_section_and_figure(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path))
    env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run(["bash", os.path.join(ROOT, "bench",
                                                "gpu_check.sh"), "--dry-run"],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=2400)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    with open(tmp_path / "gpu_check.json") as f:
        report = json.load(f)
    markdown = (tmp_path / "gpu_check.md").read_text()
    for name, _ in gpu_check.SECTIONS:
        section = report["sections"][name]
        assert section["status"] == "ok", (name, section)
        for figure in gpu_check.FIGURES[name]:
            assert figure in section["results"], (name, figure)
        assert f"## {name}" in markdown
    side = report["sections"]["side_by_side"]["results"]["kernels"]
    assert set(side) == {"softmax", "matmul_bias_relu"}
    for row in side.values():
        for figure in gpu_check.FIGURES["side_by_side"][:-1]:
            assert set(row[figure]) == {"ours", "theirs"}, figure
            assert f"| {figure} |" in markdown
        assert set(row["ratio_ours_over_triton"]) == {
            "cold_tuning_s", "hit_overhead_us", "regret"}
    assert "ours / triton" in markdown
    kernels = report["sections"]["kernels"]["results"]
    assert kernels["copy_gbps"] > 0
    assert {r["kernel"] for r in kernels["rows"]} == {"softmax", "layernorm"}
    assert "TFLOP/s" in markdown and "GB/s" in markdown


def test_section_budgets_fit_in_the_whole():
    assert sum(b for _, b in gpu_check.SECTIONS) <= gpu_check.TOTAL_S
    assert [n for n, _ in gpu_check.SECTIONS] == list(gpu_check.FIGURES)


def test_tests_on_a_gpu_exclude_cpu_only_assertions_and_do_not_stop_early():
    assert any("test_expected_gpu_mismatch" in d
               for d in gpu_check.GPU_DESELECT)
    assert "tests/test_dropin_api.py" in gpu_check.GPU_TESTS
    import inspect
    assert '"-x"' not in inspect.getsource(gpu_check.section_tests)
