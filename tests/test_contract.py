"""The names the Starlark macros and the Python side share have one Python
source (autotune/contract.py, autotune/flags.py); the .bzl file keeps a
copy, compared here."""
import pathlib
import re

from autotune import contract, flags

PRIVATE = pathlib.Path(__file__).resolve().parent.parent / "rules" / "private"
BZL = PRIVATE / "gpu_autotuned_test.bzl"
HELPERS = PRIVATE / "helpers.bzl"  # the macros' pure helpers


def starlark_constants():
    text = BZL.read_text() + "\n" + HELPERS.read_text()
    strings = dict(re.findall(r'^([A-Z_]+) = "([^"]*)"$', text, re.M))
    lists = {name: re.findall(r'"([^"]*)"', body) for name, body in
             re.findall(r'^([A-Z_]+) = \[([^\]]*)\]$', text, re.M)}
    return strings, lists


def test_every_shared_name_agrees_with_the_bzl_file():
    strings, _ = starlark_constants()
    shared = {name: value for name, value in vars(contract).items()
              if name.isupper()}
    in_both = set(shared) & set(strings)
    assert {"DUMP_SUFFIX", "DUMP_FILE", "DUMP_TAG", "CACHE_TAG_PREFIX",
            "REGENERATE_COMMAND"} <= in_both
    for name in in_both:
        assert strings[name] == shared[name], (
            f"{name}: {BZL.name} has {strings[name]!r}, autotune/contract.py "
            f"has {shared[name]!r}")


def test_the_list_flags_agree():
    _, lists = starlark_constants()
    assert sorted(lists["LIST_FLAGS"]) == sorted(flags.LIST_FLAGS)


def test_the_comparison_can_fail(monkeypatch):
    monkeypatch.setattr(contract, "DUMP_TAG", "something_else")
    strings, _ = starlark_constants()
    assert strings["DUMP_TAG"] != contract.DUMP_TAG
