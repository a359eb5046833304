"""The zero-edit path: install() makes triton.autotune build this project's
Autotuner, and routes the launches of kernels that Triton's own autotune
decorated earlier to one built from the same arguments (configs, key,
hooks, pruning). AUTOTUNE_FLAGS=--autotune_dropin (or the drop-in's
sitecustomize.py) calls it at start-up."""
import sys
import threading

from autotune import log as logs
from autotune.runtime.autotuner import (Autotuner, autotune,
                                         refuse_cuda_graph_restore)

log = logs.get("runtime")

_INSTALLED = {}
_INSTALL_LOCK = threading.Lock()


def triton_autotuner_class():
    """Triton's own Autotuner class, or None when nothing has imported
    Triton's autotuner (then no kernel can be one; Triton is not imported
    here for the question)."""
    module = sys.modules.get("triton.runtime.autotuner")
    return getattr(module, "Autotuner", None)


def is_triton_autotuner(value):
    """Whether `value` is a kernel that Triton's own triton.autotune (or a
    library's subclass of Triton's Autotuner) decorated: this project's
    Autotuner derives from Triton's, and is not one."""
    cls = triton_autotuner_class()
    return cls is not None and isinstance(value, cls) and \
        not isinstance(value, Autotuner)


def from_triton_autotuner(triton_autotuner):
    """This project's autotuner for a kernel that triton.autotune already
    decorated: the same configs, key, hooks and pruning."""
    t = triton_autotuner
    # Triton folded a CUDA graph into _do_bench: refused as ours is.
    refuse_cuda_graph_restore(getattr(t.fn, "__name__", "kernel"),
                              getattr(t, "use_cuda_graph", False),
                              getattr(t, "restore_value", None))
    return Autotuner(
        t.fn, t.arg_names, t.configs, getattr(t, "keys", ()),
        getattr(t, "reset_to_zero", None), getattr(t, "restore_value", None),
        pre_hook=t.pre_hook if getattr(t, "user_defined_pre_hook", False)
        else None,
        post_hook=t.post_hook if getattr(t, "user_defined_post_hook", False)
        else None,
        prune_configs_by={
            "perf_model": getattr(t, "perf_model", None),
            "top_k": getattr(t, "configs_top_k", 1.0),
            "early_config_prune": getattr(t, "early_config_prune", None)},
        # Triton folded warmup/rep/use_cuda_graph into _do_bench already.
        do_bench=getattr(t, "_do_bench", None),
        cache_results=getattr(t, "cache_results", False))


def _delegate(triton_autotuner):
    tuned = triton_autotuner.__dict__.get("_rules_autotune")
    if tuned is None:
        tuned = triton_autotuner.__dict__.setdefault(
            "_rules_autotune", from_triton_autotuner(triton_autotuner))
    return tuned


def wraps_a_triton_kernel(triton_autotuner):
    """Whether a @triton.jit kernel (a JITFunction, or an InterpretedFunction
    under the interpreter) is under Triton's autotuner, through any
    triton.heuristics layers. A wrapper of another kind (a test double, a
    library's own launcher) stays with Triton's own autotuner: this
    project fingerprints and launches kernels only."""
    from triton.runtime.jit import JITFunction
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        InterpretedFunction = JITFunction
    obj = getattr(triton_autotuner, "fn", None)
    for _ in range(32):  # a .fn chain that loops is not a kernel either
        if isinstance(obj, (JITFunction, InterpretedFunction)):
            return True
        obj = getattr(obj, "fn", None)
        if obj is None:
            return False
    return False


def _left_to_triton(triton_autotuner):
    """True (after one note per autotuner) when Triton's own autotuner runs
    this one (see wraps_a_triton_kernel)."""
    verdict = triton_autotuner.__dict__.get("_rules_autotune_skipped")
    if verdict is None:
        verdict = not wraps_a_triton_kernel(triton_autotuner)
        triton_autotuner.__dict__["_rules_autotune_skipped"] = verdict
        if verdict:
            inner = getattr(triton_autotuner, "fn", None)
            what = " ".join(part for part in (
                type(inner).__name__, str(getattr(inner, "__name__", "")))
                if part)
            log.info(f"autotune: note: Triton's autotuner wraps "
                     f"{logs.printable(what)}, not a @triton.jit kernel; left "
                     "to Triton's own autotuner (not cached)")
    return verdict


def _triton_run(self, *args, **kwargs):
    if _left_to_triton(self):
        return _INSTALLED["run"](self, *args, **kwargs)
    tuned = _delegate(self)
    try:
        return tuned.run(*args, **kwargs)
    finally:
        # What Triton's run leaves on the object, for code that reads it
        # (a library's own Autotuner subclass, autotuning listeners).
        self.best_config = tuned.best_config
        # Read by users of Triton's autotuner after a tuning launch.
        self.configs_timings = tuned.configs_timings
        self.bench_time = tuned.bench_time


def _triton_warmup(self, *args, **kwargs):
    if _left_to_triton(self):
        original = _INSTALLED["warmup"]
        return None if original is None else original(self, *args, **kwargs)
    return _delegate(self).warmup(*args, **kwargs)


def install():
    """Makes triton.autotune build this project's Autotuner, and routes the
    launches of kernels that Triton's autotune decorated before (imported
    earlier, or through a name bound before) to one built from the same
    arguments. Idempotent; undone by uninstall()."""
    import triton
    import triton.runtime
    from triton.runtime import autotuner as triton_autotuner
    with _INSTALL_LOCK:
        if _INSTALLED:
            return
        original = triton_autotuner.autotune
        cls = triton_autotuner.Autotuner
        _INSTALLED.update(autotune=original, run=cls.__dict__["run"],
                          warmup=cls.__dict__.get("warmup"))
        for module in (triton, triton.runtime, triton_autotuner):
            if getattr(module, "autotune", None) is original:
                module.autotune = autotune
        cls.run = _triton_run
        cls.warmup = _triton_warmup


def uninstall():
    """Undoes install()."""
    import triton
    import triton.runtime
    from triton.runtime import autotuner as triton_autotuner
    with _INSTALL_LOCK:
        if not _INSTALLED:
            return
        for module in (triton, triton.runtime, triton_autotuner):
            if getattr(module, "autotune", None) is autotune:
                module.autotune = _INSTALLED["autotune"]
        cls = triton_autotuner.Autotuner
        cls.run = _INSTALLED["run"]
        if _INSTALLED["warmup"] is None:
            del cls.warmup
        else:
            cls.warmup = _INSTALLED["warmup"]
        _INSTALLED.clear()


def installed():
    return bool(_INSTALLED)


__all__ = ["from_triton_autotuner", "install", "installed",
           "is_triton_autotuner", "triton_autotuner_class", "uninstall"]
