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
(autotune/binaries/triton_cache.py). DIR is code: build it only from
caches you trust, and load it only from builds you trust.
"""
import dataclasses
import json
import os
import re
import shutil
import sys
import time

from autotune import log as logs
from autotune.cache.io import read_cache
from autotune.errors import CompileCheckError, ToolError
from autotune.log import printable
from autotune.binaries import compile_check, compile_requests, triton_cache

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


def _build(task):
    """In a worker (or this process for one job): one task of
    compile_requests.build, with the source file names of the line info
    made relative (_relative_source_names)."""
    _relative_source_names()
    return compile_requests.build(task)


# Set for every build: only the binary and its metadata are kept (the
# same keys; the IR stages Triton would also write are most of the output
# and hold the source's absolute paths), and no line info (it holds the
# source's absolute paths too, so the same cache compiled from two
# checkouts would differ): a binary served is the one a launch would
# compile, less its line table.
BUILD_ENV = {"TRITON_STORE_BINARY_ONLY": "1"}
# What a launch loads; the rest (the source's IR, which Triton writes
# even with TRITON_STORE_BINARY_ONLY) goes.
KEPT_SUFFIXES = (".json", ".cubin", ".hsaco")
# While a compile writes DIR: a second one into the same DIR is refused.
LOCK_NAME = ".autotune-compile.lock"


def _relative_source_names():
    """A fixed source root: the file names Triton writes into a binary's
    line info become relative to the module search path entry they were
    found under (autotune/kernels/softmax.py, not /home/me/src/...), so
    that the same kernels compiled from two checkouts or Bazel output
    bases give the same bytes. Triton's keys do not hold the file name.
    Triton 3.9 reads it from the JIT function's file_name, Triton 3.6
    through jit.get_jit_fn_file_line."""
    from triton.compiler import code_generator
    from triton.runtime import jit
    roots = sorted({os.path.join(os.path.abspath(p), "") for p in sys.path
                    if p and os.path.isdir(p)}, key=len, reverse=True)

    def relative(name):
        for root in roots:
            if isinstance(name, str) and name.startswith(root):
                return name[len(root):]
        return name
    original = getattr(jit, "get_jit_fn_file_line", None)
    if original is not None and not hasattr(original, "relative_names"):
        def file_line(fn):
            name, line = original(fn)
            return relative(name), line
        file_line.relative_names = True
        jit.get_jit_fn_file_line = file_line
        if getattr(code_generator, "get_jit_fn_file_line", None) is original:
            code_generator.get_jit_fn_file_line = file_line
    cls = getattr(jit, "JITCallable", jit.JITFunction)
    if not isinstance(cls.__dict__.get("file_name"), property):
        def keep(self, value):
            self.__dict__["file_name"] = value
        # A data descriptor: read before the instance's own attribute.
        cls.file_name = property(
            lambda self: relative(self.__dict__.get("file_name")), keep)


def _given_triton_env(triton_env):
    """--triton_env's NAME=VALUE items, each one of Triton's
    cache-invalidating variables (asked of Triton)."""
    given = {}
    for item in triton_env:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            raise ToolError(f"compile: --triton_env {item!r}: expected "
                            "NAME=VALUE")
        if not triton_cache.is_cache_invalidating(name):
            raise ToolError(
                f"compile: --triton_env {item!r}: {name} is not one of "
                "Triton's cache-invalidating variables (only those belong "
                "in --triton_env: the tests must see the same ones)")
        given[name] = value
    return given


def _set_build_environment(out, given):
    """The environment the workers inherit: Triton's cache is `out`, and
    the cache-invalidating variables are exactly `given`."""
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ["TRITON_CACHE_DIR"] = out
    os.environ.pop("TRITON_CACHE_MANAGER", None)
    for name in list(triton_cache.cache_invalidating_env()):
        if name not in given:
            os.environ.pop(name)
    os.environ.update(given)
    os.environ.update(BUILD_ENV)
    return triton_cache.cache_invalidating_env()


def _claim_output(given):
    """Creates the output directory (or takes an empty one) and claims it
    with a lock file: a second compile into it at the same time is
    refused. Returns (absolute path, lock path)."""
    out = os.path.abspath(given)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise ToolError(f"compile: {given} exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ToolError(f"compile: cannot create {given}: "
                        f"{e.strerror or e}") from None
    lock = os.path.join(out, LOCK_NAME)
    if os.listdir(out):
        if os.path.lexists(lock):
            raise ToolError(f"compile: another compile is writing {given} "
                            f"(or one was stopped: it holds {LOCK_NAME}; "
                            "give a new directory)")
        raise ToolError(f"compile: {given} is not empty (the "
                        "directory is written whole; give a new one)")
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise ToolError(f"compile: another compile is writing {given} at "
                        "the same time") from None
    except OSError as e:
        raise ToolError(f"compile: cannot write {given}: "
                        f"{e.strerror or e}") from None
    if sorted(os.listdir(out)) != [LOCK_NAME]:
        os.unlink(lock)
        raise ToolError(f"compile: another compile is writing {given} at "
                        "the same time")
    return out, lock


def normalise_tree(out):
    """Makes the tree Triton wrote independent of where it was built:
    group files name their children by bare name (the read-through
    manager resolves them in the key's folder), the metadata names
    Triton's libraries by file name, and Triton's temporary folders go."""
    for key in sorted(os.listdir(out)):
        folder = os.path.join(out, key)
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and name.startswith("tmp."):
                shutil.rmtree(path, ignore_errors=True)
            elif name.startswith("__grp__"):
                with open(path) as f:
                    group = json.load(f)
                children = sorted(c for c in group.get("child_paths", {})
                                  if c.endswith(KEPT_SUFFIXES))
                with open(path, "w") as f:
                    json.dump({"child_paths": {c: c for c in children}}, f,
                              sort_keys=True)
            elif not name.endswith(KEPT_SUFFIXES):
                os.unlink(path)
            elif name.endswith(".json"):
                _normalise_metadata(path)


def _normalise_metadata(path):
    """The metadata's extern_libs name files of the building machine's
    Triton by absolute path (the key holds their contents' hash, and no
    launch reads them): kept by file name only."""
    with open(path) as f:
        metadata = json.load(f)
    libs = metadata.get("extern_libs")
    if not isinstance(libs, list):
        return
    metadata["extern_libs"] = [
        [item[0], os.path.basename(item[1])]
        if isinstance(item, list) and len(item) == 2 and
        isinstance(item[1], str) else item for item in libs]
    with open(path, "w") as f:
        json.dump(metadata, f)


def cmd_compile(args):
    try:
        targets = compile_check.parse_targets(args.target)
    except CompileCheckError as e:
        raise ToolError(f"compile: {e}") from None
    entries = []
    for path in args.caches:
        entries += read_cache(path, parse_all=True)
    import_paths = [os.path.abspath(p) for p in args.import_path]
    for path in reversed(import_paths):
        sys.path.insert(0, path)
    triton_env = _given_triton_env(args.triton_env)
    out, lock = _claim_output(args.output)
    try:
        return _compile_into(args, out, targets, entries, import_paths,
                             triton_env)
    finally:
        if os.path.lexists(lock):
            os.unlink(lock)


def _compile_into(args, out, targets, entries, import_paths, triton_env):
    env = _set_build_environment(out, triton_env)
    import triton
    modules = tuple(dict.fromkeys(args.kernel_module + args.allowed_module))
    work = plan(entries, targets, modules, triton.__version__)
    for module in args.kernel_module:
        try:
            __import__(module)
        except ImportError as e:
            raise ToolError(f"compile: --kernel_module {module}: {e}") \
                from None
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
    normalise_tree(out)
    # No timings, paths or dates: the same inputs give the same bytes.
    identity = triton_cache.build_identity([t.name for t in targets])
    triton_cache.write_manifest(out, {
        "triton_version": identity["triton_version"],
        "targets": [t.name for t in targets],
        "triton_env": env,
        "identity": identity,
        "built": sum(r["ok"] for r in results),
        "failed": len(failed),
        "entries_without_request": len(work.without),
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
    # Always in spawned processes (apart): this one may have imported
    # Triton under its interpreter (TRITON_INTERPRET=1 in a test's
    # environment), whose jit functions a GPU compile cannot use (Triton
    # 3.5 stops at importing its code generator).
    return compile_requests.run_pool(_build, tasks, jobs,
                                     done=finished, apart=True)
