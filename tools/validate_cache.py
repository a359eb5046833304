"""Validates checked-in caches (run by autotune_cache_test on the CPU).

    validate_cache.py CACHE... [--kernel_module=MODULE ...]

Fails naming the file and the reason when a cache does not exist yet, does
not parse, has an unknown format version or duplicate keys, or holds
entries whose kernel fingerprint matches no kernel in the tree (stale:
regenerate it).
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli.cache_tool import main  # noqa: E402

REGENERATE = "bazel run @rules_autotune//tools:regenerate"

if __name__ == "__main__":
    caches = [a for a in sys.argv[1:] if not a.startswith("-")]
    missing = [c for c in caches if not os.path.exists(c)]
    for cache in missing:
        print(f"validate_cache: autotune cache {cache} does not exist yet: "
              f"create it with `{REGENERATE}`, then commit it",
              file=sys.stderr)
    if missing:
        sys.exit(1)
    code = main(["verify"] + sys.argv[1:])
    if code == 1:
        print("validate_cache: stale or outdated entries: regenerate the "
              f"cache with `{REGENERATE}`", file=sys.stderr)
    sys.exit(code)
