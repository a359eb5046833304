"""Forwards rules_shell's sh_binary to Bazel's native rule (offline shim)."""

def sh_binary(**kwargs):
    native.sh_binary(**kwargs)  # buildifier: disable=native-sh-binary
