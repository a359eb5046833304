"""The macros' Starlark tests, and the calls they must refuse, under the
Bazel on PATH (Debian's bazel-bootstrap 4.2.3 here, with bazel-skylib
1.0.3 from Debian's package through tools/bazel_offline).

rules/tests holds the unit tests of rules/private/helpers.bzl (flag
combining and splitting, cache labels, runfiles paths, select() checks)
and the analysis tests of the targets the macros generate (names, tags,
env, shard_count, data, args). A macro's refusal is a loading error, which
no analysis test can catch: those are driven here with `bazel query`.
"""
import os
import re
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import run_example_suite as suite  # noqa: E402
from tests_support import needs_bazel  # noqa: E402

pytestmark = needs_bazel

SKYLIB = os.environ.get("BAZEL_SKYLIB_DIR", "/usr/share/bazel/tools/skylib")
STARLARK_TESTS = 11  # rules/tests: 6 unit tests, 5 analysis tests


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    if not os.path.isdir(SKYLIB) and not os.environ.get(
            "AUTOTUNE_REQUIRE_BAZEL_SKYLIB"):
        pytest.skip(f"bazel-skylib is not installed ({SKYLIB}; apt-get "
                    "install bazel-skylib)")
    ws = str(tmp_path_factory.mktemp("starlark"))
    suite.copy_workspace(ws)
    yield ws
    suite.bazel(ws, ["shutdown"])


def add_package(ws, package, build):
    os.makedirs(os.path.join(ws, package), exist_ok=True)
    with open(os.path.join(ws, package, "BUILD.bazel"), "w") as f:
        f.write(textwrap.dedent(build))


def test_starlark_unit_and_analysis_tests_pass(workspace):
    result = suite.bazel(workspace, ["test", "//rules/tests:all",
                                     "//rules:defs"])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    passed = re.findall(r"^//rules/tests:\S+ .*PASSED", out, re.M)
    assert len(passed) == STARLARK_TESTS, out[-4000:]


MACRO_CALL = """\
    load("@rules_python//python:defs.bzl", "py_test")
    load("//rules:defs.bzl", "autotune_cache_test", "gpu_autotuned_test")

    {call}
    """


@pytest.mark.parametrize("call, message", [
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'env = {"AUTOTUNE_FLAGS": select({"//conditions:default": "--x=1"})})',
     "gpu_autotuned_test(name = \"t\"): env[\"AUTOTUNE_FLAGS\"] may not be "
     "a select()"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'env = select({"//conditions:default": {}}))',
     "gpu_autotuned_test(name = \"t\"): env may not be a select()"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'autotune_flags = ["--a=1"] + select({"//conditions:default": []}))',
     "gpu_autotuned_test(name = \"t\"): autotune_flags may not be a "
     "select()"),
    ('autotune_cache_test(name = "t", test_rule = py_test, cache = '
     '"c.textproto", env = {"A": select({"//conditions:default": "1"})})',
     "autotune_cache_test(name = \"t\"): env[\"A\"] may not be a select()"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'autotune_cache = "@other//testdata:c.textproto")',
     "gpu_autotuned_test(name = \"t\"): autotune_cache \"@other//testdata:"
     "c.textproto\": the cache must be a file of the repository"),
], ids=["select-in-env-value", "select-as-env", "select-in-autotune_flags",
        "select-in-cache-test-env", "cache-of-another-repository"])
def test_a_call_the_macro_cannot_honour_stops_with_one_message(
        workspace, call, message):
    add_package(workspace, "refused", MACRO_CALL.format(call=call))
    result = suite.bazel(workspace, ["query", "//refused:all"])
    assert result.returncode != 0
    # Bazel prints a fail() as "Error in fail: MESSAGE" under the stack.
    errors = [line for line in result.stderr.splitlines()
              if "Error in fail:" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr[-3000:]
    # The select() message says what to do instead.
    if "select()" in message:
        assert "--test_env" in errors[0]
