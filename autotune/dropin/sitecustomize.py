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
    except SystemExit as e:
        # The package's own exits at import (a Bazel test whose cache does
        # not exist yet, AUTOTUNE_FLAGS=--help) have said why in one line:
        # raised out of site's start-up they would end in "Fatal Python
        # error: init_import_site" and a traceback. Python is not running
        # anything yet; exit with their status.
        code = e.code if isinstance(e.code, int) else (e.code is not None)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


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
