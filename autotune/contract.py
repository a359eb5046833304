"""Names the Starlark macros (rules/private/gpu_autotuned_test.bzl) and the
Python side both use: the dump target's suffix, tags and file names, and
the regenerate command. Starlark cannot import Python, so the .bzl file
keeps its own copy; tests/test_contract.py fails when the two differ."""

DUMP_SUFFIX = "_autotune_dump"          # gpu_autotuned_test NAME's dump target
DUMP_FILE = "autotune_cache.textproto"  # in TEST_UNDECLARED_OUTPUTS_DIR
DUMP_TAG = "autotune_dump"              # every dump target carries it
CACHE_TAG_PREFIX = "autotune_cache="    # + the cache's workspace path
DEVICE_TAG_PREFIX = "autotune_device="  # + a gpu_type's device (dump targets)
REPORT_FILE = "autotune_report.json"    # beside the dump
REGENERATE_COMMAND = "bazel run @rules_autotune//tools:regenerate"
