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
import subprocess
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
STARLARK_TESTS = 19  # rules/tests: 10 unit tests, 9 analysis tests


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
    load("//rules:defs.bzl", "autotune_cache_test", "gpu_autotuned_test", "gpu_type")

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
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'exec_properties = {"test.Pool": "gpu-a100"}, '
     'gpu_types = gpu_type(exec_properties = {"Pool": "gpu-h100"}))',
     "gpu_autotuned_test(name = \"t\"): exec_properties[\"test.Pool\"] is "
     "\"gpu-a100\" and the gpu_type's exec_properties give \"gpu-h100\""),
    # A BUILD file written for the parameters the macro no longer takes.
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'gpu_type = "H200")',
     "gpu_autotuned_test(name = \"t\"): gpu_type is gone: write gpu_types = "
     "gpu_type(device = \"H200\")"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'gpu_exec_properties = {"Pool": "gpu-h100"})',
     "gpu_exec_properties is gone: write gpu_types = gpu_type("
     "exec_properties = {\"Pool\": \"gpu-h100\"})"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'gpu_tags = ["gpu"])',
     "gpu_tags is gone: write gpu_types = gpu_type(tags = [\"gpu\"])"),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'per_fusion_cache_dir = "TEST_WORKSPACE/f", per_fusion_cache_files = [])',
     "per_fusion_cache_dir is gone: write per_fusion_cache = "),
    ('gpu_autotuned_test(name = "t", test_rule = py_test, srcs = ["t.py"], '
     'gpu_types = {"h100": gpu_type(device = "H100")})',
     "gpu_types is a list now: gpu_types = [gpu_type(name = \"h100\", "),
], ids=["select-in-env-value", "select-as-env", "select-in-autotune_flags",
        "select-in-cache-test-env", "cache-of-another-repository",
        "test-pool-given-twice", "old-gpu_type", "old-gpu_exec_properties",
        "old-gpu_tags", "old-per_fusion_cache_dir", "old-gpu_types-dict"])
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


GPU_POOL = """\
    load("@rules_cc//cc:defs.bzl", "cc_test")
    load("@rules_python//python:defs.bzl", "py_test")
    load("//rules:defs.bzl", "gpu_autotuned_test", "gpu_type")

    gpu_autotuned_test(
        name = "pooled_test",
        test_rule = py_test,
        srcs = ["pooled_test.py"],
        exec_properties = {"OSFamily": "Linux"},
        gpu_types = gpu_type(exec_properties = {"Pool": "gpu-h100"}),
    )

    # Compiled code: its compile and link actions must stay off the pool.
    gpu_autotuned_test(
        name = "compiled_test",
        test_rule = cc_test,
        srcs = ["compiled_test.cc"],
        gpu_types = gpu_type(exec_properties = {"Pool": "gpu-h100"}),
    )

    # Control: a plain key sends every action of the target to the pool.
    cc_test(
        name = "plain_pool_test",
        srcs = ["compiled_test.cc"],
        exec_properties = {"Pool": "gpu-h100"},
    )
    """


def build_attribute(text, name, attribute):
    """One attribute's value in `bazel query --output=build` text."""
    block = text.split(f'name = "{name}"', 1)[1].split("\n)", 1)[0]
    found = re.search(rf"^  {attribute} = (.*)$", block, re.M)
    return found.group(1).rstrip(",") if found else None


def spawn_properties(path, targets):
    """{(mnemonic, target): [{name: value} per spawn]} of an execution log
    (--execution_log_json_file: JSON objects one after another): each
    spawn's platform properties, as a remote executor receives them; a
    spawn belongs to the first of targets whose name its outputs' paths
    hold."""
    import json
    with open(path) as f:
        text = f.read()
    decoder, i, found = json.JSONDecoder(), 0, {}
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return found
        spawn, i = decoder.raw_decode(text, i)
        outputs = json.dumps(spawn.get("listedOutputs", []))
        for target in targets:
            if f"/{target}" in outputs:
                found.setdefault((spawn.get("mnemonic"), target), []).append(
                    {p["name"]: p["value"] for p in spawn.get(
                        "platform", {}).get("properties", [])})
                break


def spawn_pools(path, targets):
    """{(mnemonic, target): {Pool values}} of an execution log."""
    return {key: {properties.get("Pool") for properties in found}
            for key, found in spawn_properties(path, targets).items()}


def test_the_gpu_pool_is_a_property_of_the_test_action_only(workspace,
                                                            tmp_path):
    """A gpu_type's exec_properties become `test.` keys on both generated targets
    (their exec_properties in `bazel query --output=build`), joined with
    the caller's plain exec_properties; Bazel gives them to the test
    action alone: in the execution log only TestRunner carries Pool, not
    a cc_test's CppCompile and CppLink (the control, a plain Pool key,
    puts it on all three)."""
    add_package(workspace, "pool", GPU_POOL)
    with open(os.path.join(workspace, "pool", "pooled_test.py"), "w") as f:
        f.write("")
    with open(os.path.join(workspace, "pool", "compiled_test.cc"), "w") as f:
        f.write("int main() { return 0; }\n")
    result = suite.bazel(workspace, ["query", "--output=build",
                                     "//pool:all"])
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("pooled_test", "pooled_test_autotune_dump"):
        assert build_attribute(result.stdout, name, "exec_properties") == \
            '{"OSFamily": "Linux", "test.Pool": "gpu-h100"}', result.stdout
    for name in ("compiled_test", "compiled_test_autotune_dump"):
        assert build_attribute(result.stdout, name, "exec_properties") == \
            '{"test.Pool": "gpu-h100"}', result.stdout

    log = tmp_path / "exec.json"
    result = suite.bazel(workspace, [
        "test", "--cache_test_results=no", f"--execution_log_json_file={log}",
        "//pool:compiled_test", "//pool:plain_pool_test"])
    assert result.returncode == 0, result.stderr[-3000:]
    # plain_pool_test's object file is compiled_test.o: its name first.
    spawns = spawn_pools(log, ("plain_pool_test", "compiled_test"))
    for mnemonic in ("CppCompile", "CppLink", "TestRunner"):
        assert spawns[(mnemonic, "plain_pool_test")] == {"gpu-h100"}, spawns
    assert spawns[("TestRunner", "compiled_test")] == {"gpu-h100"}, spawns
    assert spawns[("CppCompile", "compiled_test")] == {None}, spawns
    assert spawns[("CppLink", "compiled_test")] == {None}, spawns


FLEET_TYPES = """\
    load("//rules:defs.bzl", "gpu_type")

    # Declared once per project, reused by every BUILD file.
    H100 = gpu_type(device = "H100", exec_properties = {"Pool": "h100"},
                    tags = ["gpu", "requires-gpu-nvidia", "gpu-large"])
    A100 = gpu_type(device = "A100", exec_properties = {"Pool": "a100"})
    CPU = gpu_type(name = "cpu", device = "triton-interpreter")
    FLEET = [H100, A100, CPU]
"""

IMAGE = {"OSFamily": "Linux", "container-image": "docker://ci-image"}
# docs/bazel-fleet.md's execution platform for remote execution.
RBE_PLATFORM = f"""\
    platform(
        name = "linux",
        constraint_values = ["@platforms//os:linux", "@platforms//cpu:x86_64"],
        exec_properties = {IMAGE!r},
    )
"""

FLEET = """\
    load("@rules_python//python:defs.bzl", "py_test")
    load("//rules:defs.bzl", "gpu_autotuned_test")
    load(":types.bzl", "FLEET")

    gpu_autotuned_test(
        name = "kernels_test",
        srcs = ["//examples:xla_style_test.py"],
        main = "xla_style_test.py",
        autotune_cache = "//testdata:xla_style.textproto",
        require_complete = True,
        gpu_types = FLEET,
        test_rule = py_test,
        deps = ["//:autotune"],
    )
"""


def test_gpu_types_make_one_routed_target_per_type(workspace, tmp_path):
    """gpu_types: `<name>_<type>` load and dump targets with the type's
    tags and `test.` properties in a test_suite `<name>`; each type's test
    action carries its type's `Pool` merged with the execution platform's
    properties (execution log), and `--remote_default_exec_properties`
    does not reach it; on the interpreter the cpu type passes and a GPU
    type fails at once with one line naming the GPU it needs and the
    device it got."""
    add_package(workspace, "fleet", FLEET)
    with open(os.path.join(workspace, "fleet", "types.bzl"), "w") as f:
        f.write(textwrap.dedent(FLEET_TYPES))
    exports = os.path.join(workspace, "examples", "BUILD.bazel")
    with open(exports, "a") as f:
        f.write('\nexports_files(["xla_style_test.py"])\n')
    result = suite.bazel(workspace, ["query", "--output=build",
                                     "//fleet:all"])
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout
    for key, pool in (("h100", "h100"), ("a100", "a100")):
        for name in (f"kernels_test_{key}", f"kernels_test_{key}_autotune_dump"):
            assert build_attribute(text, name, "exec_properties") == \
                f'{{"test.Pool": "{pool}"}}', (name, text)
            tags = build_attribute(text, name, "tags")
            assert f'"gpu-{key}"' in tags and '"gpu"' in tags, tags
    assert '"gpu-large"' in build_attribute(text, "kernels_test_h100", "tags")
    cpu_tags = build_attribute(text, "kernels_test_cpu", "tags")
    assert '"gpu-cpu"' in cpu_tags and '"requires-gpu-nvidia"' not in cpu_tags
    suite_tests = re.search(r'test_suite\(\n  name = "kernels_test",.*?'
                            r'\n  tests = (.*?)\n', text, re.S).group(1)
    assert all(f"//fleet:kernels_test_{k}" in suite_tests
               for k in ("a100", "cpu", "h100")), suite_tests

    # The properties every action needs (an image) on the execution
    # platform, as docs/bazel-fleet.md's remote-execution set-up has them.
    add_package(workspace, "rbe", RBE_PLATFORM)
    log = tmp_path / "exec.json"
    ran = suite.bazel(workspace, ["test", "//fleet:kernels_test_cpu",
                                  "//fleet:kernels_test_h100",
                                  "//fleet:kernels_test_a100",
                                  "--test_output=errors",
                                  "--extra_execution_platforms=//rbe:linux",
                                  f"--execution_log_json_file={log}"])
    out = ran.stdout + ran.stderr
    assert ran.returncode != 0
    assert re.search(r"//fleet:kernels_test_cpu\s.*PASSED", out), out[-3000:]
    assert re.search(r"//fleet:kernels_test_h100\s.*FAILED", out), out[-3000:]
    assert "this test may only run on a H100, and this run is on " \
        "cpu/triton-interpreter" in out, out[-3000:]
    # Each type's test action carries its own pool, which a remote
    # executor routes by, with the platform's properties; the CPU type's
    # only the platform's.
    found = spawn_properties(log, ("kernels_test_h100", "kernels_test_a100",
                                   "kernels_test_cpu"))
    for key, pool in (("h100", "h100"), ("a100", "a100"), ("cpu", None)):
        expected = dict(IMAGE, **({"Pool": pool} if pool else {}))
        assert found[("TestRunner", f"kernels_test_{key}")] == [expected], \
            found
    # --remote_default_exec_properties applies only to an action whose
    # target and platform set none: a GPU type's test action gets its
    # pool alone, without the image (so docs/bazel-fleet.md puts the image on
    # the platform).
    defaults_log = tmp_path / "defaults.json"
    suite.bazel(workspace, [
        "test", "//fleet:kernels_test_cpu", "//fleet:kernels_test_h100",
        "--cache_test_results=no", f"--execution_log_json_file={defaults_log}"]
        + [f"--remote_default_exec_properties={k}={v}"
           for k, v in IMAGE.items()])
    found = spawn_properties(defaults_log, ("kernels_test_h100",
                                            "kernels_test_cpu"))
    assert found[("TestRunner", "kernels_test_cpu")] == [IMAGE], found
    assert found[("TestRunner", "kernels_test_h100")] == [{"Pool": "h100"}], \
        found
    # One pool's share.
    filtered = suite.bazel(workspace, ["test", "//fleet:all",
                                       "--test_tag_filters=gpu-cpu"])
    assert filtered.returncode == 0, (filtered.stdout + filtered.stderr)[-3000:]


def test_regenerate_runs_only_the_local_types_dump_targets(workspace, tmp_path):
    """On this machine (the interpreter) regenerate runs the cpu type's
    dump target, names the GPU types it left to other machines, and
    `--gpu_type A100` says what an A100 machine would run."""
    if not os.path.isdir(os.path.join(workspace, "fleet")):
        test_gpu_types_make_one_routed_target_per_type(workspace, tmp_path)

    def regenerate(*args):
        return subprocess.run(
            [sys.executable, os.path.join(workspace, "tools", "regenerate.py")]
            + list(args), cwd=workspace, capture_output=True, text=True)
    plan = regenerate("--gpu_type", "A100", "//fleet:all")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "on a machine with a A100, regenerate runs 1 dump target(s): " \
        "//fleet:kernels_test_a100_autotune_dump" in plan.stderr, plan.stderr
    ran = regenerate("//fleet:all")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "left to machines with another GPU (this one is " \
        "cpu/triton-interpreter" in ran.stderr, ran.stderr
    assert "//fleet:kernels_test_a100_autotune_dump (needs a A100)" in \
        ran.stderr and "//fleet:kernels_test_h100_autotune_dump (needs a " \
        "H100)" in ran.stderr, ran.stderr
    # The cpu type's dump target and the example sharing its cache; not
    # the two GPU types' (4 otherwise).
    assert "running 2 dump target(s)" in ran.stderr, ran.stderr
