"""`autotune_cache compile`: every recorded compile request of a cache,
built for GPU targets on a machine without a GPU, into a directory in
Triton's cache layout (exactly the files the JIT writes), with a manifest.

    autotune_cache compile CACHE... --target sm_90[,sm_80] -o DIR \\
        [--kernel_module M ...] [--import_path P ...] [--jobs N] \\
        [--triton_env NAME=VALUE ...]

Entries tuned on a GPU are built for their own architecture (when it is
among the targets); entries tuned on the interpreter for every target.
Entries without a request are counted and named, and so are requests
refused: recorded by another Triton version, or naming code outside the
--kernel_module modules (nothing a cache names is imported). A config over the
target's limits is reported as the compile check reports it. The build
sees only the Triton cache-invalidating variables given with
--triton_env (Triton's keys hold which are set, so the tests that load
DIR must see the same ones: gpu_autotuned_test's compile_for sets both).

A test process serves DIR with --autotune_compiled_kernels=DIR
(autotune/measure/triton_cache.py). DIR is code: build it only from
caches you trust, and load it only from builds you trust.
"""
import dataclasses
import os
import re
import sys
import time

from autotune import log as logs
from autotune.cache.io import read_cache
from autotune.errors import CompileCheckError, ToolError
from autotune.log import printable
from autotune.measure import compile_check, compile_requests, triton_cache

_log = logs.get("cache")


def add_subcommand(sub):
    p = sub.add_parser(
        "compile", help="build every recorded compile request for GPU "
        "targets on the CPU, into a directory in Triton's cache layout")
    p.add_argument("caches", nargs="+", metavar="CACHE")
    p.add_argument("--target", required=True,
                   help="comma-separated GPU targets, e.g. sm_90,sm_80")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="directory to write (created; must be empty or "
                   "absent)")
    p.add_argument("--kernel_module", action="append", default=[],
                   metavar="MODULE",
                   help="a module whose kernels the requests may name "
                   "(imported first; a request naming any other module is "
                   "refused); may be repeated")
    p.add_argument("--allowed_module", action="append", default=[],
                   metavar="MODULE",
                   help="a module the requests may name, imported only when "
                   "one does (the macro's deps); may be repeated")
    p.add_argument("--import_path", action="append", default=[],
                   metavar="DIR", help="add to the module search path; may "
                   "be repeated")
    p.add_argument("--jobs", type=int, default=0,
                   help="compile processes (default: the CPUs, at most 8)")
    p.add_argument("--triton_env", action="append", default=[],
                   metavar="NAME=VALUE",
                   help="a Triton cache-invalidating variable the tests "
                   "set; every other one is unset for the build")
    p.set_defaults(func=cmd_compile)


def _entry_arch(device):
    """The compute capability an entry was tuned on (90 for
    '.../sm_90/...'), or None for the interpreter."""
    m = re.search(r"/sm_(\d+)a?/", device + "/")
    return int(m.group(1)) if m else None


@dataclasses.dataclass
class Plan:
    tasks: list          # (request, Target)
    without: list        # entries with no request
    other_arch: list     # (entry, arch): tuned on a GPU not targeted
    mismatched: list     # (entry, reason)


def plan(entries, targets, modules=None, triton_version=None):
    """What to build; a request naming code outside `modules`, or
    recorded by another Triton than `triton_version`, is refused."""
    tasks, without, other, mismatched = [], [], [], []
    seen = set()
    for entry in entries:
        requests = entry.compile_requests
        if not requests:
            without.append(entry)
            continue
        arch = _entry_arch(entry.key.device)
        chosen = targets if arch is None else [
            t for t in targets if t.capability == arch]
        if not chosen:
            other.append((entry, arch))
            continue
        for request in requests:
            problem = compile_requests.mismatch(request, entry, modules)
            if problem is None and triton_version is not None:
                problem = compile_requests.refusal(request, modules or (),
                                                   triton_version)
            if problem:
                mismatched.append((entry, problem))
                continue
            for target in chosen:
                if (request, target) not in seen:
                    seen.add((request, target))
                    tasks.append((request, target, entry.key.signature))
    return Plan(tasks, without, other, mismatched)


def _set_build_environment(out, triton_env):
    """The environment the workers inherit: Triton's cache is `out`, and
    the cache-invalidating variables are exactly `triton_env`."""
    given = {}
    for item in triton_env:
        name, eq, value = item.partition("=")
        if not eq or not name.startswith(("TRITON_", "MLIR_", "LLVM_",
                                          "NVPTX_", "USE_")):
            raise ToolError(f"compile: --triton_env {item!r}: expected "
                            "NAME=VALUE of a Triton variable")
        given[name] = value
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ["TRITON_CACHE_DIR"] = out
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    for name in list(triton_cache.cache_invalidating_env()):
        if name not in given:
            os.environ.pop(name)
    os.environ.update(given)
    return triton_cache.cache_invalidating_env()


def cmd_compile(args):
    try:
        targets = compile_check.parse_targets(args.target)
    except CompileCheckError as e:
        raise ToolError(f"compile: {e}") from None
    out = os.path.abspath(args.output)
    if os.path.isdir(out) and os.listdir(out):
        raise ToolError(f"compile: {args.output} is not empty (the "
                        "directory is written whole; give a new one)")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ToolError(f"compile: {args.output} exists and is not a "
                        "directory")
    entries = []
    for path in args.caches:
        entries += read_cache(path, parse_all=True)
    import_paths = [os.path.abspath(p) for p in args.import_path]
    for path in reversed(import_paths):
        sys.path.insert(0, path)
    env = _set_build_environment(out, args.triton_env)
    import triton
    modules = tuple(dict.fromkeys(args.kernel_module + args.allowed_module))
    work = plan(entries, targets, modules, triton.__version__)
    for module in args.kernel_module:
        try:
            __import__(module)
        except ImportError as e:
            raise ToolError(f"compile: --kernel_module {module}: {e}") \
                from None
    os.makedirs(out, exist_ok=True)
    jobs = args.jobs or min(8, os.cpu_count() or 1)
    tasks = [(tuple(r), ("cuda", t.capability, 32), modules, import_paths,
              label) for r, t, label in work.tasks]
    start = time.perf_counter()
    results = _run(tasks, jobs)
    wall = time.perf_counter() - start
    failed = [r for r in results if not r["ok"]]
    for r in failed:
        print(printable(f"compile: {r['target']} {r['kernel']} "
                        f"[{r['config']}]: {r['failure']}: {r['reason']}"))
    for entry in work.without:
        print(printable(f"compile: no compile request: {entry.key.kernel} "
                        f"[{entry.key.signature}] on {entry.key.device} "
                        "(record one with a dump or an update)"))
    for entry, arch in work.other_arch:
        print(printable(f"compile: skipped {entry.key.kernel} "
                        f"[{entry.key.signature}]: tuned on sm_{arch}, not "
                        f"among --target {args.target}"))
    for entry, reason in work.mismatched:
        print(printable(f"compile: refused a request of {entry.key.kernel} "
                        f"[{entry.key.signature}]: {reason}"))
    triton_cache.write_manifest(out, {
        "triton_version": triton.__version__,
        "targets": [t.name for t in targets],
        "triton_env": env,
        "built": sum(r["ok"] for r in results),
        "failed": len(failed),
        "entries_without_request": len(work.without),
        "seconds": round(wall, 3),
        "compile_seconds": round(sum(r["seconds"] for r in results), 3),
    })
    print(f"compile: {len(results) - len(failed)} of {len(results)} "
          f"binaries built for {','.join(t.name for t in targets)} in "
          f"{wall:.1f} s ({jobs} job(s); "
          f"{sum(r['seconds'] for r in results):.1f} s compiling) into "
          f"{args.output}; {len(work.without)} of {len(entries)} entries "
          "without a compile request"
          + (f"; {len(work.mismatched)} request(s) refused"
             if work.mismatched else ""))
    return 1 if failed else 0


def _run(tasks, jobs):
    """Builds in `jobs` spawned processes (they start with the environment
    set above, and die with this one), logging progress as each finishes:
    the fusion and the config, so that no two lines read alike; results
    in task order."""
    done = 0

    def finished(i, result):
        nonlocal done
        done += 1
        _log.info(printable(
            f"compile: [{done}/{len(tasks)}] {result['target']} "
            f"{result['kernel']} [{result['signature']}] "
            f"{result['config']}: "
            + (f"{result['seconds']:.1f} s" if result["ok"]
               else result["failure"])))
    return compile_requests.run_pool(compile_requests.build, tasks, jobs,
                                     done=finished)
