"""The main job's last lines (tools/run_example_suite.py): dump and load
mode compared on the same tests, each saying how many targets it ran, the
rest of `bazel test //...` on a line of its own; and a report page path it
prints is still there after the temporary workspace is gone."""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402

DUMPS = ["//examples:fused_kernels_test_autotune_dump",
         "//examples:load_autotune_results_using_execpath_test_autotune_dump"]
LOADS = ["//examples:fused_kernels_test",
         "//examples:load_autotune_results_using_execpath_test"]


def _totals(**values):
    base = dict(hits=0, tuned=0, misses=0, candidate_benchmarks=0,
                tuning_seconds=0.0, saved_seconds=0.0)
    base.update(values)
    return base


def test_both_modes_name_the_same_tests_and_the_rest_is_apart():
    load_run = suite.TestRun(12.5, 0, {t: True for t in LOADS},
                             set(LOADS), "")
    rest = [f"//rules/tests:t{i}" for i in range(16)]
    rest_run = suite.TestRun(60.0, 0, {t: True for t in rest},
                             set(rest) | {"//examples:compiled"}, "")
    lines = suite.headline(
        {"targets": DUMPS, "wall": 42.0, "test_wall": 30.5,
         "totals": _totals(tuned=7, candidate_benchmarks=36,
                           tuning_seconds=7.36)},
        {"run": load_run, "totals": _totals(hits=7, saved_seconds=6.42)},
        {"run": rest_run})
    dump_line, load_line, rest_line = lines
    assert dump_line.startswith("dump mode  (regenerate --retune, 2 dump "
                                "target(s), unsharded: fused_kernels_test_"
                                "autotune_dump, load_autotune_results_using"
                                "_execpath_test_autotune_dump):"), dump_line
    assert "42.0 s wall, of which bazel test 30.5 s; 36 candidate " \
        "benchmarks, 7 fusions tuned in 7.36 s" in dump_line
    # The load figure is the same tests' load targets, timed on their own.
    assert load_line.startswith(
        "load mode  (bazel test, the same tests' 2 load target(s): "
        "fused_kernels_test, load_autotune_results_using_execpath_test):"
        "   12.5 s wall; 0 candidate benchmarks, 7 hits, 6.42 s of tuning "
        "saved"), load_line
    assert rest_line.startswith("rest of //... (bazel test, not in the "
                                "comparison):   60.0 s wall; 16 other test "
                                "target(s)"), rest_line
    assert rest_line.endswith("1 other target(s) built")


def test_bazel_test_seconds_is_the_last_elapsed_time():
    output = ("INFO: Elapsed time: 1.2s\nLoading...\n"
              "INFO: Elapsed time: 31.406s, Critical Path: 30.1s\n")
    assert suite.bazel_test_seconds(output) == 31.406
    assert suite.bazel_test_seconds("no bazel here") is None


def test_the_report_page_is_kept_after_the_workspace_goes(tmp_path):
    workspace = tmp_path / "rules_autotune_example_x"
    page = workspace / "bazel-testlogs" / "autotune_regenerate_report.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html>page</html>")
    kept = tmp_path / "kept.html"
    output = ("regenerate: testdata/a.textproto: 6 entries\n"
              f"regenerate: report page {page}\n")
    printed = suite.keep_report_page(output, str(workspace), str(kept))
    shutil.rmtree(workspace)
    named = printed.splitlines()[-1]
    assert named.startswith(f"regenerate: report page {kept} "), named
    path = named[len("regenerate: report page "):].split(" (")[0]
    assert os.path.exists(path)
    with open(path) as f:
        assert f.read() == "<html>page</html>"
    assert printed.splitlines()[0] == "regenerate: testdata/a.textproto: " \
        "6 entries"


def test_a_page_outside_the_temporary_workspace_is_left_as_named(tmp_path):
    output = "regenerate: report page /elsewhere/page.html\n"
    assert suite.keep_report_page(output, str(tmp_path)) == output
