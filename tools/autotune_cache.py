"""Command-line entry point of the cache tool; see autotune/cache_tool.py
or run with --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cache_tool import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
