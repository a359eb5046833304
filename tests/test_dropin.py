"""@triton.autotune kernels (tests/dropin_kernels) run two ways, each as a
tuning process that dumps a cache and a fresh process that loads it with
--require_complete_autotune_results:

- ported: the decorator renamed to autotune.autotune (plus `import
  autotune`), nothing else changed;
- zero-edit: the files untouched, with autotune/dropin on PYTHONPATH (what
  the //:triton_autotune_dropin Bazel target adds).

Both runs must match torch, and the cached run must equal the tuning run
bit for bit with no candidate benchmarked.
"""
import difflib
import os
import re
import subprocess
import sys

import pytest

from autotune import codec
from autotune.measure import backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "tests", "dropin_kernels")
DRIVER = os.path.join(ROOT, "tests", "workers", "dropin_driver.py")
MODULES = sorted(f for f in os.listdir(KERNELS)
                 if f.endswith(".py") and f != "__init__.py")


def port(text):
    """What a user does to move a file to autotune.autotune."""
    lines = text.splitlines(keepends=True)
    out = [line.replace("@triton.autotune(", "@autotune.autotune(")
           for line in lines]
    first_import = next(i for i, line in enumerate(out)
                        if line.startswith("import "))
    out.insert(first_import, "import autotune\n")
    return "".join(out)


def changed_lines(before, after):
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(),
                                lineterm="", n=0)
    removed, added = [], []
    for line in diff:
        if line.startswith("---") or line.startswith("+++"):
            continue
        if line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
    return removed, added


def run_driver(mode, module_dir, out_dir, flags, extra_path=()):
    # The interpreter unless the GPU check asked for the GPU.
    env = dict(os.environ, AUTOTUNE_FLAGS=flags,
               TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"),
               PYTHONPATH=os.pathsep.join([ROOT, *extra_path]))
    result = subprocess.run([sys.executable, DRIVER, mode, module_dir,
                             str(out_dir)], env=env, capture_output=True,
                            text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "all results correct" in output
    return output


def tune_then_load(module_dir, tmp_path, extra_path=()):
    cache = tmp_path / "cache.textproto"
    tuned = run_driver("tune", module_dir, tmp_path,
                       f"--dump_autotune_results_to={cache}", extra_path)
    assert re.search(r"0 hit, (\d+) tuned", tuned)
    loaded = run_driver(
        "cached", module_dir, tmp_path,
        f"--load_autotune_results_from={cache} "
        "--require_complete_autotune_results", extra_path)
    assert re.search(r": (\d+) hit, 0 tuned, 0 missed; 0 candidate "
                     r"benchmarks", loaded), loaded[-2000:]
    return cache


def check_entries(cache):
    by_kernel = {}
    for entry in codec.load_results(cache):
        by_kernel.setdefault(entry.key.kernel, []).append(entry)
    # Every tuned kernel of every module is in the cache.
    assert set(by_kernel) == {
        "matmul_kernel", "layernorm_bwd_dx_kernel", "axpy_inplace_kernel",
        "clamp_inplace_kernel", "row_sum_kernel", "square_kernel",
        "scale_kernel", "silu_fwd_kernel", "silu_bwd_kernel",
        "add_rows_kernel", "double_inplace_kernel"}
    # prune_configs_by: the 64-wide config is dropped by the early prune,
    # and the perf model keeps the top 2 of the other three.
    (matmul,) = by_kernel["matmul_kernel"]
    assert len(matmul.candidates) == 2
    assert all(c.config.kwargs["BM"] != 64 for c in matmul.candidates)
    # Heuristics above the autotuner: its constexpr is part of the fusion.
    scale = sorted(e.key.signature for e in by_kernel["scale_kernel"])
    assert [s.rsplit(";", 1)[1] for s in scale] == ["UNIT=False",
                                                     "UNIT=True"]


def test_ported_kernels_change_only_the_decorator_and_round_trip(tmp_path):
    ported = tmp_path / "ported"
    ported.mkdir()
    for name in MODULES:
        with open(os.path.join(KERNELS, name)) as f:
            original = f.read()
        text = port(original)
        removed, added = changed_lines(original, text)
        decorators = original.count("@triton.autotune(")
        assert len(removed) == decorators and all(
            line.lstrip().startswith("@triton.autotune(") for line in removed)
        assert added[0] == "import autotune" and len(added) == decorators + 1
        (ported / name).write_text(text)
    check_entries(tune_then_load(str(ported), tmp_path))


def test_zero_edit_path_runs_triton_autotune_kernels_unchanged(tmp_path):
    check_entries(tune_then_load(
        KERNELS, tmp_path, extra_path=[os.path.join(ROOT, "autotune",
                                                    "dropin")]))


def test_zero_edit_kernels_print_tritons_message(tmp_path):
    """TRITON_PRINT_AUTOTUNING=1: an unedited @triton.autotune kernel,
    tuned through the drop-in, prints Triton's message for it."""
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_PRINT_AUTOTUNING="1",
               AUTOTUNE_FLAGS="--autotune_verbosity=quiet",
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(ROOT, "autotune", "dropin"), ROOT]))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import inplace; "
            "inplace.run()")
    result = subprocess.run([sys.executable, "-c", code, KERNELS], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    messages = re.findall(
        r"Triton autotuning for function (\w+),\nwith key as \(.*\),\n"
        r"finished after \d+\.\d\ds,\nbest config selected: .*num_warps: "
        r"\d+, num_ctas: \d+, num_stages: \d+, maxnreg: None.*;",
        result.stdout)
    assert set(messages) == {"axpy_inplace_kernel",
                             "clamp_inplace_kernel"}, result.stdout


def test_without_the_drop_in_triton_cannot_tune_on_the_interpreter(tmp_path):
    """The zero-edit test above is not vacuous: the same files, without
    autotune/dropin on the path, fail under Triton's own autotuner here."""
    if backends.gpu_driver_visible():
        pytest.skip("a GPU driver is visible: Triton's own autotuner runs "
                    "there, without the drop-in")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    env.pop("AUTOTUNE_FLAGS", None)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import inplace; "
            "inplace.run()")
    result = subprocess.run([sys.executable, "-c", code, KERNELS], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "driver" in result.stderr


def test_dot_outputs_are_compared_at_tf32_tolerance_on_sm80_and_later():
    """On a GPU, Triton's fp32 tl.dot is tf32 by default: the dropin
    matmul errs by 6e-3 to 1e-2 against torch's IEEE result at K=40, which
    the fp32 tolerance (1e-4) would call wrong."""
    sys.path.insert(0, os.path.dirname(DRIVER))
    try:
        import dropin_driver
    finally:
        sys.path.remove(os.path.dirname(DRIVER))
    rtol, atol = dropin_driver.tolerance("matmul", "c", capability=(9, 0))
    assert 1e-2 < atol < 5e-2 and rtol == 1e-2
    assert dropin_driver.tolerance("matmul", "c", capability=(7, 5)) == \
        (1e-4, 1e-4)
    assert dropin_driver.tolerance("inplace", "x", capability=(9, 0)) == \
        (1e-4, 1e-4)


_DECORATED_FIRST = """
import inplace  # Triton's autotune decorates it before autotune is imported
import autotune
import torch
autotune.install()
x = torch.ones(40, device=autotune.device())
try:
    inplace.axpy_inplace_kernel[(3,)](x, x, 2.0, 40)
except autotune.AutotuneError as e:
    print(e)
"""


def test_kernel_decorated_before_the_interpreter_was_selected(tmp_path):
    """No GPU, TRITON_INTERPRET unset, the kernel module imported before
    autotune: Triton compiled the kernel for a GPU. The launch says so and
    what to change, instead of Triton's "0 active drivers"."""
    if backends.gpu_driver_visible():
        pytest.skip("a GPU driver is visible: the kernel is not interpreted "
                    "there, and that is right")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, KERNELS]))
    for name in ("TRITON_INTERPRET", "AUTOTUNE_FLAGS"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", _DECORATED_FIRST],
                            env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "axpy_inplace_kernel: this session runs kernels on Triton's " \
        "interpreter" in result.stdout, result.stdout + result.stderr
    assert "import autotune before the module that defines the kernel" in \
        result.stdout


@pytest.mark.parametrize("flags, code, line", [
    # A Bazel test (TEST_TARGET) whose cache does not exist yet.
    ("--load_autotune_results_from={missing}", 1,
     "autotune: autotune cache {missing} does not exist yet: create it with "
     "`bazel run @rules_autotune//tools:regenerate`, then commit it"),
    ("--help", 0, None),
])
def test_an_exit_at_import_through_the_drop_in_is_its_line_alone(
        tmp_path, flags, code, line):
    """The package exits at import with one line (or the flag list): run
    from the drop-in's sitecustomize, no "Fatal Python error:
    init_import_site" and no traceback follow."""
    missing = str(tmp_path / "testdata" / "k.textproto")
    env = dict(os.environ, TEST_TARGET="//:k_test",
               AUTOTUNE_FLAGS=flags.format(missing=missing),
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(ROOT, "autotune", "dropin"), ROOT]))
    done = subprocess.run([sys.executable, "-c", "print('the test ran')"],
                          env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == code, done.stderr
    assert "the test ran" not in done.stdout
    assert "Fatal Python error" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if line is not None:
        assert done.stderr.strip() == line.format(missing=missing)
    else:
        assert "--load_autotune_results_from" in done.stdout
