"""Entry point of rules_autotune's Bazel tools and autotune_cache_test.

    require_python_deps.py [--packages=absl-py,protobuf,...] SCRIPT [ARG...]

Checks that the Python packages SCRIPT needs can be imported, then runs
SCRIPT as __main__ with ARG... . When one is missing (under Bzlmod,
rules_python's interpreter has no site-packages), it prints one line that
names the missing packages, the `python_deps` flag that provides them and
the docs section, and exits 2, instead of a ModuleNotFoundError traceback
from deep inside the runtime.

SCRIPT is a path relative to the working directory (a `$(rootpath)`: the
working directory of `bazel run` and `bazel test` is the main repository's
runfiles directory). Standard library only: it runs before any of them.
"""
import importlib.util
import os
import runpy
import sys

FLAG = "--@rules_autotune//:python_deps"
DOCS = "docs/bazel.md#python-packages"
DEFAULT_PACKAGES = ("absl-py", "protobuf")
# Distribution name -> the module that shows it is installed.
MODULES = {
    "absl-py": "absl.flags",
    "protobuf": "google.protobuf",
    "torch": "torch",
    "triton": "triton",
    "numpy": "numpy",
}


def missing_packages(packages):
    """The distributions among packages whose module cannot be found."""
    missing = []
    for package in packages:
        module = MODULES.get(package, package)
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            missing.append(package)
    return missing


def message(missing, script):
    return (f"rules_autotune: {os.path.basename(script)} needs the Python "
            f"package(s) {', '.join(missing)}, which {sys.executable} "
            f"cannot import: point {FLAG} at a py_library that provides "
            f"them (see {DOCS})")


def main(argv):
    packages = list(DEFAULT_PACKAGES)
    while argv and argv[0].startswith("--packages="):
        packages = [p for p in argv.pop(0).split("=", 1)[1].split(",") if p]
    if not argv:
        print("require_python_deps: usage: require_python_deps.py "
              "[--packages=A,B] SCRIPT [ARG...]", file=sys.stderr)
        return 2
    script, args = argv[0], argv[1:]
    missing = missing_packages(packages)
    if missing:
        print(message(missing, script), file=sys.stderr)
        return 2
    if not os.path.isfile(script):
        print(f"require_python_deps: {script}: no such file (working "
              f"directory {os.getcwd()})", file=sys.stderr)
        return 2
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
