"""What a launch compiles, recorded once from the launch itself, and built
again from that record alone, for any CUDA target, in one worker pool.

One record type (LaunchRecord) describes a compile: the kernel's
"module:qualname", the signature, the constexpr values, the attribute
entries and the options, each exactly as Triton's own launch path
computed them (`JITFunction._pack_args` after Triton's binder), and the
Triton version that computed them. Three producers make it:

- a dump or an update records each winner's launch (request_for_launch),
  stored in the cache as a CompileRequest (records.CompileRequest: two
  strings, see below);
- compile-ahead captures the launch's own compile step
  (compile_check.plan_compile_ahead);
- the compile check binds stand-in arguments of a declared signature
  through the same binder (record_for_signature).

`build` turns any record into triton.compile's input, which writes
exactly the files the JIT would write under the same cache key
(tests/test_compiled_kernels.py checks it with an sm_90 driver stand-in),
and `run_pool` runs builds in spawned workers that die with their parent.

Triton versions compute the attributes differently (3.6 gives no attribute
to an integer constexpr, 3.9 an empty one), and the attributes are part of
the cache key: nothing is derived by one version's rule. A record made
by one Triton is built only by the same version; another version's record
is refused in one line naming both.

Nothing is imported because a cache names it: a request's kernel and any
JIT function among its constexprs resolve only among the modules the
command line names (`autotune_cache compile --kernel_module`, the
macro's deps); anything else is refused, naming the entry.

The two strings of a CompileRequest:

    arguments: "x_ptr:*fp32:D y_ptr:*fp32: n:i32 BLOCK=1024
                @attrs=[[[0],[["tt.divisibility",16]]],[[1],[]],[[3],[]]]"
    options:   "num_ctas=1 num_stages=2 num_warps=4"

NAME:TYPE:ATTR for a runtime argument (ATTR "D": divisible by 16, empty:
an attribute entry without a property, no third part: no entry), NAME=JSON
for a constexpr (a dtype as {"dtype": "fp32"}, a @triton.jit function as
{"jit": "module:qualname"}; spaces inside a JSON string are written
\\u0020 so that arguments split on spaces), and last `@attrs=` with the
attribute entries as Triton computed them, in its order: [path, entries]
pairs. A request without `@attrs=` (written before it existed) is built
only by the Triton version that wrote it, whose binder then computes the
attributes again from stand-in arguments of the recorded types and marks.
"""
import concurrent.futures
import ctypes
import dataclasses
import importlib
import json
import multiprocessing
import os
import re
import signal
import sys
import time

from autotune import log as logs
from autotune import unwrap
from autotune.errors import AutotuneError, CompileCheckError
from autotune import keys
from autotune.binaries.compile_results import (Result, Target, _failed,
                                               _quiet_fp_fusion_notice,
                                               checked)
from autotune.records import CompileRequest, Config

# The target whose backend specialises an interpreter run's launches: any
# CUDA target gives the same specialisation.
DEFAULT_TARGET = ("cuda", 90, 32)
ATTRS_TOKEN = "@attrs="
# Triton's scalar and pointer types (`*k` a constant pointer): anything else
# in a request is malformed, not a compile to try.
_TYPE = re.compile(r"\*?k?(?:i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp8e4nv|"
                   r"fp8e4b15|fp8e4b8|fp8e5|fp8e5b16|fp16|bf16|fp32|fp64)")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_log = logs.get("runtime")
_JITS = {}
_BINDERS = {}
_unrecorded = set()


@dataclasses.dataclass
class LaunchRecord:
    """What one launch hands Triton's compiler, as that Triton computed it.
    JSON values only, so that it crosses to a spawned worker unchanged."""
    kernel: str            # "module:qualname" of the Python function
    parameters: list       # [name, type], "constexpr" for a constant
    constexprs: list       # [path, encoded value] (see encode_value)
    attrs: object          # [path, entries] in Triton's order; None: a
                           # request written before they were recorded
    options: dict          # launch options (num_warps, ...)
    triton_version: str
    label: str = ""        # what the build is for, in progress lines
    marks: object = None   # a request without attrs: per parameter its
                           # ATTR ("D", "", None for none)

    def config_text(self):
        """The constexprs and options, e.g. "BLOCK=1024 num_warps=4"."""
        names = [name for name, _ in self.parameters]
        values = [f"{names[path[0]]}={_short(value)}"
                  for path, value in self.constexprs if len(path) == 1]
        shown = ("num_warps", "num_stages", "num_ctas", "maxnreg")
        values += [f"{k}={self.options[k]}" for k in shown
                   if self.options.get(k) is not None]
        return " ".join(values)

    def to_request(self):
        """The CompileRequest a cache stores."""
        by_path = {tuple(path): entries for path, entries in self.attrs}
        values = {tuple(path): value for path, value in self.constexprs}
        parts = []
        for index, (name, kind) in enumerate(self.parameters):
            if kind == "constexpr":
                parts.append(f"{name}={_json(values[(index,)])}")
                continue
            entries = by_path.get((index,))
            mark = "" if entries is None else ":" + (
                "D" if ["tt.divisibility", 16] in entries else "")
            parts.append(f"{name}:{kind}{mark}")
        parts.append(ATTRS_TOKEN + _json(self.attrs))
        options = " ".join(f"{k}={json.dumps(v)}"
                           for k, v in sorted(self.options.items()))
        return CompileRequest(self.kernel, " ".join(parts), options,
                              self.triton_version)


def _json(value):
    text = json.dumps(value, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=True)
    return text.replace(" ", "\\u0020")


def _short(value):
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.values()))
    return value


# -- recording -----------------------------------------------------------------

def encode_value(value):
    """A constexpr value as JSON data: a JIT function by "module:qualname",
    a dtype by name."""
    kind = type(value).__name__
    if kind == "constexpr":
        value = value.value
        kind = type(value).__name__
    if kind == "JITFunction" or kind == "InterpretedFunction":
        fn = unwrap.python_function(value)
        return {"jit": f"{fn.__module__}:{fn.__qualname__}"}
    if kind == "dtype" and hasattr(value, "name"):
        return {"dtype": value.name}
    if isinstance(value, tuple):
        return [encode_value(v) for v in value]
    json.dumps(value)  # TypeError: not a value a record can hold
    return value


def _heuristics_and_jit(kernel):
    """The triton.heuristics layers around the launched kernel, outermost
    first, and the kernel itself (a JITFunction or an interpreted one)."""
    from triton.runtime.autotuner import Heuristics
    layers = []
    while isinstance(kernel, Heuristics):
        layers.append(kernel)
        kernel = kernel.fn
    return layers, kernel


def _jit_for(inner):
    from triton.runtime.jit import JITFunction
    if isinstance(inner, JITFunction):
        return inner
    fn = getattr(inner, "fn", None)
    if fn is None:
        raise CompileCheckError(f"{inner!r} is not a Triton kernel")
    jit = _JITS.get(fn)
    if jit is None:
        # The interpreter's kernel wraps the same Python function: a
        # JITFunction of it gives the parameters as Triton's launcher sees
        # them (it is never compiled in this process).
        jit = _JITS[fn] = JITFunction(fn)
    return jit


def _binder(jit, target):
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    cached = _BINDERS.get((id(jit), target))
    if cached is None or cached[0] is not jit:
        backend = make_backend(target)
        cached = _BINDERS[(id(jit), target)] = (
            jit, backend,
            create_function_from_signature(jit.signature, jit.params,
                                           backend))
    return cached[1], cached[2]


def _launch_target(interpreted):
    from triton.backends.compiler import GPUTarget
    if interpreted:
        return GPUTarget(*DEFAULT_TARGET)
    from triton.runtime import driver
    return driver.active.get_current_target()


def from_launch(name, jit, signature, constexprs, attrs, options):
    """A LaunchRecord of what Triton's launch path computed (its
    `_pack_args` or its compile step's arguments); CompileCheckError when
    the launch holds what a record cannot (a tuple argument)."""
    import triton
    parameters = []
    for param, kind in zip(jit.arg_names, signature.values()):
        if not isinstance(kind, str) or not (
                kind == "constexpr" or _TYPE.fullmatch(kind)):
            raise CompileCheckError(f"argument {param} is a {kind!r}")
        parameters.append([param, kind])
    try:
        values = [[list(path), encode_value(value)]
                  for path, value in constexprs.items()]
    except TypeError as e:
        raise CompileCheckError(f"a constexpr value: {e}") from None
    return LaunchRecord(
        name, parameters, values,
        [[list(path), [list(e) for e in entries]]
         for path, entries in attrs.items()],
        dict(options), triton.__version__)


def record_for_launch(kernel, named, config, target=None):
    """The LaunchRecord of launching `kernel` (what an autotuner launches:
    a JITFunction, an interpreted one, or triton.heuristics around one)
    with the arguments `named` and `config`, by Triton's own binder and
    `_pack_args`."""
    from triton.runtime.interpreter import InterpretedFunction
    layers, inner = _heuristics_and_jit(kernel)
    fn = unwrap.python_function(inner)
    jit = _jit_for(inner)
    backend, binder = _binder(jit, target or _launch_target(
        isinstance(inner, InterpretedFunction)))
    kwargs = dict(named)
    kwargs.update(config.all_kwargs())
    for layer in layers:  # as Heuristics.run computes them
        for key, heuristic in layer.values.items():
            kwargs[key] = heuristic(dict(kwargs))
    options = {k: kwargs.pop(k) for k in list(kwargs)
               if k not in jit.arg_names}
    bound, specialization, extra = binder(**kwargs, **options)
    _, signature, constexprs, attrs = jit._pack_args(
        backend, {**kwargs, **options}, bound, specialization, extra)
    return from_launch(f"{fn.__module__}:{fn.__qualname__}", jit, signature,
                       constexprs, attrs, options)


def request_for_launch(kernel, named, config):
    """The CompileRequest of a launch (see record_for_launch); None when
    this Triton cannot say (logged once per kernel)."""
    fn = unwrap.python_function(kernel)
    name = f"{fn.__module__}:{fn.__qualname__}"
    try:
        return record_for_launch(kernel, named, config).to_request()
    except Exception as e:  # another Triton's internals, an odd argument
        if name not in _unrecorded:
            _unrecorded.add(name)
            _log.info(f"autotune: {name}: no compile request recorded "
                      f"({type(e).__name__}: {e})")
        return None


# Torch's dtype names and Triton's.
_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                    "float64": "fp64", "int8": "i8", "int16": "i16",
                    "int32": "i32", "int64": "i64", "uint8": "u8",
                    "bool": "i1", "float8_e4m3fn": "fp8e4nv",
                    "float8_e5m2": "fp8e5"}
_TRITON_TO_TORCH = {v: k for k, v in _TORCH_TO_TRITON.items()}




def stand_in_arguments(fn, signature):
    """Arguments a launch of `fn` with `signature` (see launch_signature)
    would be given, for Triton's binder to specialise: a small tensor of
    the dtype, its address divisible by 16 when marked ":16" and not
    otherwise; an integer divisible by 16 or not; a float; the value."""
    import torch
    consts = set(keys.constexpr_names(fn))
    named = {}
    for name, value in signature.items():
        if name in consts or not isinstance(value, str):
            named[name] = value
            continue
        kind, aligned = (value[:-3], True) if value.endswith(":16") \
            else (value, False)
        if kind.startswith("*"):
            dtype = _TRITON_TO_TORCH.get(kind[1:])
            if dtype is None:
                raise CompileCheckError(f"{name}: no tensor of {kind}")
            base = torch.empty(2, dtype=getattr(torch, dtype))
            named[name] = base if aligned else base[1:]
        elif kind == "i1":
            named[name] = True
        elif re.fullmatch(r"[iu](8|16|32)", kind):
            named[name] = 16 if aligned else 17
        elif re.fullmatch(r"[iu]64", kind):
            named[name] = 2 ** 36 + (0 if aligned else 1)
        elif kind == "fp32":
            named[name] = 1.5
        else:
            raise CompileCheckError(f"{name}: no stand-in for {value!r}")
    return named


# -- reading -------------------------------------------------------------------

def _bad(request, what):
    return CompileCheckError(f"compile request for {request.kernel}: {what}")


def _parse_kernel(text):
    module, sep, qualname = text.partition(":")
    if not sep or not _DOTTED.fullmatch(module) or \
            not _DOTTED.fullmatch(qualname):
        return None
    return module, qualname


def _path(value):
    return isinstance(value, list) and value and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0
        for i in value)


def _parse_attrs(request, text):
    try:
        attrs = json.loads(text)
    except ValueError:
        raise _bad(request, f"{ATTRS_TOKEN} is not JSON") from None
    if not isinstance(attrs, list) or not all(
            isinstance(item, list) and len(item) == 2 and _path(item[0])
            and isinstance(item[1], list) and all(
                isinstance(e, list) and len(e) == 2 and
                isinstance(e[0], str) for e in item[1])
            for item in attrs):
        raise _bad(request, f"{ATTRS_TOKEN}: expected [[path, [[name, "
                   "value], ...]], ...]")
    return attrs


def parse_request(request):
    """The LaunchRecord a CompileRequest holds, checked; CompileCheckError
    naming what is wrong, in one line."""
    if _parse_kernel(request.kernel) is None:
        raise CompileCheckError(
            f"compile request kernel {request.kernel!r}: expected "
            "module:qualname (dotted Python names)")
    parameters, constexprs, attrs, marks = [], [], None, []
    for item in request.arguments.split():
        if item.startswith(ATTRS_TOKEN):
            attrs = _parse_attrs(request, item[len(ATTRS_TOKEN):])
            continue
        name, eq, value = item.partition("=")
        if eq and ":" not in name:
            if not name.isidentifier():
                raise _bad(request, f"argument {item!r}: expected "
                           "NAME=VALUE")
            try:
                constexprs.append([[len(parameters)], json.loads(value)])
            except ValueError:
                raise _bad(request, f"constexpr {name}: {value!r} is not "
                           "JSON") from None
            parameters.append([name, "constexpr"])
            marks.append(None)
            continue
        pieces = item.split(":")
        if len(pieces) not in (2, 3) or not pieces[0].isidentifier():
            raise _bad(request, f"argument {item!r}: expected "
                       "NAME:TYPE[:ATTR] or NAME=VALUE")
        if not _TYPE.fullmatch(pieces[1]):
            raise _bad(request, f"argument {item!r}: {pieces[1]!r} is not "
                       "a Triton type")
        parameters.append([pieces[0], pieces[1]])
        marks.append(pieces[2] if len(pieces) == 3 else None)
    options = {}
    for item in request.options.split():
        key, eq, value = item.partition("=")
        try:
            if not key.isidentifier():
                raise ValueError(key)
            options[key] = json.loads(value) if eq else None
        except ValueError:
            raise _bad(request, f"option {item!r}: expected "
                       "NAME=VALUE") from None
    for (name, kind), mark in zip(parameters, marks):
        if mark not in (None, "", "D"):
            raise _bad(request, f"argument {name}:{kind}:{mark}: attribute "
                       f"{mark!r}, expected D or nothing")
    return LaunchRecord(request.kernel, parameters, constexprs, attrs,
                        options, request.triton_version,
                        marks=None if attrs is not None else marks)


def mismatch(request, entry, modules=None, full_names=None):
    """Why `request` cannot be the launch of `entry`'s winner (a
    different kernel: by its whole "module:qualname" where `full_names`
    ({kernel name: "module:qualname"} of the tree's kernels) knows it, a
    module not among `modules` when given, another config's values or
    options), or None."""
    try:
        parsed = parse_request(request)
    except CompileCheckError as e:
        return str(e)
    qualname = _parse_kernel(parsed.kernel)[1]
    if qualname != entry.key.kernel:
        return (f"compile request names kernel {qualname}, the entry "
                f"is for {entry.key.kernel}")
    if modules is not None:
        refused = _unlisted(parsed, modules)
        if refused:
            return refused
    known = (full_names or {}).get(entry.key.kernel)
    if known is not None and parsed.kernel != known:
        return (f"compile request names kernel {parsed.kernel}, the tree's "
                f"{entry.key.kernel} is {known}")
    names = [name for name, _ in parsed.parameters]
    values = {names[path[0]]: value for path, value in parsed.constexprs}
    best = entry.best
    for key, value in best.kwargs.items():
        if key in values and values[key] != value:
            return (f"compile request has {key}={values[key]!r}, the "
                    f"winner {key}={value!r}")
    for key in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        want = getattr(best, key, None)
        if key in parsed.options and want is not None and \
                parsed.options[key] != want:
            return (f"compile request has {key}={parsed.options[key]}, the "
                    f"winner {key}={want}")
    # No version rule here: a winner's launch under another Triton is the
    # same config's launch, recorded with that Triton's version; compile
    # builds only the running Triton's requests (refusal).
    return None


def _jit_names(value):
    """Every "module:qualname" a JIT value inside `value` names."""
    if isinstance(value, dict) and set(value) == {"jit"}:
        return [value["jit"]]
    if isinstance(value, list):
        return [n for v in value for n in _jit_names(v)]
    return []


def _unlisted(record, modules):
    """Why `record` names code outside `modules` (the kernel or a JIT
    constexpr), or None."""
    names = [record.kernel] + [n for _, value in record.constexprs
                               for n in _jit_names(value)]
    listed = ", ".join(sorted(modules)) or "none given"
    for name in names:
        parsed = _parse_kernel(name) if isinstance(name, str) else None
        if parsed is None:
            return f"compile request names {name!r}: expected module:qualname"
        if parsed[0] not in modules:
            return (f"compile request names {name}, whose module is not "
                    f"among the kernel modules ({listed}): not imported")
    return None


def refusal(request, modules, triton_version):
    """Why `autotune_cache compile` will not build `request` at all (it
    is counted and named, never built wrong), or None: malformed, code
    outside `modules`, or recorded by another Triton version."""
    try:
        record = parse_request(request)
    except CompileCheckError as e:
        return str(e)
    if record.triton_version != triton_version:
        return (f"compile request recorded by Triton "
                f"{record.triton_version or 'of unknown version'}, this is "
                f"Triton {triton_version}: re-record it with a dump or an "
                "update under this Triton")
    return _unlisted(record, modules)


# -- building ------------------------------------------------------------------

def _resolve(name, modules):
    """The object "module:qualname" names, from a module among `modules`
    (None: a record this process made from its own launches, whose
    modules are loaded already)."""
    module_name, qualname = _parse_kernel(name)
    if modules is not None and module_name not in modules:
        raise CompileCheckError(f"{name}: module {module_name} is not among "
                                "the kernel modules: not imported")
    obj = sys.modules.get(module_name)
    try:
        if obj is None:
            obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise CompileCheckError(f"{name}: cannot import it ({e})") from None
    return obj


def _resolve_kernel(name, modules):
    """The kernel "module:qualname" names: the object there, or when that
    is the plain Python function (`add_one_kernel = triton.jit(add_one)`),
    the module's kernel made of it."""
    obj = _resolve(name, modules)
    if getattr(obj, "fn", None) is None and callable(obj):
        module = sys.modules.get(_parse_kernel(name)[0])
        for value in vars(module).values():
            if getattr(value, "fn", None) is not None and \
                    unwrap.python_function(value) is obj:
                return value
    return obj


def decode_value(value, modules):
    """A constexpr's JSON data as the launch's value (see encode_value)."""
    if isinstance(value, dict) and set(value) == {"jit"}:
        return unwrap.jit_function(_resolve(value["jit"], modules))
    if isinstance(value, dict) and set(value) == {"dtype"}:
        import triton.language as tl
        try:
            return tl.dtype(value["dtype"])
        except (AssertionError, TypeError, ValueError, KeyError):
            raise CompileCheckError(f"dtype {value['dtype']!r} is not a "
                                    "Triton dtype") from None
    if isinstance(value, list):
        return tuple(decode_value(v, modules) for v in value)
    return value


def _launch_options(record):
    """The options a launch hands the backend: the recorded ones plus what
    Triton's JIT adds from its knobs (debug and the like), read in this
    process as the JIT would read them in the test's."""
    from triton import knobs
    options = dict(record.options)
    options.setdefault("debug", bool(getattr(knobs.runtime, "debug", False)))
    for group, knob in (("compilation", "instrumentation_mode"),
                        ("compilation", "fpsan_homomorphic_casts")):
        holder = getattr(knobs, group, None)
        if holder is not None and hasattr(type(holder), knob):
            options.setdefault(knob, getattr(holder, knob))
    return options


def _attributes(record, jit, target, modules):
    """{path: entries} triton.compile takes: the recorded ones, or for a
    request written before they were recorded, what this Triton's binder
    computes for stand-in arguments of the recorded types and marks (the
    request's own Triton: refusal() checks the version)."""
    if record.attrs is not None:
        return {tuple(path): [list(e) for e in entries]
                for path, entries in record.attrs}
    values = {path[0]: value for path, value in record.constexprs}
    signature = {}
    for index, ((name, kind), mark) in enumerate(zip(record.parameters,
                                                     record.marks)):
        signature[name] = decode_value(values[index], modules) \
            if kind == "constexpr" else kind + (":16" if mark == "D" else "")
    named = stand_in_arguments(jit.fn, signature)
    options = {k: v for k, v in record.options.items()
               if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    relaunched = record_for_launch(jit, named, Config({}, **options),
                                   target=target)
    return _attributes(relaunched, jit, target, modules)


def source_of(record, target, modules=None, kernel=None):
    """(ASTSource, options dict) that triton.compile takes for a
    LaunchRecord on `target` (a GPUTarget); kernel: the record's kernel
    when the caller holds it (else resolved by name)."""
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction
    try:
        jit = unwrap.jit_function(kernel if kernel is not None else
                                  _resolve_kernel(record.kernel, modules))
    except AutotuneError as e:
        raise CompileCheckError(f"{record.kernel}: {e}") from None
    if not isinstance(jit, JITFunction):
        raise CompileCheckError(
            f"{record.kernel} is not a JITFunction here: compile requests "
            "are built with TRITON_INTERPRET=0")
    names = [name for name, _ in record.parameters]
    if names != list(jit.arg_names):
        raise CompileCheckError(
            f"{record.kernel}: parameters {', '.join(names)}, the kernel has "
            f"{', '.join(jit.arg_names)} (edited since the request was "
            "recorded: re-record it with a dump or update)")
    backend = make_backend(target)
    signature = {name: kind for name, kind in record.parameters}
    constexprs = {tuple(path): decode_value(value, modules)
                  for path, value in record.constexprs}
    attrs = _attributes(record, jit, target, modules)
    options = backend.parse_options(_launch_options(record))
    return ASTSource(jit, signature, constexprs, attrs), options.__dict__


def check_target(target):
    """The compile check's Target (limits) of a GPUTarget tuple."""
    arch = target[1]
    return Target(f"sm_{arch}", arch) if isinstance(arch, int) \
        else Target(str(arch), 0)


def build(task):
    """In a worker (or this process for one job): (record or
    CompileRequest, GPUTarget tuple, modules or None, import paths[,
    label]) -> the compile check's Result as a
    dict, the binary written to Triton's cache (TRITON_CACHE_DIR). The
    kernel's module is imported with TRITON_INTERPRET=0 (a GPU kernel, not
    an interpreted one); the variable is put back afterwards."""
    record, target, modules, import_paths, *label = task
    for path in reversed(import_paths or ()):
        if path not in sys.path:
            sys.path.insert(0, path)
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        result = build_record(record, tuple(target), modules)
        if label:
            result.signature = label[0]
        return dataclasses.asdict(result)
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


def build_record(record, target, modules, kernel=None):
    """A Result of building `record` (a LaunchRecord or a CompileRequest)
    for `target` (a GPUTarget tuple), resolving code among `modules`
    (None: a record of this process's own launches); kernel: the
    record's kernel when the caller holds it."""
    import triton
    from triton.backends.compiler import GPUTarget
    _quiet_fp_fusion_notice()
    limits = check_target(target)
    if isinstance(record, (tuple, list)):  # a CompileRequest, pickled
        record = CompileRequest(*record)
    result = Result(limits.name, record.kernel.rpartition(":")[2], "", "",
                    ok=True)
    try:
        if isinstance(record, CompileRequest):
            request, record = record, parse_request(record)
            if record.triton_version != triton.__version__:
                raise CompileCheckError(refusal(request, modules or (),
                                                triton.__version__))
        result.config = record.config_text()
        result.signature = record.label
        src, options = source_of(record, GPUTarget(*target), modules,
                                 kernel)
    except CompileCheckError as e:  # no compile to time
        result.ok, result.failure, result.reason = \
            False, "COMPILE_ERROR", str(e)[:300]
        return result
    except Exception as e:  # a value this Triton refuses: one line
        result.ok, result.failure = False, "COMPILE_ERROR"
        result.reason = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return result
    start = time.perf_counter()
    try:
        compiled = triton.compile(src, target=GPUTarget(*target),
                                  options=options)
    except Exception as e:  # Triton's compile errors, classified
        return _failed(result, e, start)
    return checked(result, compiled, limits, options.get("num_warps", 4),
                   start)


# -- the one pool --------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent):
    """Worker initializer: the kernel delivers SIGKILL when the process
    that started this worker ends, however it ends (a SIGKILLed compile
    leaves no worker holding hundreds of MB)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown
        pass
    if os.getppid() != parent:  # the parent ended before prctl
        os._exit(1)


def run_pool(function, tasks, jobs, done=None, apart=False):
    """function over tasks, in min(jobs, len(tasks)) spawned processes
    (which start with TRITON_INTERPRET=0 and die with this one), or in
    this process for one job; results in task order. done(index, result)
    is called as each finishes. apart: in a spawned process even for
    one job."""
    results = [None] * len(tasks)
    if not tasks:
        return results
    if not apart and (jobs <= 1 or len(tasks) <= 1):
        for i, task in enumerate(tasks):
            results[i] = function(task)
            if done:
                done(i, results[i])
        return results
    ctx = multiprocessing.get_context("spawn")
    env_before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"  # the spawned workers start so
    try:
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(jobs, len(tasks)), mp_context=ctx,
                initializer=_die_with_parent,
                initargs=(os.getpid(),)) as pool:
            futures = {pool.submit(function, task): i
                       for i, task in enumerate(tasks)}
            for future in concurrent.futures.as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if done:
                    done(i, results[i])
    finally:
        if env_before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = env_before
    return results
