"""Command-line entry point of regenerate; see autotune/cli/regenerate.py
or run with --help.

    bazel run @rules_autotune//tools:regenerate [-- PATTERN ...]
    python3 RULES_AUTOTUNE/tools/regenerate.py [PATTERN ...]

Under `bazel run`, the workspace is the one bazel was run in
(BUILD_WORKSPACE_DIRECTORY) and relative patterns mean what they mean in
the directory it was run from.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.regenerate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
