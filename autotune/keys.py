"""Cache keys: device key, kernel fingerprint and fusion signature.

A cache key is (device key, kernel fingerprint, fusion signature, key
version). The fingerprint hashes the syntax tree of the kernel and of every
@triton.jit function it calls, so editing a kernel or a helper makes its old
entries miss instead of reusing a config tuned for other code, while
comments, docstrings, blank lines and formatting (a formatter run) do not.
"""
import ast
import hashlib
import inspect
import textwrap
import types

from autotune.records import KEY_VERSION, CacheKey

_FINGERPRINTS = {}

# Hashed first: fingerprints of different schemes never collide, so an entry
# keyed by an older scheme is a miss (and `autotune_cache rekey` moves it),
# never a hit for other code. The key version (records.KEY_VERSION) is not
# bumped for a new scheme: the key's fields and their meaning are the same,
# and a bump would make every entry unusable instead of re-keyable.
FINGERPRINT_SCHEME = b"ast-v2"


def python_function(kernel):
    """The Python function behind a JITFunction, an InterpretedFunction
    (TRITON_INTERPRET=1, which has no cache_key) or a plain function."""
    fn = getattr(kernel, "fn", None)
    return fn if isinstance(fn, types.FunctionType) else kernel


def _is_jit(obj):
    return isinstance(getattr(obj, "fn", None), types.FunctionType) and (
        hasattr(obj, "arg_names") or hasattr(obj, "src"))


def _source_text(fn):
    """The function's source from `def` on: decorators (the autotune config
    list among them) are not the kernel's code."""
    try:
        lines = inspect.getsource(fn).splitlines()
        while lines and not lines[0].lstrip().startswith(("def ",
                                                          "async def ")):
            lines.pop(0)
        return "\n".join(lines)
    except (OSError, TypeError):
        src = getattr(fn, "src", None)
        if src is None:
            # No source to hash: fall back to the bytecode, still changes
            # when the function changes.
            code = fn.__code__
            return repr((code.co_code, code.co_consts, code.co_names))
        return src


def _referenced_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _referenced_names(const)
    return names


class _DropDocstrings(ast.NodeTransformer):
    """Removes statements that are a bare string (docstrings, and strings
    used as comments): evaluating them has no effect."""

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, [
                    stmt for stmt in body
                    if not (isinstance(stmt, ast.Expr)
                            and isinstance(stmt.value, ast.Constant)
                            and isinstance(stmt.value.value, str))])
        return node


def _syntax_tree(fn):
    """The function's syntax tree without decorators and docstrings, as
    text without positions: the same for any formatting or comments, and
    different for any change to names, constants, operators, defaults
    (constexpr defaults among them) or the calls made."""
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        text = getattr(fn, "src", None)
        if text is None:
            return _source_text(fn)  # the bytecode: no source to parse
        text = textwrap.dedent(text)
    try:
        module = ast.parse(text)
    except SyntaxError:
        return _source_text(fn)
    defs = [node for node in module.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return _source_text(fn)
    tree = defs[0]
    tree.decorator_list = []
    tree = _DropDocstrings().visit(tree)
    return ast.dump(tree, annotate_fields=True, include_attributes=False)


def kernel_fingerprint(kernel):
    """16-hex-digit hash of the kernel and the jit functions it calls, from
    their syntax trees (FINGERPRINT_SCHEME).

    Globals the kernel reads that are plain constants (ints, floats, strings,
    tl.constexpr values) are hashed too: they are baked into the code. The
    module's name is not: a file run as a script (`__main__`) and imported
    by name (a test, `verify --kernel_module`) holds the same kernel.
    """
    cached = _FINGERPRINTS.get(id(kernel))
    if cached is not None and cached[0] is kernel:
        return cached[1]
    fingerprint = _fingerprint(kernel, _syntax_tree, FINGERPRINT_SCHEME)
    _FINGERPRINTS[id(kernel)] = (kernel, fingerprint)
    return fingerprint


def source_text_fingerprint(kernel):
    """The previous scheme: the same hash over the functions' source text,
    so comments and formatting counted. Kept for `autotune_cache rekey`,
    which moves entries keyed by it to kernel_fingerprint when the source
    is the one they were tuned for."""
    return _fingerprint(kernel, _source_text, None)


def _fingerprint(kernel, code_of, scheme):
    parts = []
    seen = set()
    stack = [kernel]
    while stack:
        obj = stack.pop()
        fn = python_function(obj)
        where = (getattr(fn, "__module__", "?"), fn.__qualname__)
        if where in seen:
            continue
        seen.add(where)
        name = fn.__qualname__
        parts.append((name, code_of(fn)))
        env = getattr(fn, "__globals__", {})
        for ref in sorted(_referenced_names(fn.__code__)):
            value = env.get(ref)
            if value is None:
                continue
            if _is_jit(value):
                stack.append(value)
            elif isinstance(value, (int, float, str, bool)):
                parts.append((f"{name}:{ref}", repr(value)))
            elif type(value).__name__ == "constexpr":
                parts.append((f"{name}:{ref}", repr(getattr(value, "value",
                                                            value))))
    digest = hashlib.sha256()
    if scheme is not None:
        digest.update(scheme + b"\0")
    for name, text in sorted(parts):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def fusion_signature(key_values, dtypes, constants):
    """Canonical signature string: key argument values, tensor dtypes, and
    the constexpr arguments that are not tuned. Readable on purpose: it is
    what a reviewer sees in a cache diff.

    key_values / constants: sequences of (name, value); dtypes: sequence of
    (name, dtype).
    """
    parts = [",".join(f"{k}={v}" for k, v in key_values)]
    parts.append("dtypes=" + ",".join(f"{k}:{_dtype_name(d)}"
                                      for k, d in dtypes))
    if constants:
        parts.append(",".join(f"{k}={v}" for k, v in constants))
    return ";".join(parts)


def parse_signature_keys(signature):
    """Key-argument values of a signature as {name: number}, for the search
    of the nearest tuned shape. Non-numeric values are dropped."""
    head = signature.split(";", 1)[0]
    out = {}
    for item in head.split(","):
        name, sep, value = item.partition("=")
        if not sep:
            continue
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def signature_shape_class(signature):
    """Everything of a signature but the key values: fusions that differ
    only in shape share it, and may reuse each other's configs."""
    head, _, rest = signature.partition(";")
    names = ",".join(item.partition("=")[0] for item in head.split(","))
    return names + ";" + rest


def make_key(device, kernel_name, fingerprint, signature):
    return CacheKey(device, kernel_name, fingerprint, signature, KEY_VERSION)


def file_name(key):
    """Per-fusion cache file name: the kernel name, for people, and a hash of
    the whole key, for uniqueness."""
    digest = hashlib.sha256("\0".join(
        [key.device, key.kernel, key.fingerprint, key.signature,
         str(key.key_version)]).encode()).hexdigest()[:32]
    # ASCII only, at most 64 bytes: with the hash, far below any file
    # system's 255-byte name limit whatever the kernel is called.
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_"
                   for c in key.kernel[:64])
    return f"{safe}.{digest}.textproto"


def constexpr_names(fn):
    """Names of the Python function's tl.constexpr parameters, in order
    (the annotation may be the class or its name as a string)."""
    out = []
    for name, param in inspect.signature(fn).parameters.items():
        ann = param.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", "")
        if "constexpr" in str(text):
            out.append(name)
    return out
