"""What Triton builds with the C compiler in every process that starts the
CUDA driver, and what a kept Triton cache saves of it.

    python bench/per_process_builds.py [--stub] [--cache DIR]
    python bench/per_process_builds.py [--stub] --cold_and_kept

Triton builds its `cuda_utils` module (driver.c) the first time a process
starts the CUDA driver and, on Triton 3.6, one `__triton_launcher` module
per kernel signature (Triton 3.9 launches through cuda_utils). Both go to
Triton's cache folder (TRITON_CACHE_DIR) under a key of their source, and
a process that finds them there builds nothing. Under `bazel test` that
folder is private to each test unless the runner keeps one
(docs/gpu-runners.md#a-persistent-triton-cache), so every test process
pays for these builds.

This runs Triton's own code for both (CudaUtils, and make_launcher with
compile_module_from_src for each signature of LAUNCH_SIGNATURES) in the
cache folder given, timing each call of Triton's `_build` (the C
compiler) and counting the modules found in the cache instead. Run it
twice with one folder: the first run is what every test process pays
without a kept cache, the second what it pays with one.

--stub: for a machine without the NVIDIA driver. Triton links these
modules against libcuda.so.1: a stub library (no symbols) stands in for
the link, and the built modules are not loaded (loading needs the driver),
so the figures are the compile and link of Triton's own C sources, as on
a GPU runner. Prints one JSON object.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

# Kernel signatures whose launchers Triton 3.6 builds one each: the tiny
# kernel of the doctor and the example matmul's (pointers, sizes, strides,
# constexpr block sizes).
LAUNCH_SIGNATURES = [
    ({2: 128}, {0: "*fp32", 1: "i32", 2: "constexpr"}),
    ({9: 128, 10: 128, 11: 64},
     {0: "*bf16", 1: "*bf16", 2: "*bf16", 3: "*bf16", 4: "i32", 5: "i32",
      6: "i32", 7: "i32", 8: "i32", 9: "constexpr", 10: "constexpr",
      11: "constexpr"}),
]


def _stub_libcuda(folder):
    """A libcuda.so.1 with no symbols, for the link only."""
    source = os.path.join(folder, "stub.c")
    with open(source, "w") as f:
        f.write("int rules_autotune_stub_libcuda;\n")
    cc = os.environ.get("CC") or "gcc"
    subprocess.run([cc, "-shared", "-fPIC", source, "-o",
                    os.path.join(folder, "libcuda.so.1")], check=True)
    return folder


def measure(stub=False):
    """{what: figure} of building Triton's per-process modules in the
    current TRITON_CACHE_DIR."""
    import triton  # heavy: in the measuring process only
    from triton.runtime import build

    builds = []
    real_build = build._build

    def timed_build(name, *args, **kwargs):
        start = time.perf_counter()
        try:
            return real_build(name, *args, **kwargs)
        finally:
            builds.append((name, time.perf_counter() - start))
    build._build = timed_build
    if stub:
        # Not loaded: a module linked against libcuda.so.1 loads only
        # where the driver is.
        build._load_module_from_path = \
            lambda name, path: types.SimpleNamespace(__file__=path)
        if not os.environ.get("TRITON_LIBCUDA_PATH"):
            os.environ["TRITON_LIBCUDA_PATH"] = _stub_libcuda(
                tempfile.mkdtemp(prefix="stub-libcuda."))

    from triton.backends.nvidia import driver
    start = time.perf_counter()
    try:
        driver.CudaUtils()
    except AttributeError:
        if not stub:
            raise  # the stand-in module has none of cuda_utils' names
    utils_s = time.perf_counter() - start
    launchers = 0
    launch_start = time.perf_counter()
    make_launcher = getattr(driver, "make_launcher", None)
    if make_launcher is not None:
        for constants, signature in LAUNCH_SIGNATURES:
            source = make_launcher(constants, signature, None)
            build.compile_module_from_src(
                src=source, name="__triton_launcher",
                library_dirs=driver.library_dirs(),
                include_dirs=driver.include_dirs,
                libraries=driver.libraries)
            launchers += 1
    launch_s = time.perf_counter() - launch_start
    utils_builds = [s for n, s in builds if n == "cuda_utils"]
    launcher_builds = [s for n, s in builds if n == "__triton_launcher"]
    return {
        "triton": triton.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
        "cache_dir": os.environ.get("TRITON_CACHE_DIR", ""),
        "stub_libcuda": stub,
        "cuda_utils_build_s": round(sum(utils_builds), 3),
        "cuda_utils_builds": len(utils_builds),
        "cuda_utils_wall_s": round(utils_s, 3),
        "launcher_signatures": launchers,
        "launcher_builds": len(launcher_builds),
        "launcher_build_s": round(sum(launcher_builds), 3),
        "launcher_wall_s": round(launch_s, 3),
        "build_s": round(sum(s for _, s in builds), 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stub", action="store_true",
                        help="no NVIDIA driver here: link against a stub "
                        "libcuda.so.1, do not load the modules")
    parser.add_argument("--cache", default=None,
                        help="Triton's cache folder (TRITON_CACHE_DIR)")
    parser.add_argument("--cold_and_kept", action="store_true",
                        help="measure in two fresh processes sharing one "
                        "new cache folder, and print the GPU check's line")
    args = parser.parse_args(argv)
    if args.cold_and_kept:
        cold, kept = cold_and_kept(stub=args.stub)
        print(json.dumps({"cold": cold, "kept": kept}))
        print(summary_line(cold, kept))
        return 0
    if args.cache:
        os.environ["TRITON_CACHE_DIR"] = args.cache
    print(json.dumps(measure(stub=args.stub)))
    return 0


def cold_and_kept(python=None, stub=False, timeout=120):
    """The figures of two fresh processes sharing one new cache folder:
    (cold, kept) dicts, as every test process pays without a kept Triton
    cache and with one."""
    python = python or sys.executable
    folder = tempfile.mkdtemp(prefix="per-process-builds.")
    env = dict(os.environ)
    if stub and not env.get("TRITON_LIBCUDA_PATH"):
        # One stub folder for both: Triton 3.9 keys the modules by their
        # library folders too (a runner's libcuda folder does not move).
        stub_dir = os.path.join(folder, "stub-libcuda")
        os.makedirs(stub_dir)
        env["TRITON_LIBCUDA_PATH"] = _stub_libcuda(stub_dir)
    try:
        runs = []
        for _ in range(2):
            out = subprocess.run(
                [python, os.path.abspath(__file__), "--cache",
                 os.path.join(folder, "triton-cache")]
                + (["--stub"] if stub else []), capture_output=True,
                text=True, timeout=timeout, check=False, env=env)
            if out.returncode != 0:
                tail = (out.stderr.strip().splitlines() or [""])[-1]
                raise RuntimeError(f"per_process_builds: exit status "
                                   f"{out.returncode}: {tail[:200]}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        return runs[0], runs[1]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def summary_line(cold, kept):
    """The GPU check's line for these figures."""
    return (f"per-process builds (Triton {cold['triton']}, seconds of the C "
            f"compiler in one test process): cuda_utils "
            f"{cold['cuda_utils_build_s']:.2f} s, "
            f"{cold['launcher_builds']} launcher(s) of "
            f"{cold['launcher_signatures']} kernel signature(s) "
            f"{cold['launcher_build_s']:.2f} s: {cold['build_s']:.2f} s "
            f"without a kept TRITON_CACHE_DIR; with one, "
            f"{kept['cuda_utils_builds'] + kept['launcher_builds']} builds, "
            f"{kept['build_s']:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
