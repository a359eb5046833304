"""The build action of gpu_autotuned_test(compile_for = [...]):
`autotune_cache compile` with the arguments the rule passes."""
import sys

from autotune.cli import cache_tool

if __name__ == "__main__":
    sys.exit(cache_tool.main(["compile"] + sys.argv[1:]))
