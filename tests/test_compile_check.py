"""Compiling configs for a target GPU on the CPU (autotune/binaries/compile_check.py):
the command line, the tuning option, the target's limits."""
import os
import subprocess
import sys

import pytest
import torch
import triton

import autotune
import compile_check_kernels as ck
from autotune.binaries import compile_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_command_rejects_a_dot_tile_below_the_hardware_minimum():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests"))
    result = subprocess.run(
        [sys.executable, "tools/compile_check.py", "--targets", "sm_90",
         "--module", "compile_check_kernels", "--jobs", "1"],
        cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    failures = [line for line in result.stderr.splitlines()
                if line.startswith("compile_check:")]
    assert len(failures) == 1, result.stderr
    assert "BLOCK_K=8" in failures[0] and "COMPILE_ERROR" in failures[0]
    assert "K >= 16" in failures[0]
    table = result.stdout
    assert "BLOCK=16 BLOCK_K=16 warps=4 stages=2" in table
    assert "sm_90: 2 configs, 1 compiled within limits, 1 rejected" in table


def _run_tuned(n=32):
    dev = autotune.device()
    a = torch.randn(n, n, device=dev).half()
    b = torch.randn(n, n, device=dev).half()
    c = torch.empty(n, n, device=dev).half()
    ck.square_matmul_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),
                                          triton.cdiv(n, meta["BLOCK"]))](
        a, b, c, n)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2,
                               atol=2e-2)


def test_tuning_drops_configs_the_target_cannot_compile(session_factory):
    # The interpreter runs the K=8 tile (a GPU fails to compile it)...
    sess = session_factory()
    _run_tuned()
    entry = next(iter(sess.cache.memory.values()))
    on_interpreter = sess.backend.name == "interpreter"
    assert {c.config: c.failure for c in entry.candidates} == {
        ck.FITS: "NONE",
        ck.K_TOO_SMALL: "NONE" if on_interpreter else "COMPILE_ERROR"}
    # ...the compile check for sm_90 drops it before it is measured.
    sess = session_factory(autotune_compile_check="sm_90")
    _run_tuned()
    entry = next(iter(sess.cache.memory.values()))
    kinds = {c.config: c for c in entry.candidates}
    assert kinds[ck.K_TOO_SMALL].failure == "COMPILE_ERROR"
    assert "sm_90" in kinds[ck.K_TOO_SMALL].failure_detail
    assert kinds[ck.FITS].failure == "NONE" and entry.best == ck.FITS
    assert sess.stats.candidate_benchmarks == 1
    assert sess.stats.compile_rejected == 1
    assert sess.report()["compile_rejected"] == 1


def _compile_fits_and_variant(target, **variant):
    """Compiles ck.FITS for `target` as it is and with `variant` applied to
    its config, side by side; returns the two results. Compiled in spawned
    processes: this one runs the interpreter."""
    config = {"kwargs": ck.FITS.kwargs, "num_warps": 4, "num_stages": 2}
    signature = ck.COMPILE_SIGNATURES["square_matmul_kernel"][0]
    task = ("compile_check_kernels", None, "square_matmul_kernel", signature,
            config, target)
    varied = task[:4] + (dict(config, **variant),) + task[5:]
    return compile_check.run_tasks([task, varied], jobs=2)


def test_limits_of_the_target_are_checked():
    ok, many_warps = _compile_fits_and_variant(("sm_80", 80), num_warps=64)
    assert ok["ok"] and ok["shared"] > 0 and ok["registers"] > 0, ok
    assert not many_warps["ok"] and "2048 threads > 1024" in \
        many_warps["reason"]
    # The same compiled config against a smaller shared-memory limit.
    result = compile_check.Result(**ok)
    compile_check.apply_limits(result, compile_check.Target("sm_80", 80), 4,
                               shared_limit=ok["shared"] - 1)
    assert not result.ok and result.failure == "OUT_OF_RESOURCES"
    assert f"shared memory {ok['shared']} B > {ok['shared'] - 1} B" in \
        result.reason


def test_maxnreg_reaches_the_compile():
    """A config's maxnreg caps the registers of the compiled binary (40
    without it for this tile on sm_90)."""
    free, capped = _compile_fits_and_variant(("sm_90", 90), maxnreg=32)
    assert free["ok"] and capped["ok"], (free, capped)
    assert free["registers"] > 32 >= capped["registers"] > 0, (free, capped)
    assert capped["config"].endswith("maxnreg=32")
    assert compile_check._config_dict(
        autotune.Config({"BLOCK": 16}, maxnreg=64))["maxnreg"] == 64


@pytest.mark.parametrize("text", ["sm90x", "gfx90a", "sm_11", ""])
def test_bad_targets_are_one_line_errors(text):
    with pytest.raises(compile_check.CompileCheckError) as raised:
        compile_check.parse_targets(text)
    assert "\n" not in str(raised.value)


def test_targets_parse():
    assert [t.name for t in compile_check.parse_targets("sm_90, sm80")] == \
        ["sm_90", "sm_80"]


# -- compile requests from a cache: nothing imported that the command line
# did not name, one line for each malformed one ------------------------------

TESTS = os.path.join(ROOT, "tests")


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]))
    for name in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR", "TRITON_HOME",
                 "TRITON_CACHE_MANAGER", "TEST_TMPDIR", "TRITON_INTERPRET"):
        env.pop(name, None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def scale_dump(tmp_path_factory):
    """compile_check_kernels.scale_kernel tuned and dumped on the
    interpreter: its entries with this Triton's compile requests."""
    dump = tmp_path_factory.mktemp("dump") / "scale.textproto"
    run = subprocess.run(
        [sys.executable, "-c", "import autotune, compile_check_kernels as "
         "ck; ck.scale_launches()"], cwd=ROOT, capture_output=True,
        text=True, env=_env(AUTOTUNE_FLAGS=f"--dump_autotune_results_to="
                            f"{dump}"))
    assert run.returncode == 0, run.stderr[-3000:]
    return dump.read_text()


SIDE_EFFECT = """import os
open(os.path.join(os.path.dirname(__file__), "IMPORTED"), "w").close()
print("side effect ran")

def scale_kernel():
    pass

def f():
    pass
"""


def _compile(tmp_path, text, *extra):
    """`autotune_cache compile` of `text` as a cache, the kernel module
    named, a module with an import-time side effect beside it."""
    (tmp_path / "side_effect.py").write_text(SIDE_EFFECT)
    cache = tmp_path / "cache.textproto"
    cache.write_text(text)
    out = tmp_path / "kernels"
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", str(cache), "--target", "sm_90", "-o", str(out),
         "--jobs", "1", "--import_path", str(tmp_path),
         "--kernel_module", "compile_check_kernels", *extra],
        cwd=ROOT, capture_output=True, text=True, env=_env())


def _first_request(text, old, new):
    """`text` with `old` replaced by `new` in its first compile request."""
    start = text.index("  compile_requests {")
    end = text.index("\n", start)
    line = text[start:end]
    assert old in line, line
    return text[:start] + line.replace(old, new, 1) + text[end:]


KERNEL = "compile_check_kernels:scale_kernel"


@pytest.mark.parametrize("old,new,said", [
    (KERNEL, "side_effect:scale_kernel",
     "names side_effect:scale_kernel, whose module is not among the kernel "
     "modules (compile_check_kernels): not imported"),
    (KERNEL, "this:scale_kernel",
     "names this:scale_kernel, whose module is not among the kernel "
     "modules (compile_check_kernels): not imported"),
    ('MODE=\\"relu\\"', 'MODE={\\"jit\\":\\"side_effect:f\\"}',
     "names side_effect:f, whose module is not among the kernel modules"),
    (KERNEL, "..tiny_kernels:scale_kernel",
     "compile request kernel '..tiny_kernels:scale_kernel': expected "
     "module:qualname (dotted Python names)"),
    (":*fp32:", ":*fp999:", "'*fp999' is not a Triton type"),
])
def test_a_request_is_refused_in_one_line_with_nothing_imported(
        scale_dump, tmp_path, old, new, said):
    run = _compile(tmp_path, _first_request(scale_dump, old, new))
    output = run.stdout + run.stderr
    assert "Traceback" not in output, output
    assert not (tmp_path / "IMPORTED").exists(), output
    assert "side effect ran" not in output and "Beautiful is" not in output
    refused = [line for line in run.stdout.splitlines()
               if line.startswith("compile: refused a request of "
                                  "scale_kernel")]
    assert len(refused) == 1 and said in refused[0], run.stdout
    assert "1 request(s) refused" in run.stdout, run.stdout
    # The other requests are built.
    assert run.returncode == 0, output


def test_verify_with_kernel_modules_flags_a_request_naming_another_module(
        scale_dump, tmp_path):
    cache = tmp_path / "cache.textproto"
    cache.write_text(_first_request(scale_dump, KERNEL,
                                    "side_effect:scale_kernel"))
    (tmp_path / "side_effect.py").write_text(SIDE_EFFECT)
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "verify", str(cache), "--kernel_module", "compile_check_kernels"],
        cwd=str(tmp_path), capture_output=True, text=True, env=_env())
    assert run.returncode == 1, run.stdout + run.stderr
    assert "names side_effect:scale_kernel, whose module is not among the " \
        "kernel modules (compile_check_kernels)" in run.stdout, run.stdout
    assert not (tmp_path / "IMPORTED").exists()


def test_a_request_of_another_triton_version_is_refused_naming_both(
        scale_dump, tmp_path):
    # Tuned and recorded under a Triton that is not this one.
    other = scale_dump.replace(f'"{triton.__version__}"', '"3.5.0"')
    run = _compile(tmp_path, other)
    assert run.returncode == 0, run.stdout + run.stderr
    refused = [line for line in run.stdout.splitlines()
               if line.startswith("compile: refused")]
    assert refused and all(
        f"recorded by Triton 3.5.0, this is Triton {triton.__version__}"
        in line for line in refused), run.stdout
    assert "0 of 0 binaries built" in run.stdout
    assert f"{len(refused)} request(s) refused" in run.stdout


def test_progress_lines_name_the_fusion_and_the_config(scale_dump, tmp_path):
    run = _compile(tmp_path, scale_dump)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines()
             if line.startswith("compile: [")]
    assert len(lines) >= 2 and len(set(
        line.rpartition(":")[0] for line in lines)) == len(lines), lines
    for line in lines:
        assert "scale_kernel [n=" in line and "BLOCK=" in line and \
            "SCALE=3 MODE=relu" in line and "num_warps=" in line, line


def test_a_kernel_held_under_another_name_compiles():
    """The compile check builds the kernel it was given, not whatever the
    Python function's own name resolves to (`add_one_kernel =
    triton.jit(add_one)`: `add_one` is a plain function)."""
    from autotune.cli import doctor_kernel
    [done] = compile_check.run_tasks([(
        doctor_kernel.__name__, None, "add_one_kernel",
        doctor_kernel.SIGNATURE,
        {"kwargs": {"BLOCK": doctor_kernel.BLOCK}, "num_warps": 1,
         "num_stages": 1}, ("sm_90", 90))], jobs=1, apart=True)
    assert done["ok"], done

