"""Python imports this module at startup when its directory is on sys.path
(the //:triton_autotune_dropin Bazel target puts it there): from then on
triton.autotune builds rules_autotune's autotuner (autotune.install()), so
@triton.autotune kernels are tuned, cached and loaded with no edit.

Whatever sitecustomize module this one shadows is run afterwards.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _install():
    try:
        import autotune
        autotune.install()
    except ImportError as e:
        print(f"autotune: triton.autotune drop-in not installed: {e}",
              file=sys.stderr)


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path
            if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_install()
_run_shadowed_sitecustomize()
