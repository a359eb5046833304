"""Forwards the rules_cc API to Bazel's native rules (offline shim)."""

def cc_library(**kwargs):
    native.cc_library(**kwargs)  # buildifier: disable=native-cc-library

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)  # buildifier: disable=native-cc-binary

def cc_test(**kwargs):
    native.cc_test(**kwargs)  # buildifier: disable=native-cc-test

def cc_import(**kwargs):
    native.cc_import(**kwargs)  # buildifier: disable=native-cc-import

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)  # buildifier: disable=native-cc-proto

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)  # buildifier: disable=native-cc-toolchain

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)  # buildifier: disable=native-cc-toolchain-suite
