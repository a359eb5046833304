"""The GPU check: everything a machine with one NVIDIA GPU can tell us that
the CPU machines cannot, in one command (bench/gpu_check.sh runs this).

    python bench/gpu_check.py [--dry-run] [--out DIR]

1. the device key and the versions (python, torch, triton, protobuf, CUDA);
2. the GPU-relevant tests, on the GPU backend;
3. the example suite in plain Python, cold (tunes and dumps) then warm
   (loads; asserts 0 candidate benchmarks and every fusion a hit), with
   both wall times;
4. the tuned matmul+bias+activation against torch (cuBLAS + torch ops) in
   TFLOP/s, the tuned softmax and layernorm in GB/s, at a few shapes;
5. a JSON and a markdown report in --out (default $OUT, else a temporary
   directory).

--dry-run: on a machine without a GPU, the same steps on Triton's
interpreter with tiny shapes and one example, so that CI checks the script
itself; the figures mean nothing there.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GPU_TESTS = ["tests/test_gpu_path.py", "tests/test_runtime.py",
             "tests/test_compile_check.py"]
# Interpreter-only assertions (the device key of the CPU backend).
GPU_DESELECT = ["tests/test_runtime.py::"
                "test_cache_of_another_device_is_reported_not_used"]


def log(text):
    print(f"gpu_check: {text}", flush=True)


def run(cmd, env, timeout):
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc, time.perf_counter() - start


def versions():
    import google.protobuf
    import torch
    import triton

    from autotune.measure import backends
    backend = backends.select_backend("auto")
    return {"device_key": backend.device_key(), "backend": backend.name,
            "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__,
            "protobuf": google.protobuf.__version__,
            "cuda": torch.version.cuda or "",
            "gpu": torch.cuda.get_device_name() if backend.name == "gpu"
            else ""}


def step_tests(env, dry_run):
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    if dry_run:
        # The interpreter runs these in CI already; one file checks the step.
        cmd += ["tests/test_gpu_path.py", "-k", "classified or tolerance"]
    else:
        cmd += GPU_TESTS + [f"--deselect={d}" for d in GPU_DESELECT]
    proc, seconds = run(cmd, env, timeout=300)
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    log(f"tests: {tail} ({seconds:.1f} s)")
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)
    return {"command": " ".join(cmd[1:]), "ok": proc.returncode == 0,
            "summary": tail, "seconds": round(seconds, 1)}


def step_suite(env, work, dry_run):
    """Cold (tune + dump) then warm (load, require complete) runs of the
    example suite in plain Python."""
    examples = ["examples/xla_style_test.py"] if dry_run else \
        ["examples/fused_kernels_test.py", "examples/xla_style_test.py"]
    out = {"examples": examples, "cold": {}, "warm": {}}
    for example in examples:
        name = os.path.splitext(os.path.basename(example))[0]
        # As under bazel test: a dump goes to the test's outputs directory.
        outputs = os.path.join(work, name)
        os.makedirs(outputs, exist_ok=True)
        cache = os.path.join(outputs, "autotune_cache.textproto")
        for phase, flags in (
                ("cold", f"--dump_autotune_results_to={cache}"),
                ("warm", f"--load_autotune_results_from={cache} "
                         "--require_complete_autotune_results")):
            report_path = os.path.join(work, f"{name}.{phase}.json")
            run_env = dict(env, TEST_UNDECLARED_OUTPUTS_DIR=outputs,
                           AUTOTUNE_FLAGS=(f"{flags} --autotune_report_to="
                                           f"{report_path}"))
            proc, seconds = run([sys.executable, example], run_env,
                                timeout=240)
            report = {}
            if os.path.exists(report_path):
                with open(report_path) as f:
                    report = json.load(f)
            fusions = report.get("fusions", [])
            result = {"ok": proc.returncode == 0,
                      "wall_seconds": round(seconds, 2),
                      "fusions": len(fusions),
                      "candidate_benchmarks":
                          report.get("candidate_benchmarks"),
                      "hits": report.get("hits")}
            if phase == "warm":
                all_hits = bool(fusions) and all(
                    f["status"] == "hit" for f in fusions)
                result["ok"] = result["ok"] and all_hits and \
                    report.get("candidate_benchmarks") == 0
            if not result["ok"]:
                print(proc.stdout[-3000:], proc.stderr[-3000:],
                      file=sys.stderr)
            out[phase][name] = result
            log(f"{name} {phase}: {'ok' if result['ok'] else 'FAILED'}, "
                f"{seconds:.1f} s, {result['fusions']} fusions, "
                f"{result['candidate_benchmarks']} candidate benchmarks")
    return out


def _figure(value):
    return float(f"{value:.4g}")


def _timer(backend):
    """Median milliseconds of fn: triton.testing.do_bench on the GPU, the
    backend's wall-clock timing on the interpreter."""
    if backend.name == "gpu":
        from triton.testing import do_bench

        def time_ms(fn):
            return do_bench(fn, warmup=25, rep=100, return_mode="median")
    else:
        def time_ms(fn):
            return backend.time(fn).median_us / 1e3
    return time_ms


def step_kernels(dry_run):
    import torch

    import autotune
    from autotune.kernels import layernorm, matmul, softmax
    autotune.configure()
    backend = autotune.session().backend
    dev = autotune.device()
    time_ms = _timer(backend)
    torch.manual_seed(0)
    rows = []
    mm_shapes = [(64, 64, 64)] if dry_run else \
        [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
         (8192, 1024, 4096)]
    dtypes = [torch.float32] if dry_run else [torch.float16, torch.float32]
    for dtype in dtypes:
        for m, n, k in mm_shapes:
            a = torch.randn(m, k, device=dev, dtype=dtype)
            b = torch.randn(k, n, device=dev, dtype=dtype)
            bias = torch.randn(n, device=dev, dtype=dtype)
            start = time.perf_counter()
            got = matmul.matmul_bias_act(a, b, bias, "relu")  # tunes
            tune_s = time.perf_counter() - start
            rtol, atol = matmul.tolerance(a, b)
            torch.testing.assert_close(got.float(), matmul.reference(
                a, b, bias, "relu").float(), rtol=rtol, atol=atol)
            ours = time_ms(lambda: matmul.matmul_bias_act(a, b, bias, "relu"))
            theirs = time_ms(lambda: torch.relu(a @ b + bias))
            flops = 2.0 * m * n * k
            rows.append({"kernel": "matmul_bias_relu", "dtype": str(dtype),
                         "shape": f"{m}x{n}x{k}",
                         "tuned_ms": round(ours, 4),
                         "torch_ms": round(theirs, 4),
                         "tuned_tflops": _figure(flops / ours / 1e9),
                         "torch_tflops": _figure(flops / theirs / 1e9),
                         "tuning_s": round(tune_s, 2)})
    row_shapes = [(8, 64)] if dry_run else [(4096, 1024), (16384, 2048),
                                            (4096, 8192)]
    for dtype in dtypes:
        for r, c in row_shapes:
            x = torch.randn(r, c, device=dev, dtype=dtype)
            w = torch.randn(c, device=dev, dtype=dtype)
            bb = torch.randn(c, device=dev, dtype=dtype)
            moved = 2.0 * x.numel() * x.element_size()  # read x, write y
            for name, ours_fn, theirs_fn in (
                    ("softmax", lambda: softmax.softmax(x),
                     lambda: torch.softmax(x, dim=-1)),
                    ("layernorm", lambda: layernorm.layernorm(x, w, bb),
                     lambda: torch.nn.functional.layer_norm(
                         x, (c,), w, bb, 1e-5))):
                ours_fn()  # tunes
                ours = time_ms(ours_fn)
                theirs = time_ms(theirs_fn)
                rows.append({"kernel": name, "dtype": str(dtype),
                             "shape": f"{r}x{c}", "tuned_ms": round(ours, 4),
                             "torch_ms": round(theirs, 4),
                             "tuned_gbps": _figure(moved / ours / 1e6),
                             "torch_gbps": _figure(moved / theirs / 1e6)})
    for row in rows:
        unit = "TFLOP/s" if "tuned_tflops" in row else "GB/s"
        ours = row.get("tuned_tflops", row.get("tuned_gbps"))
        theirs = row.get("torch_tflops", row.get("torch_gbps"))
        log(f"{row['kernel']:<17} {row['dtype']:<14} {row['shape']:<16} "
            f"tuned {ours:>9} {unit}  torch {theirs:>9} {unit}")
    autotune.session().finish()
    return rows


def markdown(report):
    v = report["versions"]
    lines = [f"# GPU check: {v['device_key']}", "",
             f"python {v['python']}, torch {v['torch']}, triton "
             f"{v['triton']}, protobuf {v['protobuf']}, CUDA {v['cuda']}"
             + (" (dry run on the interpreter: figures mean nothing)"
                if report["dry_run"] else ""), "",
             f"Tests: {report['tests']['summary']} "
             f"({report['tests']['seconds']} s)", "",
             "| example | cold s | warm s | fusions | warm benchmarks | ok |",
             "|---|---|---|---|---|---|"]
    for name, cold in report["suite"]["cold"].items():
        warm = report["suite"]["warm"].get(name, {})
        lines.append(f"| {name} | {cold['wall_seconds']} | "
                     f"{warm.get('wall_seconds')} | {cold['fusions']} | "
                     f"{warm.get('candidate_benchmarks')} | "
                     f"{cold['ok'] and warm.get('ok')} |")
    lines += ["", "| kernel | dtype | shape | tuned | torch | unit |",
              "|---|---|---|---|---|---|"]
    for row in report["kernels"]:
        unit = "TFLOP/s" if "tuned_tflops" in row else "GB/s"
        lines.append(
            f"| {row['kernel']} | {row['dtype']} | {row['shape']} | "
            f"{row.get('tuned_tflops', row.get('tuned_gbps'))} | "
            f"{row.get('torch_tflops', row.get('torch_gbps'))} | {unit} |")
    lines += ["", f"Total: {report['seconds']} s; ok: {report['ok']}", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    env = dict(os.environ)
    env.pop("AUTOTUNE_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if args.dry_run:
        env["TRITON_INTERPRET"] = os.environ["TRITON_INTERPRET"] = "1"
    else:
        # The tests' conftest picks the interpreter unless told otherwise.
        env["TRITON_INTERPRET"] = os.environ["TRITON_INTERPRET"] = "0"
        import torch
        if not torch.cuda.is_available():
            log("no CUDA device is visible; run with --dry-run on a CPU")
            return 2
    out_dir = args.out or tempfile.mkdtemp(prefix="gpu_check.")
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="gpu_check_work.")
    report = {"dry_run": args.dry_run, "versions": versions()}
    log(" ".join(f"{k}={v}" for k, v in report["versions"].items()))
    report["tests"] = step_tests(env, args.dry_run)
    report["suite"] = step_suite(env, work, args.dry_run)
    report["kernels"] = step_kernels(args.dry_run)
    report["seconds"] = round(time.perf_counter() - start, 1)
    suite_ok = all(r["ok"] for phase in ("cold", "warm")
                   for r in report["suite"][phase].values())
    report["ok"] = report["tests"]["ok"] and suite_ok
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    with open(os.path.join(out_dir, "gpu_check.md"), "w") as f:
        f.write(markdown(report))
    log(f"report: {out_dir}/gpu_check.json and gpu_check.md; "
        f"{report['seconds']} s; {'ok' if report['ok'] else 'FAILED'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
