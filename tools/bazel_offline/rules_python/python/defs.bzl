"""Forwards the rules_python API to Bazel's native rules (offline shim)."""

def py_test(**kwargs):
    native.py_test(**kwargs)  # buildifier: disable=native-py

def py_binary(**kwargs):
    native.py_binary(**kwargs)  # buildifier: disable=native-py

def py_library(**kwargs):
    native.py_library(**kwargs)  # buildifier: disable=native-py
