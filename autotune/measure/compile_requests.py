"""Compile requests: what building a cached winner's binary needs, recorded
from the launches that used it, and built again from the record alone.

A request holds one launch as Triton's launcher specialises it: each
parameter's type and its specialisation attribute (a pointer or integer
divisible by 16 is marked "D"), every constexpr's value (tuned and
untuned, heuristics applied), the launch options and the Triton version.
It is derived with Triton's own binder (`create_function_from_signature`
over a CUDA backend, then `JITFunction._pack_args`), so a run on the
interpreter records what a GPU launch of the same arguments computes; on
a GPU the active target's backend is used. The request is independent of
the GPU target: `build_source` rebuilds the launch's signature,
constexprs and attributes for any CUDA target, for
`triton.compile`, which writes exactly the files the JIT would write,
under the same cache key (tests/test_compiled_kernels.py checks this key
against the launch's own with an sm_90 driver stand-in).

The two strings (records.CompileRequest):

    arguments: "x_ptr:*fp32:D y_ptr:*fp32:D n_cols:i32: BLOCK=1024"
    options:   "num_ctas=1 num_stages=2 num_warps=4"

NAME:TYPE:ATTR for a runtime argument (no third part: not specialised, as
for a float), NAME=JSON for a constexpr (a dtype as {"dtype": "fp32"}, a
@triton.jit function as {"jit": "module:qualname"}; spaces inside a JSON
string are written \\u0020 so that arguments split on spaces).
"""
import dataclasses
import importlib
import json

from autotune import log as logs
from autotune import unwrap
from autotune.errors import CompileCheckError
from autotune.records import CompileRequest

# The target whose backend specialises an interpreter run's launches: any
# CUDA target gives the same specialisation.
DEFAULT_TARGET = ("cuda", 90, 32)
_log = logs.get("runtime")
_JITS = {}
_BINDERS = {}
_failed = set()


# -- recording -----------------------------------------------------------------

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


def _binder(jit, interpreted):
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    target = None
    if not interpreted:
        from triton.runtime import driver
        target = driver.active.get_current_target()
    cached = _BINDERS.get((id(jit), interpreted))
    if cached is None or cached[0] is not jit:
        from triton.backends.compiler import GPUTarget
        backend = make_backend(target or GPUTarget(*DEFAULT_TARGET))
        cached = _BINDERS[(id(jit), interpreted)] = (
            jit, backend,
            create_function_from_signature(jit.signature, jit.params,
                                           backend))
    return cached[1], cached[2]


def _encode_value(value):
    """A constexpr value as JSON text without spaces."""
    kind = type(value).__name__
    if kind == "constexpr":
        value = value.value
        kind = type(value).__name__
    if kind == "JITFunction":
        value = {"jit": f"{value.fn.__module__}:{value.fn.__qualname__}"}
    elif kind == "dtype" and hasattr(value, "name"):
        value = {"dtype": value.name}
    text = json.dumps(value, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=True)
    return text.replace(" ", "\\u0020")


def _decode_value(text):
    value = json.loads(text)
    if isinstance(value, dict) and set(value) == {"jit"}:
        module, _, qualname = value["jit"].partition(":")
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return unwrap.jit_function(obj)
    if isinstance(value, dict) and set(value) == {"dtype"}:
        import triton.language as tl
        return tl.dtype(value["dtype"])
    return value


def _options_text(options):
    return " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(options.items()))


def request_for_launch(kernel, named, config):
    """The CompileRequest of launching `kernel` (what an autotuner launches:
    a JITFunction, an interpreted one, or triton.heuristics around one)
    with the arguments `named` and `config`; None when this Triton cannot
    say (logged once per kernel)."""
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    layers, inner = _heuristics_and_jit(kernel)
    fn = unwrap.python_function(inner)
    name = f"{fn.__module__}:{fn.__qualname__}"
    try:
        jit = _jit_for(inner)
        backend, binder = _binder(jit, isinstance(inner, InterpretedFunction))
        kwargs = dict(named)
        kwargs.update(config.all_kwargs())
        for layer in layers:  # as Heuristics.run computes them
            for key, heuristic in layer.values.items():
                kwargs[key] = heuristic(dict(kwargs))
        options = {k: kwargs.pop(k) for k in list(kwargs)
                   if k not in jit.arg_names}
        bound, specialization, extra = binder(**kwargs, **options)
        _, signature, constexprs, _ = jit._pack_args(
            backend, {**kwargs, **options}, bound, specialization, extra)
    except Exception as e:  # another Triton's internals, an odd argument
        if name not in _failed:
            _failed.add(name)
            _log.info(f"autotune: {name}: no compile request recorded "
                      f"({type(e).__name__}: {e})")
        return None
    parts = []
    for index, (param, (kind, attr)) in enumerate(
            zip(jit.arg_names, specialization)):
        if kind == "constexpr":
            parts.append(f"{param}={_encode_value(constexprs[(index,)])}")
        elif not isinstance(kind, str) or ":" in kind or " " in kind:
            if name not in _failed:
                _failed.add(name)
                _log.info(f"autotune: {name}: no compile request recorded "
                          f"(argument {param} is a {kind!r})")
            return None
        else:
            parts.append(f"{param}:{kind}" + (
                f":{attr}" if isinstance(attr, str) else ""))
    return CompileRequest(name, " ".join(parts), _options_text(options),
                          triton.__version__)


# -- reading -------------------------------------------------------------------

@dataclasses.dataclass
class Parsed:
    module: str
    qualname: str
    arguments: list        # (name, type or None, attr or None, value)
    options: dict


def parse_request(request):
    """A CompileRequest's strings, checked; CompileCheckError naming what is
    wrong."""
    module, sep, qualname = request.kernel.partition(":")
    if not sep or not module or not qualname:
        raise CompileCheckError(f"compile request kernel {request.kernel!r}: "
                                "expected module:qualname")
    arguments = []
    for item in request.arguments.split():
        name, eq, value = item.partition("=")
        if eq and ":" not in name:
            try:
                arguments.append((name, "constexpr", None,
                                  json.loads(value)))
            except ValueError:
                raise CompileCheckError(
                    f"compile request for {request.kernel}: constexpr "
                    f"{name}: {value!r} is not JSON") from None
            continue
        pieces = item.split(":")
        if len(pieces) not in (2, 3) or not pieces[0] or not pieces[1]:
            raise CompileCheckError(
                f"compile request for {request.kernel}: argument {item!r}: "
                "expected NAME:TYPE[:ATTR] or NAME=VALUE")
        arguments.append((pieces[0], pieces[1],
                          pieces[2] if len(pieces) == 3 else None, None))
    options = {}
    for item in request.options.split():
        key, eq, value = item.partition("=")
        try:
            options[key] = json.loads(value) if eq else None
        except ValueError:
            raise CompileCheckError(
                f"compile request for {request.kernel}: option {item!r}: "
                "expected NAME=VALUE") from None
    return Parsed(module, qualname, arguments, options)


def mismatch(request, entry):
    """Why `request` cannot be the launch of `entry`'s winner (a
    different kernel, another config's values or options), or None."""
    try:
        parsed = parse_request(request)
    except CompileCheckError as e:
        return str(e)
    if parsed.qualname.rpartition(".")[2] != entry.key.kernel:
        return (f"compile request names kernel {parsed.qualname}, the entry "
                f"is for {entry.key.kernel}")
    values = {name: value for name, kind, _, value in parsed.arguments
              if kind == "constexpr"}
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
    version = entry.provenance.triton_version
    if version and request.triton_version and \
            request.triton_version != version:
        return (f"compile request recorded under Triton "
                f"{request.triton_version}, the entry tuned under {version}")
    return None


# -- building ------------------------------------------------------------------

def _launch_options(parsed):
    """The options a launch hands the backend: the recorded ones plus what
    Triton's JIT adds from its knobs (debug and the like), read in this
    process as the JIT would read them in the test's."""
    from triton import knobs
    options = dict(parsed.options)
    options.setdefault("debug", bool(getattr(knobs.runtime, "debug", False)))
    for group, knob in (("compilation", "instrumentation_mode"),
                        ("compilation", "fpsan_homomorphic_casts")):
        holder = getattr(knobs, group, None)
        if holder is not None and hasattr(type(holder), knob):
            options.setdefault(knob, getattr(holder, knob))
    return options


def build_source(request, target):
    """(ASTSource, options dict) that triton.compile takes for `request`
    on `target` (a GPUTarget): the launch's own signature, constexprs and
    attributes."""
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend
    parsed = parse_request(request)
    try:
        obj = importlib.import_module(parsed.module)
        for part in parsed.qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise CompileCheckError(f"compile request for {request.kernel}: "
                                f"cannot import it ({e})") from None
    jit = unwrap.jit_function(obj)
    from triton.runtime.jit import JITFunction
    if not isinstance(jit, JITFunction):
        raise CompileCheckError(
            f"{request.kernel} is not a JITFunction here: compile requests "
            "are built with TRITON_INTERPRET=0")
    names = [name for name, *_ in parsed.arguments]
    if names != list(jit.arg_names):
        raise CompileCheckError(
            f"compile request for {request.kernel}: parameters "
            f"{', '.join(names)}, the kernel has "
            f"{', '.join(jit.arg_names)} (edited since the request was "
            "recorded: re-record it with a dump or update)")
    backend = make_backend(target)
    signature, constexprs, attrs = {}, {}, {}
    for index, (name, kind, attr, value) in enumerate(parsed.arguments):
        signature[name] = kind
        if kind == "constexpr":
            constexprs[(index,)] = _decode_value(json.dumps(value))
            attrs[(index,)] = backend.parse_attr("")
        elif attr is not None:
            attrs[(index,)] = backend.parse_attr(attr)
    options = backend.parse_options(_launch_options(parsed))
    return ASTSource(jit, signature, constexprs, attrs), options.__dict__
