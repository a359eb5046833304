"""Command-line entry point of the cache tool; see autotune/cli/cache_tool.py
or run with --help.

Under `bazel run`, relative paths are taken from the directory bazel was
run in (not the runfiles tree); --kernel_module imports from the root of
the workspace bazel was run in.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.cache_tool import main  # noqa: E402

if __name__ == "__main__":
    if os.environ.get("BUILD_WORKING_DIRECTORY"):
        os.chdir(os.environ["BUILD_WORKING_DIRECTORY"])
    sys.exit(main())
