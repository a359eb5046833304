"""Public API of rules_autotune.

    load("@rules_autotune//rules:defs.bzl", "gpu_autotuned_test", "gpu_type")
"""

load(
    "//rules/private:gpu_autotuned_test.bzl",
    _autotune_cache_test = "autotune_cache_test",
    _gpu_autotuned_test = "gpu_autotuned_test",
    _gpu_type = "gpu_type",
)

gpu_autotuned_test = _gpu_autotuned_test
gpu_type = _gpu_type
autotune_cache_test = _autotune_cache_test
