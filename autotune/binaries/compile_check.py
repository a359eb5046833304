"""Compile configs for a target GPU on a machine without one.

Triton compiles for any CUDA target with the ptxas inside its wheel:
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32), ...)`
gives the cubin and the dynamic shared memory; the wheel's cuobjdump gives
registers and stack (spills). Each config is then checked against the
target's limits (shared memory per block, registers per block, threads per
block), so a config that cannot run on the GPU is known before any GPU sees
it, including the ones Triton's interpreter runs happily (a tl.dot tile
below the hardware minimum, a tile that needs more shared memory than the
GPU has).

    python tools/compile_check.py --targets sm_90,sm_80 \\
        [--module autotune.kernels.matmul ...] [--cache FILE] [--jobs N]

Kernels must be JITFunctions, not interpreted: this module compiles in a
process where TRITON_INTERPRET=0 was set before anything imported Triton
(the command line does that; tuning with --autotune_compile_check asks a
child process, see Checker).
"""
import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import time

from autotune import keys, unwrap
from autotune.errors import AutotuneError, CompileCheckError
from autotune.binaries import compile_requests
from autotune.binaries.compile_requests import (_TORCH_TO_TRITON,
                                                stand_in_arguments)
# The compile's result and the target's limits, named here as before.
from autotune.binaries.compile_results import (  # noqa: F401
    _SHARED_OPTIN, REGISTERS_PER_BLOCK, THREADS_PER_BLOCK, Result, Target,
    _failed, _quiet_fp_fusion_notice, _tool, apply_limits, checked,
    resource_usage)
from autotune.records import Config


def parse_targets(text):
    """'sm_90,sm_80' -> [Target]; one-line error on anything else."""
    targets = []
    for item in (t.strip() for t in str(text).split(",")):
        if not item:
            continue
        m = re.fullmatch(r"sm_?(\d+)a?", item)
        if not m:
            raise CompileCheckError(f"compile check target {item!r}: expected "
                                    "sm_NN, for example sm_90 or sm_80")
        cap = int(m.group(1))
        if cap not in _SHARED_OPTIN:
            raise CompileCheckError(
                f"compile check target {item!r}: unknown compute capability; "
                f"known: {', '.join(f'sm_{c}' for c in sorted(_SHARED_OPTIN))}")
        targets.append(Target(f"sm_{cap}", cap))
    if not targets:
        raise CompileCheckError("compile check: no target given")
    return targets


# -- signatures --------------------------------------------------------------

def triton_type(value):
    """Triton's signature type of a launch argument."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        name = str(dtype).replace("torch.", "")
        if name not in _TORCH_TO_TRITON:
            raise CompileCheckError(f"no Triton type for tensors of {dtype}")
        return "*" + _TORCH_TO_TRITON[name]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise CompileCheckError(f"no Triton type for {type(value).__name__}")


def launch_signature(fn, named):
    """{arg: type or value} that compiles what a launch with these
    arguments compiles: Triton's launcher specialisation of them -- an
    integer equal to 1 is a constant, integers and tensor addresses
    divisible by 16 are marked so (":16"), None is a constant. Tuned
    constexprs come from each config."""
    consts = set(keys.constexpr_names(fn))
    out = {}
    for name, value in named.items():
        if name in consts or value is None:
            out[name] = value
        elif isinstance(value, bool):
            out[name] = "i1"
        elif isinstance(value, int):
            kind = triton_type(value)
            out[name] = 1 if value == 1 else \
                kind + (":16" if value % 16 == 0 else "")
        elif hasattr(value, "data_ptr"):
            out[name] = triton_type(value) + (
                ":16" if value.data_ptr() % 16 == 0 else "")
        else:
            out[name] = triton_type(value)
    return out


def describe(signature):
    """Short readable form: pointer dtypes and constexpr values."""
    parts = []
    for name, value in signature.items():
        if isinstance(value, str) and value.startswith("*"):
            parts.append(f"{name}:{value[1:].replace(':16', '')}")
        elif not (isinstance(value, str) and re.fullmatch(
                r"([iuf]p?\d+|i1)(:16)?", value)):
            parts.append(f"{name}={value}")
    return ",".join(parts)


# -- compiling ---------------------------------------------------------------

def _jit_function(fn):
    from triton.runtime.jit import JITFunction
    try:
        kernel = unwrap.jit_function(fn)  # through autotuners, heuristics
    except AutotuneError:
        kernel = fn
    if isinstance(kernel, JITFunction):
        return kernel
    raise CompileCheckError(
        f"{getattr(kernel, '__name__', kernel)} is not a JITFunction: "
        "compile checks run with TRITON_INTERPRET=0 (a kernel decorated "
        "under the interpreter cannot be compiled for a GPU)")


def _launched(kernel):
    """The layer a launch goes through: triton.heuristics around the
    JITFunction, or the JITFunction (under this project's autotuner)."""
    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction
    for layer in unwrap.layers(kernel):
        if isinstance(layer, (Heuristics, JITFunction)):
            return layer
    return _jit_function(kernel)


def compile_one(kernel, signature, config_kwargs, num_warps, num_stages,
                num_ctas, target, maxnreg=None):
    """Compiles one config for `target`; returns a Result. What is compiled
    is what Triton's launcher computes for arguments of `signature`
    (compile_requests.record_for_launch over stand-in arguments)."""
    from triton.backends.compiler import GPUTarget

    jit = _jit_function(kernel)
    fn = jit.fn
    config_text = " ".join(f"{k}={v}" for k, v in config_kwargs.items()) + \
        f" warps={num_warps} stages={num_stages}" + \
        (f" maxnreg={maxnreg}" if maxnreg is not None else "")
    result = Result(target.name, fn.__name__, describe(signature),
                    config_text, ok=True)
    gpu = ("cuda", target.capability, 32)
    start = time.perf_counter()
    try:
        named = stand_in_arguments(fn, {k: v for k, v in signature.items()
                                        if k not in config_kwargs})
        record = compile_requests.record_for_launch(
            _launched(kernel), named,
            Config(dict(config_kwargs), num_warps, num_stages, num_ctas,
                   maxnreg=maxnreg), target=GPUTarget(*gpu))
    except Exception as e:  # the launch would fail the same way
        return _failed(result, e, start)
    built = compile_requests.build_record(record, gpu, None, kernel=jit)
    built.target, built.kernel = result.target, result.kernel
    built.signature, built.config = result.signature, result.config
    return built


def _compile_task(task):
    """Runs in a worker process, or in this one for a single job: (module,
    kernel name, signature, config dict, target) -> Result as a dict. The
    kernel module is imported with TRITON_INTERPRET=0 (a GPU kernel, not an
    interpreted one); the variable is put back afterwards, so that a
    compile in this process leaves its later kernels on the interpreter."""
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        _quiet_fp_fusion_notice()
        module_name, file_name, kernel_name, signature, config, target = task
        kernel = load_kernel(module_name, kernel_name, file_name)
        r = compile_one(kernel, signature, config["kwargs"],
                        config["num_warps"], config["num_stages"],
                        config.get("num_ctas", 1), Target(*target),
                        maxnreg=config.get("maxnreg"))
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    return dataclasses.asdict(r)


def load_kernel(module_name, kernel_name, file_name=None):
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        if not file_name:
            raise
        spec = importlib.util.spec_from_file_location(module_name, file_name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    kernel = getattr(module, kernel_name, None)
    if kernel is None:
        raise CompileCheckError(f"{module_name} has no kernel {kernel_name}")
    return kernel


def run_tasks(tasks, jobs, apart=False):
    """Compiles tasks (see _compile_task), in `jobs` processes when > 1
    (the one pool, compile_requests.run_pool). Results in task order.
    apart: in a spawned process even for one job, a compile this
    process's Triton state cannot touch (Triton's interpreter, once it ran
    kernels here, can break a later fresh compile in the same process)."""
    return compile_requests.run_pool(_compile_task, tasks, max(1, jobs),
                                     apart=apart)


# -- compiling ahead of a launch ------------------------------------------------
#
# --autotune_compile_jobs: a miss's candidates are compiled in spawned
# processes into Triton's on-disk cache before they are timed one by one,
# so each first launch loads a binary. That only pays if the launch then
# finds the binary, so the compile requests are not rebuilt from a
# signature: each config's launch runs through the kernel's own launch path
# (triton.heuristics, Triton's binder and its specialisation of every
# argument) as a warmup whose compile step is captured instead of run. The
# captured (signature, constexprs, attrs, options, target) is what the
# JIT would hand triton.compile, on every Triton version that has this
# path: the workers hand it over unchanged, so the cache key is the
# launch's own.

# Fewer configs to compile than this are compiled by the launches instead:
# a pool costs 2-4 s of process start-up (each worker imports torch and
# Triton) before its first compile, about what one to two serial compiles
# of a Hopper-sized matmul tile cost. With n configs of c seconds each and
# j jobs the pool costs start + ceil(n/j)*c against n*c serially: at c =
# 2 s, start = 3 s and j >= 2 it breaks even near n = 3 and wins from 4.
MIN_CONFIGS_FOR_POOL = 4


@dataclasses.dataclass
class LaunchCompile:
    """What launching `config` would hand Triton's compiler."""
    config: object
    record: object         # compile_requests.LaunchRecord
    target: tuple          # GPUTarget's (backend, arch, warp_size)
    on_disk: bool = False  # the on-disk cache holds the binary already


@dataclasses.dataclass
class AheadPlan:
    """The candidates of one miss, sorted by what their launch would do:
    load the JIT's binary (held), load one from disk, or compile."""
    held: list
    on_disk: list
    to_compile: list
    failed: list           # (config, reason): the warmup itself raised

    def skip_reason(self, jobs):
        """Why a pool would not repay its start-up; None: run one."""
        n = len(self.to_compile)
        if n == 0:
            return ("every candidate is compiled already ("
                    f"{len(self.held)} held by the JIT, {len(self.on_disk)} "
                    "in Triton's on-disk cache)")
        if jobs <= 1:
            return "one compile job"
        if n < MIN_CONFIGS_FOR_POOL:
            return (f"{n} config(s) to compile, fewer than the "
                    f"{MIN_CONFIGS_FOR_POOL} that repay a pool's start-up")
        return None


def _on_disk(request):
    """Whether Triton's on-disk cache holds this compile already (the
    lookup triton.compile starts with); False when it cannot tell."""
    try:
        import hashlib

        from triton._C.libtriton import get_cache_invalidating_env_vars
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        from triton.runtime.cache import get_cache_key, get_cache_manager

        target = GPUTarget(*request.target)
        src, options = compile_requests.source_of(request.record, target)
        backend = make_backend(target)
        key = get_cache_key(src, backend, backend.parse_options(options),
                            env_vars=get_cache_invalidating_env_vars())
        manager = get_cache_manager(
            hashlib.sha256(key.encode("utf-8")).hexdigest())
        name = f"{src.name[:150]}.json"
        return (manager.get_group(name) or {}).get(name) is not None
    except Exception:  # another Triton's internals: compile it
        return False


def plan_compile_ahead(kernel, named, configs):
    """An AheadPlan for launching `kernel` (a JITFunction, or
    triton.heuristics around one) with the arguments `named` (by name) and
    each config's meta-parameters and launch options. Runs in the tuning
    process, whose active driver (the GPU's) names the target."""
    import threading

    jit = _jit_function(kernel)
    name = f"{jit.fn.__module__}:{jit.fn.__qualname__}"
    captured = []
    planner = threading.get_ident()
    patched_before = vars(jit).get("_do_compile")
    own_compile = patched_before or type(jit)._do_compile.__get__(jit)

    def capture(key, signature, device, constexprs, options, attrs,
                warmup):
        if threading.get_ident() != planner:
            # Another thread launching this kernel meanwhile compiles as
            # always.
            return own_compile(key, signature, device, constexprs, options,
                               attrs, warmup)
        target = jit.device_caches[device][2]
        captured.append(LaunchCompile(
            None, compile_requests.from_launch(
                name, jit, signature, constexprs, attrs,
                dict(options.__dict__)),
            (target.backend, target.arch, target.warp_size)))
        return None  # nothing compiled, nothing launched
    plan = AheadPlan([], [], [], [])
    jit._do_compile = capture
    try:
        for config in dict.fromkeys(configs):
            captured.clear()
            try:
                kernel.run(grid=(1,), warmup=True,
                           **{**named, **config.all_kwargs()})
            except Exception as e:  # the launch will say it again
                plan.failed.append((config, f"{type(e).__name__}: {e}"))
                continue
            if not captured:
                plan.held.append(config)
                continue
            request = captured[-1]
            request.config = config
            request.on_disk = _on_disk(request)
            (plan.on_disk if request.on_disk else
             plan.to_compile).append(request)
    finally:
        if patched_before is None:
            del jit._do_compile
        else:
            jit._do_compile = patched_before
    return plan


def compile_planned(where, plan, jobs):
    """Compiles the plan's to_compile requests in `jobs` spawned processes
    (in this one when jobs is 1) into Triton's on-disk cache; where:
    (module, attribute) under which the workers import the kernel.
    Results as dicts, in plan order."""
    module_name, kernel_attr = where
    tasks = []
    for request in plan.to_compile:
        record = dataclasses.replace(
            request.record, kernel=f"{module_name}:{kernel_attr}",
            label=request.config.short() if hasattr(request.config, "short")
            else str(request.config))
        tasks.append((record, request.target, None, ()))
    return compile_requests.run_pool(compile_requests.build, tasks,
                                     max(1, jobs))


def compile_ahead_of_launch(where, kernel, named, configs, jobs):
    """--autotune_compile_jobs for one miss: what the launches of
    `configs` would compile, compiled in up to `jobs` spawned processes
    first. Returns the Results (dicts) of what the pool compiled, or None
    when no pool ran: every candidate compiled already, or too few left to
    repay a pool's start-up (the reason is logged)."""
    from autotune import log as logs
    log = logs.get("tuning")
    plan = plan_compile_ahead(kernel, named, configs)
    reason = plan.skip_reason(jobs)
    name = getattr(_jit_function(kernel).fn, "__name__", "kernel")
    if reason is not None:
        log.info(f"autotune: {name}: no compile-ahead pool: {reason}")
        return None
    return compile_planned(where, plan, min(jobs, len(plan.to_compile)))


# -- the tuning hook -----------------------------------------------------------

def _config_dict(config):
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
            "num_stages": config.num_stages, "num_ctas": config.num_ctas,
            "maxnreg": getattr(config, "maxnreg", None)}


class Checker:
    """--autotune_compile_check=sm_90,...: before a fusion's candidates are
    measured, every config is compiled for each target in a child process
    (kernels in this process may be interpreted) and those that fail or
    exceed a target's limits are dropped. Results are kept for the run."""

    _memo = {}

    def __init__(self, targets, kernel, named, jobs=None):
        from autotune import keys
        self.targets = parse_targets(targets) if isinstance(targets, str) \
            else list(targets)
        fn = unwrap.python_function(kernel)
        self.module = fn.__module__
        self.file = fn.__code__.co_filename
        self.kernel_name = fn.__name__
        self.fingerprint = keys.kernel_fingerprint(kernel)
        self.jobs = jobs or min(4, os.cpu_count() or 1)
        tuned_free = {k: v for k, v in named.items()}
        # Specialised as a GPU launch of these arguments would be: the
        # shared memory and registers a GPU would see (pipelined loads).
        self.signature = launch_signature(fn, tuned_free)

    def _key(self, config, target):
        return (self.file, self.kernel_name, self.fingerprint,
                json.dumps(self.signature, sort_keys=True, default=str),
                config, target.name)

    def check(self, configs):
        """{config: (failure kind, reason)} for the configs that cannot run
        on some target; compiles what this run has not compiled yet."""
        todo = [(c, t) for c in configs for t in self.targets
                if self._key(c, t) not in self._memo]
        if todo:
            # Tuned constexprs come from each config, not the call.
            request = [(self.module, self.file, self.kernel_name,
                        {k: v for k, v in self.signature.items()
                         if k not in c.kwargs}, _config_dict(c),
                        dataclasses.astuple(t)) for c, t in todo]
            for (c, t), result in zip(todo, self._ask_child(request)):
                self._memo[self._key(c, t)] = result
        rejected = {}
        for c in configs:
            for t in self.targets:
                r = self._memo[self._key(c, t)]
                if not r["ok"] and c not in rejected:
                    rejected[c] = (r["failure"], f"{t.name}: {r['reason']}")
        return rejected

    def _ask_child(self, request):
        env = dict(os.environ, TRITON_INTERPRET="0",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.pop("AUTOTUNE_FLAGS", None)
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.binaries.compile_check",
             "--serve", str(self.jobs)], input=json.dumps(request),
            capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise CompileCheckError(
                f"compile check of {self.kernel_name} failed to run: {tail}")
        return json.loads(proc.stdout)


# -- the child process of Checker -----------------------------------------------

EXAMPLE_MODULES = ("autotune.kernels.matmul", "autotune.kernels.softmax",
                   "autotune.kernels.layernorm")


def module_tasks(module_name, targets, cache_entries=None):
    """Tasks for every config of every tuned kernel a module declares in
    COMPILE_SIGNATURES ({kernel attribute: [signature, ...]}), or, with
    cache_entries, for every config those entries name."""
    from autotune.records import Config
    module = importlib.import_module(module_name)
    declared = getattr(module, "COMPILE_SIGNATURES", None)
    if not declared:
        raise CompileCheckError(f"{module_name} declares no "
                                "COMPILE_SIGNATURES")
    tasks = []
    for attr, signatures in sorted(declared.items()):
        tuned = getattr(module, attr)
        fn = unwrap.python_function(tuned)
        if cache_entries is None:
            work = [(sig, c) for sig in signatures for c in tuned.configs]
        else:
            work = []
            for entry in cache_entries:
                if entry.key.kernel != fn.__name__:
                    continue
                sig = signature_from_cache(entry.key.signature, signatures[0],
                                           fn)
                seen = []
                for c in [entry.best] + [x.config for x in entry.candidates]:
                    if isinstance(c, Config) and c not in seen:
                        seen.append(c)
                work += [(sig, c) for c in seen]
        for sig, c in work:
            for t in targets:
                tasks.append((module_name, None, attr,
                              {k: v for k, v in sig.items()
                               if k not in c.kwargs}, _config_dict(c),
                              dataclasses.astuple(t)))
    return tasks


def signature_from_cache(text, template, fn):
    """A compile signature from a cache entry's fusion signature: tensor
    dtypes and untuned constexprs from the entry, scalar types from the
    module's declared template."""
    sig = dict(template)
    parts = text.split(";")
    rest = parts[1:]
    for part in rest:
        if part.startswith("dtypes="):
            for item in filter(None, part[len("dtypes="):].split(",")):
                name, _, dtype = item.partition(":")
                if dtype in _TORCH_TO_TRITON:
                    sig[name] = "*" + _TORCH_TO_TRITON[dtype]
        else:
            consts = set(keys.constexpr_names(fn))
            for item in filter(None, part.split(",")):
                name, _, value = item.partition("=")
                if name in consts:
                    sig[name] = int(value) if re.fullmatch(r"-?\d+", value) \
                        else value
    return sig


def serve():
    """The child side of Checker: JSON tasks on stdin, results on stdout
    (a tuning process asks; Triton compiles for GPU targets here)."""
    os.environ["TRITON_INTERPRET"] = "0"
    _quiet_fp_fusion_notice()
    tasks = [tuple(t) for t in json.load(sys.stdin)]
    json.dump(run_tasks(tasks, int(sys.argv[2]) if len(sys.argv) > 2
                        else 1), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
