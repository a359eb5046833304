"""Analysis tests of the targets the macros generate.

`recorded_attrs` stands in for the wrapped test rule: it accepts what the
macros pass to a test rule and returns it in a provider, so the tests see
each generated target's attributes after select() is resolved.
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts")

RecordedAttrsInfo = provider(
    doc = "The attributes a macro gave a wrapped test rule.",
    fields = ["args", "data", "deps", "env", "env_inherit", "main", "shard_count", "srcs", "tags"],
)

def _recorded_attrs_impl(ctx):
    return [RecordedAttrsInfo(
        args = ctx.attr.args,
        data = [str(t.label) for t in ctx.attr.data],
        deps = [str(t.label) for t in ctx.attr.deps],
        env = ctx.attr.env,
        env_inherit = ctx.attr.env_inherit,
        main = str(ctx.attr.main.label) if ctx.attr.main else None,
        shard_count = ctx.attr.shard_count,
        srcs = [str(t.label) for t in ctx.attr.srcs],
        tags = ctx.attr.tags,
    )]

recorded_attrs = rule(
    implementation = _recorded_attrs_impl,
    attrs = {
        "args": attr.string_list(),
        "data": attr.label_list(allow_files = True),
        "deps": attr.label_list(),
        "env": attr.string_dict(),
        "env_inherit": attr.string_list(),
        "main": attr.label(allow_single_file = True),
        "shard_count": attr.int(default = -1),
        "srcs": attr.label_list(allow_files = True),
    },
)

def _recorded(env):
    return analysistest.target_under_test(env)[RecordedAttrsInfo]

def _flags(recorded):
    return recorded.env["AUTOTUNE_FLAGS"]

def _label(name):
    """A label of this package as str(Label) prints it on this Bazel."""
    return str(Label("//rules/tests:" + name))

def _load_target_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, "golden_test", analysistest.target_under_test(env).label.name)

    # Bazel keeps tags sorted.
    asserts.equals(env, sorted(["team-kernels", "gpu", "requires-gpu-nvidia", "gpu-h200"]), recorded.tags)
    asserts.equals(env, 3, recorded.shard_count)
    asserts.equals(env, " ".join([
        "--autotune_miss_policy=nearest",
        "--load_autotune_results_from=$(execpath :testdata/golden_cache.pb)",
        "--require_complete_autotune_results",
        "--autotune_expected_gpu=H200",
    ]), _flags(recorded))
    asserts.equals(env, "kept", recorded.env["USER_VAR"])
    asserts.equals(env, ".", recorded.env["PYTHONPATH"])
    asserts.equals(env, ["CUDA_VISIBLE_DEVICES", "AUTOTUNE_RUNNER_STAMP"], recorded.env_inherit)
    asserts.equals(env, sorted([
        _label("selected.txt"),
        str(Label("//:autotune")),
        _label("testdata/golden_cache.pb"),
    ]), sorted(recorded.data))
    return analysistest.end(env)

load_target_test = analysistest.make(_load_target_test_impl)

def _dump_target_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, "golden_test_autotune_dump", analysistest.target_under_test(env).label.name)
    asserts.equals(env, sorted([
        "team-kernels",
        "gpu",
        "requires-gpu-nvidia",
        "gpu-h200",
        "manual",
        "autotune_dump",
        "autotune_cache=rules/tests/testdata/golden_cache.pb",
        "autotune_device=H200",
    ]), recorded.tags)
    asserts.equals(env, 1, recorded.shard_count)
    asserts.equals(env, " ".join([
        "--autotune_miss_policy=nearest",
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto",
        "--autotune_fail_if_sharded",
        "--autotune_incumbents_from=$(execpath :testdata/golden_cache.pb)",
    ]), _flags(recorded))
    asserts.equals(env, "kept", recorded.env["USER_VAR"])
    asserts.equals(env, sorted([
        _label("selected.txt"),
        str(Label("//:autotune")),
        _label("testdata/golden_cache.pb"),
    ]), sorted(recorded.data))
    return analysistest.end(env)

dump_target_test = analysistest.make(_dump_target_test_impl)

def _missing_cache_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, " ".join([
        "--load_autotune_results_from=TEST_WORKSPACE/rules/tests/testdata/not_yet.textproto",
    ]), _flags(recorded))
    asserts.equals(env, -1, recorded.shard_count)
    asserts.equals(env, [str(Label("//:autotune"))], recorded.data)
    return analysistest.end(env)

missing_cache_test = analysistest.make(_missing_cache_test_impl)

def _main_repository_label_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, " ".join([
        "--load_autotune_results_from=$(execpath //testdata:xla_style.textproto)",
    ]), _flags(recorded))
    asserts.true(env, str(Label("//testdata:xla_style.textproto")) in recorded.data)
    return analysistest.end(env)

main_repository_label_test = analysistest.make(_main_repository_label_test_impl)

def _cache_test_target_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, {"TRITON_INTERPRET": "0", "USER_VAR": "kept"}, recorded.env)
    asserts.equals(env, str(Label("//tools:require_python_deps.py")), recorded.main)
    asserts.equals(env, [
        "--packages=absl-py,protobuf,torch,triton",
        "$(rootpath %s)" % Label("//tools:validate_cache.py"),
        "$(execpath :testdata/golden_cache.pb)",
        "--kernel_module=mykernels.scale_shift",
    ], recorded.args)
    asserts.equals(env, [_label("testdata/golden_cache.pb")], recorded.data)
    asserts.true(env, str(Label("//:autotune")) in recorded.deps)
    return analysistest.end(env)

cache_test_target_test = analysistest.make(_cache_test_target_test_impl)
