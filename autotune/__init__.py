"""rules_autotune runtime: persisted Triton autotuning.

Import this package before defining @triton.jit kernels: with no GPU visible
it selects Triton's interpreter (TRITON_INTERPRET=1), which Triton reads when
a kernel is decorated.

The runtime (and with it torch and triton) is imported on first use of one
of its names, so that the cache tools, which only read and write files,
start in a fraction of a second.
"""
import importlib as _importlib
import os as _os


def _gpu_driver_visible():
    """Whether a GPU driver's device files exist and are not hidden by the
    *_VISIBLE_DEVICES variables; a machine without them has no GPU for
    Triton, and is known so without importing torch."""
    hidden = ("", "-1")
    nvidia = (_os.path.exists("/dev/nvidiactl")
              and _os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip()
              not in hidden)
    amd = (_os.path.exists("/dev/kfd")
           and _os.environ.get("HIP_VISIBLE_DEVICES", "0").strip()
           not in hidden)
    return nvidia or amd


def _backend_flag():
    """--autotune_backend's value in AUTOTUNE_FLAGS (the last one wins), or
    None. Read here, before any kernel is decorated: Triton decides at
    decoration time whether a kernel is interpreted."""
    import shlex
    try:
        argv = shlex.split(_os.environ.get("AUTOTUNE_FLAGS", ""))
    except ValueError:
        return None  # the flags parser reports it, with context
    value = None
    for i, arg in enumerate(argv):
        name, eq, rest = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name != "autotune_backend":
            continue
        if eq:
            value = rest
        elif i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _select_interpreter_early():
    if _os.environ.get("TRITON_INTERPRET") is not None:
        return
    backend = _backend_flag()
    if backend == "interpreter":
        _os.environ["TRITON_INTERPRET"] = "1"
        return
    if backend == "gpu":
        return
    if _gpu_driver_visible():
        # A driver is there; torch says whether it has a usable device.
        try:
            import torch
            if torch.cuda.is_available():
                return
        except ImportError:
            pass
    _os.environ["TRITON_INTERPRET"] = "1"


_select_interpreter_early()

_EXPORTS = {
    "CacheKey": "autotune.records", "Candidate": "autotune.records",
    "Config": "autotune.records", "Entry": "autotune.records",
    "Provenance": "autotune.records",
    "CacheFileError": "autotune.errors",
    "dump_results": "autotune.codec",
    "load_results": "autotune.codec",
    "AutotuneCacheMissError": "autotune.runtime.session",
    "AutotuneError": "autotune.errors", "Autotuner": "autotune.runtime.autotuner",
    "autotune": "autotune.runtime.autotuner", "configure": "autotune.runtime.session",
    "session": "autotune.runtime.session", "tune": "autotune.runtime.autotuner",
    "Space": "autotune.search.space",
    "device": "autotune.runtime.session",
    "AutotuneArgumentError": "autotune.runtime.autotuner",
    "AutotuneWarning": "autotune.runtime.autotuner",
    "install": "autotune.runtime.autotuner", "uninstall": "autotune.runtime.autotuner",
}

__all__ = sorted(_EXPORTS)


_SUBMODULES = ("cache", "cli", "codec", "errors", "flags", "keys", "kernels",
               "measure", "records", "runtime", "search")


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


def _install_if_flagged():
    """--autotune_dropin in AUTOTUNE_FLAGS: triton.autotune builds this
    project's autotuner from `import autotune` on (see install())."""
    import shlex
    try:
        argv = shlex.split(_os.environ.get("AUTOTUNE_FLAGS", ""))
    except ValueError:
        return  # the session reports the malformed value
    if "--autotune_dropin" in argv or "--autotune_dropin=true" in argv:
        __getattr__("install")()


_install_if_flagged()
