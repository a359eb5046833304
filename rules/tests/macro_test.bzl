"""Analysis tests of the targets the macros generate.

`recorded_attrs` stands in for the wrapped test rule: it accepts what the
macros pass to a test rule and returns it in a provider, so the tests see
each generated target's attributes after select() is resolved.
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts", "unittest")

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

# -- gpu_types: one target pair per type, a test_suite over them ----------

def _generated_rules_test_impl(ctx):
    env = unittest.begin(ctx)
    got = ctx.attr.generated

    # Two types: a test_suite of their load targets; one type: none.
    asserts.equals(env, "test_suite", got["fleet_test.kind"])
    asserts.equals(env, ":fleet_test_cpu :fleet_test_h100", got["fleet_test.tests"])
    asserts.equals(env, "recorded_attrs", got["golden_test.kind"])

    # Each type's routing tags, its gpu-<name> tag, its device check; the
    # interpreter type has no GPU tags.
    asserts.equals(env, "gpu gpu-h100 gpu-large manual team-kernels", got["fleet_test_h100.tags"])
    asserts.equals(env, "gpu-cpu manual team-kernels", got["fleet_test_cpu.tags"])
    asserts.equals(env, " ".join([
        "autotune_cache=rules/tests/testdata/golden_cache.pb",
        "autotune_device=H100",
        "autotune_dump",
        "gpu",
        "gpu-h100",
        "gpu-large",
        "manual",
        "team-kernels",
    ]), got["fleet_test_h100_autotune_dump.tags"])
    asserts.equals(env, " ".join([
        "--load_autotune_results_from=$(execpath :testdata/golden_cache.pb)",
        "--autotune_expected_gpu=H100",
    ]), got["fleet_test_h100.env:AUTOTUNE_FLAGS"])
    asserts.equals(env, " ".join([
        "--load_autotune_results_from=$(execpath :testdata/golden_cache.pb)",
        "--autotune_expected_gpu=triton-interpreter",
    ]), got["fleet_test_cpu.env:AUTOTUNE_FLAGS"])
    asserts.equals(env, "2", got["fleet_test_h100.shard_count"])

    # Each type's targets name their gpu_types entry; one type's, none.
    asserts.equals(env, "h100", got["fleet_test_h100.env:AUTOTUNE_GPU_TYPES_ENTRY"])
    asserts.equals(env, "h100", got["fleet_test_h100_autotune_dump.env:AUTOTUNE_GPU_TYPES_ENTRY"])
    asserts.equals(env, "cpu", got["fleet_test_cpu.env:AUTOTUNE_GPU_TYPES_ENTRY"])
    asserts.equals(env, "", got["golden_test.env:AUTOTUNE_GPU_TYPES_ENTRY"])
    asserts.equals(env, "1", got["fleet_test_h100_autotune_dump.shard_count"])

    # The type's properties as test. keys, joined with the caller's; its
    # constraints, on load and dump targets alike. The runner's stamp is
    # inherited by both.
    for target in ["fleet_test_h100", "fleet_test_h100_autotune_dump"]:
        asserts.equals(env, "OSFamily=Linux test.Pool=h100", got[target + ".exec_properties"], target)
        asserts.equals(env, "@platforms//cpu:x86_64", got[target + ".exec_compatible_with"], target)
        asserts.equals(env, "AUTOTUNE_RUNNER_STAMP CUDA_VISIBLE_DEVICES USER_VAR", got[target + ".env_inherit"], target)
    asserts.equals(env, "OSFamily=Linux", got["fleet_test_cpu.exec_properties"])
    asserts.equals(env, "", got["fleet_test_cpu.exec_compatible_with"])

    # compile_for: one compile target, no GPU routing tags on it.
    asserts.equals(env, "autotune_compiled_kernels", got["compiled_test_compiled_kernels.kind"])
    asserts.equals(env, "sm_80 sm_90", got["compiled_test_compiled_kernels.targets"])
    asserts.equals(env, "manual team-kernels", got["compiled_test_compiled_kernels.tags"])
    asserts.equals(env, ":mykernels :selected.txt", got["compiled_test_compiled_kernels.kernels"])
    return unittest.end(env)

_generated_rules_test = unittest.make(
    _generated_rules_test_impl,
    attrs = {"generated": attr.string_dict()},
)

def _short(value):
    """An attribute value of native.existing_rule() as one plain string."""
    if type(value) == type({}):
        return " ".join(sorted(["%s=%s" % (k, v) for k, v in value.items()]))
    if type(value) in ["string", "int", "bool", "NoneType", "Label"]:
        return _local(str(value))

    # A list, or the read-only sequence later Bazels return.
    return " ".join(sorted([_local(str(v)) for v in value]))

def _local(label):
    """A label of this package as ":name", whatever the Bazel prints."""
    for prefix in ["@//rules/tests:", "//rules/tests:", "@@//rules/tests:"]:
        if label.startswith(prefix):
            return ":" + label[len(prefix):]
    return label

def generated_rules_test(name, targets):
    """Checks the targets the macros declared, as the BUILD file holds them.

    A macro's test_suite, exec_properties and exec_compatible_with are not
    visible to an analysis test of the wrapped rule: they are read here,
    while the BUILD file loads (native.existing_rule), and handed to a unit
    test as strings.

    Args:
      name: the test's name.
      targets: {target: [attributes to record]}.
    """
    generated = {}
    for target, attributes in targets.items():
        found = native.existing_rule(target)
        if found == None:
            generated[target + ".kind"] = "missing"
            continue
        for attribute in attributes:
            if attribute.startswith("env:"):
                value = found.get("env", {}).get(attribute[len("env:"):], "")
            else:
                value = found.get(attribute, "")
            generated[target + "." + attribute] = _short(value)
    _generated_rules_test(name = name, generated = generated)

# -- compile_for: the flag and the data the load target gets --------------

def _compiled_load_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, " ".join([
        "--load_autotune_results_from=$(execpath :testdata/golden_cache.pb)",
        "--autotune_compiled_kernels=$(rootpath :compiled_test_compiled_kernels)",
    ]), _flags(recorded))
    asserts.true(env, _label("compiled_test_compiled_kernels") in recorded.data, recorded.data)
    asserts.equals(env, "1", recorded.env["TRITON_DEFAULT_FP_FUSION"])
    asserts.equals(env, "0", recorded.env["TRITON_F32_DEFAULT"])
    return analysistest.end(env)

compiled_load_test = analysistest.make(_compiled_load_test_impl)

def _compiled_dump_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)

    # The dump target tunes: it loads no compiled kernels.
    asserts.true(env, "--autotune_compiled_kernels" not in _flags(recorded), _flags(recorded))
    asserts.true(env, _label("compiled_test_compiled_kernels") not in recorded.data, recorded.data)
    asserts.true(env, "TRITON_DEFAULT_FP_FUSION" not in recorded.env, recorded.env)
    return analysistest.end(env)

compiled_dump_test = analysistest.make(_compiled_dump_test_impl)

def _compile_action_test_impl(ctx):
    env = analysistest.begin(ctx)
    actions = [a for a in analysistest.target_actions(env) if a.mnemonic == "AutotuneCompileKernels"]
    asserts.equals(env, 1, len(actions))
    argv = actions[0].argv
    asserts.true(env, "rules/tests/testdata/golden_cache.pb" in argv, argv)
    asserts.true(env, "--target=sm_90,sm_80" in argv, argv)
    asserts.true(env, "--triton_env=TRITON_DEFAULT_FP_FUSION=1" in argv, argv)
    asserts.true(env, "--triton_env=TRITON_F32_DEFAULT=0" in argv, argv)
    return analysistest.end(env)

compile_action_test = analysistest.make(_compile_action_test_impl)

# -- per_fusion_cache: one label for the directory and its files ----------

def _per_fusion_test_impl(ctx):
    env = analysistest.begin(ctx)
    recorded = _recorded(env)
    asserts.equals(env, " ".join([
        "--per_fusion_autotune_cache_dir=TEST_WORKSPACE/rules/tests/testdata/fusions",
        "--autotune_cache_mode=read",
    ]), _flags(recorded))
    asserts.equals(env, sorted([
        str(Label("//:autotune")),
        _label("testdata/fusions/a.textproto"),
        _label("testdata/fusions/b.textproto"),
    ]), sorted(recorded.data))
    return analysistest.end(env)

per_fusion_test = analysistest.make(_per_fusion_test_impl)
