"""Compile-ahead (--autotune_compile_jobs) writes the binaries the launch
then loads: the compile key the pool computes is the launch's own, on the
matmul with string constexprs, a shape not divisible by 16 and the softmax.

The comparison runs in a child process (TRITON_INTERPRET=0, so the kernels
are JITFunctions) with a fake active driver that reports sm_90 and a
stubbed compile that records the on-disk cache key of each compile it is
asked for: first the pool's compiles (in process), then real launches of
every config through Triton's launcher. Every launch must find its key
among the pool's. The test with real sm_90 compiles does the same with
Triton's compiler into one cache directory and counts what the launches
compiled again.

    python tests/test_compile_ahead.py keys      # the comparison, printed
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from gpu_standin import FakeDriver, FakeKernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("matmul_4096_bf16", "matmul_1000_fp16", "softmax_1000",
         "softmax_4096")


# -- the child process ---------------------------------------------------------

def _disk_key(src, target, options):
    """The key triton.compile files a binary under (its first steps)."""
    import hashlib

    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import get_cache_key
    backend = make_backend(target)
    parsed = backend.parse_options(dict(options or {},
                                        **src.parse_options()))
    key = get_cache_key(src, backend, parsed,
                        env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode()).hexdigest()


def install_fakes(record):
    """Fake sm_90 driver; compile records (key, kernel name, constexprs)."""
    import triton
    import triton.compiler
    from triton.runtime import driver

    driver.set_active(FakeDriver())

    def compile(src, target=None, options=None, **_):
        target = target or driver.active.get_current_target()
        record.append(_disk_key(src, target, options))
        return FakeKernel()
    triton.compiler.compile = compile
    triton.compile = compile


def case(name, small=False):
    """(autotuner, configs, grid, args, kwargs) of one launch; small: two
    configs quick to compile for real."""
    import torch
    import triton

    from autotune.kernels import matmul, softmax
    if name.startswith("matmul"):
        size = int(name.split("_")[1])
        dtype = getattr(torch, {"bf16": "bfloat16",
                                "fp16": "float16"}[name.split("_")[2]])
        a = torch.empty(size, size, dtype=dtype)
        b = torch.empty(size, size, dtype=dtype)
        bias = torch.empty(size, dtype=dtype)
        c = torch.empty(size, size, dtype=dtype)
        tuner = matmul.matmul_bias_act_kernel
        args = (a, b, bias, c, size, size, size, a.stride(0), a.stride(1),
                b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        kwargs = {"ACTIVATION": "relu", "INPUT_PRECISION": "ieee"}
        grid = (1,)
        configs = matmul.CONFIGS[3:5] if small else matmul.GPU_CONFIGS[:3]
        return tuner, configs, grid, args, kwargs
    rows = cols = int(name.split("_")[1])
    x = torch.empty(rows, cols)
    y = torch.empty_like(x)
    tuner = softmax.softmax_kernel
    return (tuner, softmax.CONFIGS[:2 if small else 3], (1,),
            (x, y, rows, cols, x.stride(0)),
            {"BLOCK_COLS": triton.next_power_of_2(cols)})


def ahead_keys(name, record):
    """Keys the compile-ahead pool compiles (in process, one job)."""
    from autotune.binaries import compile_check
    tuner, configs, _, args, kwargs = case(name)
    named = tuner._bind(args, kwargs)
    plan = compile_check.plan_compile_ahead(tuner.kernel, named, configs)
    record.clear()
    results = compile_check.compile_planned(
        ("autotune.kernels." + name.split("_")[0], tuner_attr(name)),
        plan, jobs=1)
    assert all(r["ok"] for r in results), results
    return list(record)


def tuner_attr(name):
    return "matmul_bias_act_kernel" if name.startswith("matmul") \
        else "softmax_kernel"


def launch_keys(name, record):
    """Keys Triton's launcher compiles, one launch per config."""
    tuner, configs, grid, args, kwargs = case(name)
    record.clear()
    for config in configs:
        tuner.kernel[grid](*args, **kwargs, **config.all_kwargs())
    return list(record)


def child_keys():
    os.environ["TRITON_INTERPRET"] = "0"
    sys.path.insert(0, ROOT)
    from autotune.binaries import compile_check
    record = []
    install_fakes(record)
    out = {}
    for name in CASES:
        ahead = ahead_keys(name, record)
        launched = launch_keys(name, record)
        # The launches left every candidate in the JIT: no pool again.
        tuner, configs, _, args, kwargs = case(name)
        again = compile_check.plan_compile_ahead(
            tuner.kernel, tuner._bind(args, kwargs), configs)
        out[name] = {"ahead": len(ahead), "launches": len(launched),
                     "launch_found": sum(k in ahead for k in launched),
                     "held_after_launch": len(again.held),
                     "skip_after_launch": again.skip_reason(8)}
    out["maxnreg"] = _maxnreg_keys(record)
    return out


def _maxnreg_keys(record):
    """A config with maxnreg: the pool's compile carries it (the key with
    it is the launch's, the key without it is not)."""
    from autotune.binaries import compile_check
    from autotune.records import Config
    tuner, configs, grid, args, kwargs = case("matmul_1000_fp16")
    base = configs[0]
    capped = Config(dict(base.kwargs), base.num_warps, base.num_stages,
                    maxnreg=128)
    named = tuner._bind(args, kwargs)
    plan = compile_check.plan_compile_ahead(tuner.kernel, named, [capped])
    record.clear()
    compile_check.compile_planned(
        ("autotune.kernels.matmul", "matmul_bias_act_kernel"), plan, jobs=1)
    ahead = list(record)
    record.clear()
    tuner.kernel[grid](*args, **kwargs, **capped.all_kwargs())
    return {"option": plan.to_compile[0].record.options.get("maxnreg"),
            "launch_found": sum(k in ahead for k in record),
            "launches": len(record),
            "checker_config": compile_check._config_dict(capped)["maxnreg"]}


def _binaries(cache_dir):
    """The compiled binaries in a Triton cache directory (a directory per
    key may exist before its binary: the cache lookup creates it)."""
    return {os.path.join(d, f) for d in os.listdir(cache_dir)
            for f in os.listdir(os.path.join(cache_dir, d))
            if f.endswith(".cubin")}


def child_real(cache_dir):
    """Real sm_90 compiles: the pool (two spawned jobs) fills cache_dir;
    then each config is compiled through the launch path, counting the
    compiles that were not cache hits."""
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    sys.path.insert(0, ROOT)
    from triton.runtime import driver

    from autotune.binaries import compile_check
    compile_check._quiet_fp_fusion_notice()
    driver.set_active(FakeDriver())
    out = {}
    for name in ("matmul_1000_fp16", "softmax_1000"):
        tuner, configs, grid, args, kwargs = case(name, small=True)
        named = tuner._bind(args, kwargs)
        plan = compile_check.plan_compile_ahead(tuner.kernel, named, configs)
        results = compile_check.compile_planned(
            ("autotune.kernels." + name.split("_")[0], tuner_attr(name)),
            plan, jobs=2)
        # A second miss in a fresh process would find them on disk.
        replanned = compile_check.plan_compile_ahead(tuner.kernel, named,
                                                     configs)
        before = _binaries(cache_dir)
        for config in configs:
            tuner.kernel.warmup(*args, grid=grid, **kwargs,
                                **config.all_kwargs())
        compiled_again = sorted(_binaries(cache_dir) - before)
        out[name] = {"pool_ok": sum(r["ok"] for r in results),
                     "configs": len(configs),
                     "on_disk_before_launch": len(replanned.on_disk),
                     "new_cache_entries_after_launch": len(compiled_again)}
    return out


# -- the tests -------------------------------------------------------------------

def _run_child(*argv, timeout=600):
    # A Triton cache of its own: binaries another run left in the
    # account's cache would be found on disk, neither compiled ahead nor
    # at launch.
    env = dict(os.environ, TRITON_INTERPRET="0",
               TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-cache-"),
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *argv],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def keys_report():
    return _run_child("keys")


def test_compile_ahead_key_is_the_launch_key(keys_report):
    """Every launch's compile key is one the pool compiled, for every
    case: string constexprs (matmul), sizes and strides not divisible by
    16 (1000), and the softmax."""
    out = keys_report
    print(json.dumps(out, indent=1))
    for name in CASES:
        row = out[name]
        assert row["launches"] == 3 and row["ahead"] == 3, (name, row)
        assert row["launch_found"] == row["launches"], (name, out)


def test_no_pool_when_the_jit_holds_every_candidate(keys_report):
    out = keys_report
    for name in CASES:
        assert out[name]["held_after_launch"] == 3, (name, out[name])
        assert "compiled already" in out[name]["skip_after_launch"]


def test_maxnreg_survives_into_compile_ahead_and_the_check(keys_report):
    row = keys_report["maxnreg"]
    assert row["option"] == 128 and row["checker_config"] == 128, row
    assert row["launches"] == 1 and row["launch_found"] == 1, row


def test_too_few_configs_do_not_start_a_pool():
    from autotune.binaries import compile_check
    plan = compile_check.AheadPlan(held=[], on_disk=[], to_compile=[1, 2, 3],
                                   failed=[])
    assert "fewer than" in plan.skip_reason(8)
    assert plan.skip_reason(1) == "one compile job"
    plan.to_compile.append(4)
    assert plan.skip_reason(8) is None


@pytest.mark.slow
def test_launch_finds_every_binary_the_pool_wrote(tmp_path):
    """Real sm_90 compiles into one cache directory: after the pool, the
    launch path of each config adds nothing to the cache (a hit each)."""
    out = _run_child("real", str(tmp_path / "triton_cache"))
    for name, row in out.items():
        assert row["pool_ok"] == row["configs"], (name, row)
        assert row["on_disk_before_launch"] == row["configs"], (name, row)
        assert row["new_cache_entries_after_launch"] == 0, (name, row)


# -- a fresh dump's requests, built and served ---------------------------------

def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, os.path.join(ROOT, "tests")]))
    for name in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR", "TRITON_HOME",
                 "TRITON_CACHE_MANAGER", "TEST_TMPDIR", "TRITON_INTERPRET"):
        env.pop(name, None)
    env.update(extra)
    return env


def child_served(dump):
    """With an sm_90 driver stand-in: the launches of a load run given the
    compiled directory (AUTOTUNE_FLAGS), and how many were served."""
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
    import autotune
    from autotune.binaries import triton_cache
    from autotune.measure import backends
    from gpu_standin import count_launch_compiles, stand_in_gpu_backend
    launches = count_launch_compiles()
    autotune.configure(backend=stand_in_gpu_backend(),
                       load_autotune_results_from=[dump],
                       require_complete_autotune_results=True)
    backends.interpreter_selected = lambda: True
    import compile_check_kernels as ck
    ck.scale_launches()
    return {"launch_compiles": len(launches),
            "served": triton_cache.ServedCounts.served,
            "missed": triton_cache.ServedCounts.missed}


def dump_build_and_serve(tmp):
    """A dump of compile_check_kernels.scale_kernel on the interpreter,
    `autotune_cache compile` of it for sm_90, and a load run with an sm_90
    driver stand-in given the directory: (compile's output, served)."""
    dump = os.path.join(tmp, "scale.textproto")
    run = subprocess.run(
        [sys.executable, "-c", "import autotune, compile_check_kernels as "
         "ck; ck.scale_launches()"], cwd=ROOT, capture_output=True,
        text=True, env=_env(AUTOTUNE_FLAGS="--dump_autotune_results_to="
                            + dump))
    assert run.returncode == 0, run.stderr[-3000:]
    out = os.path.join(tmp, "kernels")
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", dump, "--target", "sm_90", "-o", out, "--jobs", "1",
         "--kernel_module", "compile_check_kernels",
         "--triton_env", "TRITON_DEFAULT_FP_FUSION=1"], cwd=ROOT,
        capture_output=True, text=True, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    served = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "served", dump],
        cwd=ROOT, capture_output=True, text=True,
        env=_env(TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1",
                 TEST_TMPDIR=tmp,
                 AUTOTUNE_FLAGS=f"--autotune_compiled_kernels={out}"))
    assert served.returncode == 0, served.stderr[-3000:]
    return run.stdout, json.loads(served.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_launch_of_a_fresh_dump_is_served(tmp_path):
    """Integer and string constexprs, under whichever Triton runs the
    tests (its own attribute entries are recorded and built): every
    launch's compile is served from the built directory."""
    stdout, out = dump_build_and_serve(str(tmp_path))
    print(stdout, json.dumps(out))
    from autotune import codec
    requests = {r for e in codec.load_results(
        str(tmp_path / "scale.textproto")) for r in e.compile_requests}
    assert len(requests) >= 2, requests
    assert f"{len(requests)} of {len(requests)} binaries built for sm_90" \
        in stdout, stdout
    # A launch compiles each distinct binary once: every one served.
    assert out == {"launch_compiles": len(requests),
                   "served": len(requests), "missed": 0}, out


if __name__ == "__main__":
    if sys.argv[1] == "served":
        print(json.dumps(child_served(sys.argv[2])))
    elif sys.argv[1] == "keys":
        print(json.dumps(child_keys()))
    elif sys.argv[1] == "real":
        print(json.dumps(child_real(sys.argv[2])))
