"""Counts Triton's compiles in every Python process the GPU check starts
(bench/gpu_check.py puts this folder first on PYTHONPATH for its
sections): where GPU_CHECK_COMPILE_LOG names a folder, each call of
Triton's compile() appends one line to <folder>/<pid>.log, "hit" when
Triton found the binary in its on-disk cache, "miss" when it compiled it
(Triton's knobs.compilation.listener, Triton 3.4 and later). Triton is not
imported for it: the listener is set as triton.knobs is first imported.
Then the next sitecustomize on the path, if there is one, runs as it would
have without this one."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
LOG_ENV = "GPU_CHECK_COMPILE_LOG"


def _listener(folder):
    def listener(*args, cache_hit=False, **kwargs):
        # The pid of the process compiling (a forked one has its own).
        with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as f:
            f.write("hit\n" if cache_hit else "miss\n")
    return listener


class _SetListener(importlib.abc.MetaPathFinder):
    """Finds triton.knobs as the other finders do, and sets the listener
    once it has run."""

    def __init__(self, folder):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if name != "triton.knobs":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or \
                not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        folder = self.folder

        def exec_module(module):
            run(module)
            compilation = getattr(module, "compilation", None)
            if compilation is not None and \
                    getattr(compilation, "listener", "absent") is None:
                compilation.listener = _listener(folder)
        spec.loader.exec_module = exec_module
        return spec


def _install():
    folder = os.environ.get(LOG_ENV)
    if not folder or not os.path.isdir(folder):
        return
    knobs = sys.modules.get("triton.knobs")
    if knobs is not None:  # imported already
        if getattr(knobs.compilation, "listener", "absent") is None:
            knobs.compilation.listener = _listener(folder)
        return
    sys.meta_path.insert(0, _SetListener(folder))


def _run_next_sitecustomize():
    others = [p for p in sys.path
              if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
_run_next_sitecustomize()
