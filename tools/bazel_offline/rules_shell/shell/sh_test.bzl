"""Forwards rules_shell's sh_test to Bazel's native rule (offline shim)."""

def sh_test(**kwargs):
    native.sh_test(**kwargs)  # buildifier: disable=native-sh-test
