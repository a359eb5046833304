"""rules_autotune runtime: persisted Triton autotuning.

Import this package before defining @triton.jit kernels: with no GPU visible
it selects Triton's interpreter (TRITON_INTERPRET=1), which Triton reads when
a kernel is decorated.

The runtime (and with it torch and triton) is imported on first use of one
of its names, so that the cache tools, which only read and write files,
start in a fraction of a second.
"""
import importlib as _importlib

try:
    from autotune import flags as _flags
except ModuleNotFoundError as _missing:
    # absl-py or protobuf is not installed: under Bazel with Bzlmod, the
    # packages come in through the python_deps flag.
    if (_missing.name or "").partition(".")[0] not in ("absl", "google"):
        raise
    raise ImportError(
        f"rules_autotune: the Python package {_missing.name!r} cannot be "
        "imported (autotune needs absl-py and protobuf): install it, or "
        "under Bazel point --@rules_autotune//:python_deps at a py_library "
        "that provides it (see docs/bazel.md#python-packages)") from None
from autotune.measure import backends as _backends
from autotune.binaries import triton_cache as _triton_cache


_BACKEND, _DROPIN, _COMPILED, _REQUIRE_COMPILED = \
    _flags.import_time_choices()
_backends.select_interpreter_early(_BACKEND)
# Before any compile: a writable Triton cache under Bazel, compiled kernels
# served from --autotune_compiled_kernels.
_triton_cache.configure_environment(_COMPILED, require=_REQUIRE_COMPILED)

_EXPORTS = {
    "CacheKey": "autotune.records", "Candidate": "autotune.records",
    "Config": "autotune.records", "Entry": "autotune.records",
    "Provenance": "autotune.records",
    "CacheFileError": "autotune.errors",
    "dump_results": "autotune.codec",
    "load_results": "autotune.codec",
    "AutotuneCacheMissError": "autotune.errors",
    "AutotuneError": "autotune.errors", "Autotuner": "autotune.runtime.autotuner",
    "autotune": "autotune.runtime.autotuner", "configure": "autotune.runtime.session",
    "session": "autotune.runtime.session", "tune": "autotune.runtime.autotuner",
    "Space": "autotune.search.space",
    "device": "autotune.runtime.session",
    "AutotuneArgumentError": "autotune.errors",
    "AutotuneWarning": "autotune.errors",
    "install": "autotune.runtime.triton_patch",
    "uninstall": "autotune.runtime.triton_patch",
}

__all__ = sorted(_EXPORTS)


_SUBMODULES = ("binaries", "cache", "cli", "codec", "errors", "flags", "host",
               "keys", "kernels", "measure", "records", "runtime", "search")


def __getattr__(name):
    if name in _SUBMODULES:  # autotune.measure without importing it first
        return _importlib.import_module(f"autotune.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


if _DROPIN:  # --autotune_dropin: triton.autotune builds this project's
    __getattr__("install")()  # autotuner from `import autotune` on
