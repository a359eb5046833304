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
import concurrent.futures
import dataclasses
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from autotune import keys
from autotune.errors import CompileCheckError

# Per compute capability: dynamic shared memory per block (the opt-in
# maximum, which Triton requests), registers per block, threads per block.
# From the CUDA programming guide's table of compute capabilities.
_SHARED_OPTIN = {70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376,
                 87: 166912, 89: 101376, 90: 232448, 100: 232448,
                 120: 101376}
REGISTERS_PER_BLOCK = 65536
THREADS_PER_BLOCK = 1024

_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                    "float64": "fp64", "int8": "i8", "int16": "i16",
                    "int32": "i32", "int64": "i64", "uint8": "u8",
                    "bool": "i1", "float8_e4m3fn": "fp8e4nv",
                    "float8_e5m2": "fp8e5"}




@dataclasses.dataclass(frozen=True)
class Target:
    name: str          # sm_90
    capability: int    # 90

    @property
    def shared_limit(self):
        return _SHARED_OPTIN.get(self.capability, 49152)


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


@dataclasses.dataclass
class Result:
    target: str
    kernel: str
    signature: str
    config: str
    ok: bool
    failure: str = "NONE"      # COMPILE_ERROR or OUT_OF_RESOURCES
    reason: str = ""
    shared: int = 0
    registers: int = 0
    stack: int = 0
    seconds: float = 0.0


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


def call_signature(fn, named):
    """{arg: type or constexpr value} from the arguments of one launch
    (tuned constexprs come from each config)."""
    consts = set(keys.constexpr_names(fn))
    out = {}
    for name, value in named.items():
        out[name] = value if name in consts else triton_type(value)
    return out


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


def compile_ahead(module_name, kernel_attr, signature, configs, target,
                  jobs):
    """Compiles `configs` of a module-level kernel for `target` in `jobs`
    spawned processes, into Triton's on-disk cache (TRITON_CACHE_DIR, the
    children inherit it): the tuning process's own compile of each config
    is then a cache hit. Returns the Results as dicts, in config order."""
    tasks = [(module_name, None, kernel_attr,
              {k: v for k, v in signature.items() if k not in c.kwargs},
              _config_dict(c), dataclasses.astuple(target))
             for c in configs]
    return run_tasks(tasks, jobs)


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

def _tool(name):
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends",
                        "nvidia", "bin", name)
    return path if os.path.exists(path) else None


def resource_usage(cubin):
    """(registers, stack bytes) of a cubin, from the wheel's cuobjdump."""
    tool = _tool("cuobjdump")
    if tool is None:
        return 0, 0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name],
                             capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _jit_function(fn):
    from triton.runtime.jit import JITFunction
    if isinstance(fn, JITFunction):
        return fn
    kernel = getattr(fn, "kernel", fn)  # an autotune.Autotuner
    if isinstance(kernel, JITFunction):
        return kernel
    raise CompileCheckError(
        f"{getattr(kernel, '__name__', kernel)} is not a JITFunction: "
        "compile checks run with TRITON_INTERPRET=0 (a kernel decorated "
        "under the interpreter cannot be compiled for a GPU)")


def compile_one(kernel, signature, config_kwargs, num_warps, num_stages,
                num_ctas, target):
    """Compiles one config for `target`; returns a Result."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from autotune.measure import backends
    jit = _jit_function(kernel)
    fn = jit.fn
    params = inspect.signature(fn).parameters
    full = dict(signature)
    full.update(config_kwargs)
    consts = set(keys.constexpr_names(fn))
    types, constexprs, attrs = {}, {}, {}
    for index, name in enumerate(jit.arg_names):
        value = full.get(name)
        if name not in consts and isinstance(value, int) and \
                not isinstance(value, bool):
            # An integer argument given as a value: specialised, as
            # Triton's launcher specialises an argument equal to 1 (a unit
            # stride), which decides vectorised and pipelined loads.
            types[name] = "constexpr"
            constexprs[name] = value
        elif name not in consts and isinstance(value, str) and \
                value.endswith(":16"):
            # "*bf16:16", "i32:16": divisible by 16, as the launcher marks
            # pointers and integers that are.
            types[name] = value[:-3]
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif name not in consts and name in full and value is None:
            types[name] = "constexpr"  # None arguments are constants
            constexprs[name] = None
        elif name in consts:
            types[name] = "constexpr"
            if name in full:
                constexprs[name] = full[name]
            elif params[name].default is not inspect.Parameter.empty:
                constexprs[name] = params[name].default
            else:
                raise CompileCheckError(f"{fn.__name__}: no value for "
                                        f"constexpr {name}")
        elif name in full:
            types[name] = full[name]
        else:
            raise CompileCheckError(f"{fn.__name__}: no type for argument "
                                    f"{name}")
    config_text = " ".join(f"{k}={v}" for k, v in config_kwargs.items()) + \
        f" warps={num_warps} stages={num_stages}"
    result = Result(target.name, fn.__name__, describe(signature),
                    config_text, ok=True)
    start = time.perf_counter()
    try:
        options = {"num_warps": num_warps, "num_stages": num_stages}
        if num_ctas != 1:
            options["num_ctas"] = num_ctas
        compiled = triton.compile(
            ASTSource(jit, types, constexprs=constexprs, attrs=attrs),
            target=GPUTarget("cuda", target.capability, 32), options=options)
    except Exception as e:  # classified; the reason is its last line
        result.ok = False
        result.failure = backends.classify_failure(e)
        if result.failure == "RUNTIME_ERROR":
            result.failure = "COMPILE_ERROR"
        lines = [ln.strip() for ln in str(e).strip().splitlines()
                 if ln.strip()]
        result.reason = (f"{type(e).__name__}: "
                         + (lines[-1] if lines else ""))[:200]
        result.seconds = round(time.perf_counter() - start, 3)
        return result
    result.shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    result.registers, result.stack = resource_usage(compiled.asm["cubin"])
    result.seconds = round(time.perf_counter() - start, 3)
    return apply_limits(result, target, num_warps)


def apply_limits(result, target, num_warps, shared_limit=None):
    """Marks a compiled config OUT_OF_RESOURCES when it needs more than the
    target has per block: what a launch there would refuse."""
    shared_limit = shared_limit or target.shared_limit
    threads = num_warps * 32
    problems = []
    if result.shared > shared_limit:
        problems.append(f"shared memory {result.shared} B > "
                        f"{shared_limit} B per block")
    if threads > THREADS_PER_BLOCK:
        problems.append(f"{threads} threads > {THREADS_PER_BLOCK} per block")
    if result.registers * threads > REGISTERS_PER_BLOCK:
        problems.append(f"{result.registers} registers x {threads} threads > "
                        f"{REGISTERS_PER_BLOCK} per block")
    if problems:
        result.ok = False
        result.failure = "OUT_OF_RESOURCES"
        result.reason = "; ".join(problems)
    return result


def _quiet_fp_fusion_notice():
    # Triton 3.9 warns on every compile that TRITON_DEFAULT_FP_FUSION is
    # unset; the check compiles with whatever default a launch would use.
    import warnings
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")


def _compile_task(task):
    """Runs in a worker process: (module, kernel name, signature, config
    dict, target) -> Result as a dict."""
    os.environ["TRITON_INTERPRET"] = "0"
    _quiet_fp_fusion_notice()
    module_name, file_name, kernel_name, signature, config, target = task
    kernel = load_kernel(module_name, kernel_name, file_name)
    r = compile_one(kernel, signature, config["kwargs"], config["num_warps"],
                    config["num_stages"], config.get("num_ctas", 1),
                    Target(*target))
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


def run_tasks(tasks, jobs):
    """Compiles tasks (see _compile_task), in `jobs` processes when > 1.
    Results in task order."""
    if jobs <= 1 or len(tasks) <= 1:
        return [_compile_task(t) for t in tasks]
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    env_before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"  # the spawned workers start so
    try:
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            return list(pool.map(_compile_task, tasks))
    finally:
        if env_before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = env_before


# -- the tuning hook -----------------------------------------------------------

def _config_dict(config):
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
            "num_stages": config.num_stages, "num_ctas": config.num_ctas}


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
        fn = keys.python_function(kernel)
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
            [sys.executable, "-m", "autotune.measure.compile_check", "--serve",
             str(self.jobs)], input=json.dumps(request),
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
        fn = tuned.kernel.fn if hasattr(tuned, "kernel") else tuned.fn
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
