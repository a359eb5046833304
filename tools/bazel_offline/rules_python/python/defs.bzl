"""Forwards the rules_python API to Bazel's native rules (offline shim)."""

def py_test(**kwargs):
    native.py_test(**kwargs)

def py_binary(**kwargs):
    native.py_binary(**kwargs)

def py_library(**kwargs):
    native.py_library(**kwargs)
