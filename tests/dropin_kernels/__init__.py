"""Kernels written for triton.autotune, as users bring them. The drop-in
tests run them untouched (zero-edit path) and with only the decorator
renamed to autotune.autotune; each module has run() -> {name: tensor} and
expected() -> {name: tensor}."""
