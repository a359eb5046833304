"""Unit tests of rules/private/helpers.bzl (bazel-skylib's unittest)."""

load("@bazel_skylib//lib:unittest.bzl", "asserts", "unittest")
load(
    "//rules/private:helpers.bzl",
    "cache_path_expression",
    "combine_flags",
    "env_select_errors",
    "flags_env",
    "gpu_type_list",
    "is_main_repository",
    "is_select",
    "parse_cache_label",
    "removed_parameter_errors",
    "runtime_python_path",
    "split_flags",
    "test_exec_properties",
)

def _combine_flags_test(ctx):
    env = unittest.begin(ctx)
    combined = combine_flags([
        "--load_autotune_results_from=a.textproto",
        "--autotune_miss_policy=nearest",
        "",
        "--load_autotune_results_from=b.textproto",
        "--require_complete_autotune_results",
        "--require_complete_autotune_results",
        "--autotune_miss_policy=nearest",
    ])
    asserts.equals(env, None, combined.error)
    asserts.equals(env, [
        "--load_autotune_results_from=a.textproto,b.textproto",
        "--autotune_miss_policy=nearest",
        "--require_complete_autotune_results",
    ], combined.flags)

    # A list flag with an empty first value takes the second without a
    # leading comma.
    asserts.equals(
        env,
        ["--autotune_incumbents_from=x.pb"],
        combine_flags(["--autotune_incumbents_from=", "--autotune_incumbents_from=x.pb"]).flags,
    )

    conflict = combine_flags(["--autotune_expected_gpu=H100", "--autotune_expected_gpu=H200"])
    asserts.equals(
        env,
        "--autotune_expected_gpu is given twice, as \"H100\" and \"H200\" (env AUTOTUNE_FLAGS, " +
        "autotune_flags and the macro's own attributes must agree)",
        conflict.error,
    )
    return unittest.end(env)

combine_flags_test = unittest.make(_combine_flags_test)

def _split_flags_test(ctx):
    env = unittest.begin(ctx)
    asserts.equals(env, ["--a=1", "--b=2", "--c"], split_flags(" --a=1\t--b=2\n --c "))
    asserts.equals(env, [], split_flags(""))
    asserts.equals(env, None, split_flags("--a='x y'"))
    asserts.equals(env, None, split_flags("--a=\"x\""))
    asserts.equals(env, None, split_flags("--a=x\\ y"))
    return unittest.end(env)

split_flags_test = unittest.make(_split_flags_test)

def _flags_env_test(ctx):
    env = unittest.begin(ctx)
    merged = flags_env(
        {"AUTOTUNE_FLAGS": "--load_autotune_results_from=a.textproto", "OTHER": "1"},
        ["--load_autotune_results_from=b.textproto", "--require_complete_autotune_results"],
    )
    asserts.equals(env, None, merged.error)
    asserts.equals(env, {
        "AUTOTUNE_FLAGS": "--load_autotune_results_from=a.textproto,b.textproto --require_complete_autotune_results",
        "OTHER": "1",
    }, merged.env)

    # Shell quoting: the user's text is passed on as it is, first.
    quoted = flags_env({"AUTOTUNE_FLAGS": "--x='a b'"}, ["--y=1", "--y=1"])
    asserts.equals(env, "--x='a b' --y=1", quoted.env["AUTOTUNE_FLAGS"])
    asserts.equals(env, {"AUTOTUNE_FLAGS": "--y=1"}, flags_env({}, ["--y=1"]).env)
    asserts.true(env, flags_env({"AUTOTUNE_FLAGS": "--y=1"}, ["--y=2"]).error != None)
    return unittest.end(env)

flags_env_test = unittest.make(_flags_env_test)

def _parse_cache_label_test(ctx):
    env = unittest.begin(ctx)
    for label in ["//testdata:x.textproto", "@//testdata:x.textproto", "@@//testdata:x.textproto"]:
        parsed = parse_cache_label(label, "pkg")
        asserts.equals(env, None, parsed.error, label)
        asserts.equals(env, "testdata/x.textproto", parsed.path, label)
        asserts.equals(env, "//testdata:x.textproto", parsed.label, label)
        asserts.false(env, parsed.local, label)

    # In the calling package: a relative label, its own package spelled
    # out, or a file in a subdirectory without a BUILD file.
    for label in [":x.textproto", "x.textproto", "//pkg:x.textproto", "@//pkg:x.textproto"]:
        parsed = parse_cache_label(label, "pkg")
        asserts.equals(env, "pkg/x.textproto", parsed.path, label)
        asserts.equals(env, ":x.textproto", parsed.label, label)
        asserts.true(env, parsed.local, label)
    parsed = parse_cache_label("testdata/mine.textproto", "")
    asserts.equals(env, "testdata/mine.textproto", parsed.path)
    asserts.equals(env, ":testdata/mine.textproto", parsed.label)

    # A package label alone names the file with the package's last name.
    asserts.equals(env, "a/b/b", parse_cache_label("//a/b", "").path)

    other = parse_cache_label("@other//testdata:x.textproto", "pkg")
    asserts.true(env, other.error != None and "\"@other//testdata:x.textproto\": the cache must be" in other.error)
    return unittest.end(env)

parse_cache_label_test = unittest.make(_parse_cache_label_test)

def _repositories_test(ctx):
    env = unittest.begin(ctx)
    for name in ["", "@", "@@"]:
        asserts.true(env, is_main_repository(name), name)
    asserts.false(env, is_main_repository("@rules_autotune"))
    asserts.false(env, is_main_repository("@rules_autotune+"))

    # The seed recipe in the main repository; the runfiles path elsewhere.
    asserts.equals(env, "$(execpath :c.textproto)", cache_path_expression(":c.textproto", True))
    asserts.equals(env, "$(rootpath :c.textproto)", cache_path_expression(":c.textproto", False))

    asserts.equals(env, ".", runtime_python_path("", ""))
    asserts.equals(env, ".:../rules_autotune+", runtime_python_path("rules_autotune+", ""))
    asserts.equals(env, ".:../lib+:../rules_autotune+", runtime_python_path("rules_autotune+", "lib+"))
    asserts.equals(env, ".:../rules_autotune", runtime_python_path("rules_autotune", "rules_autotune"))
    return unittest.end(env)

repositories_test = unittest.make(_repositories_test)

def _select_test(ctx):
    env = unittest.begin(ctx)
    chosen = select({"//conditions:default": ["a"]})
    asserts.true(env, is_select(chosen))
    asserts.true(env, is_select(["b"] + chosen))
    asserts.false(env, is_select(["a"]))
    asserts.false(env, is_select({"A": "1"}))
    asserts.equals(env, [], env_select_errors("t", {"A": "1"}))
    errors = env_select_errors("gpu_autotuned_test(name = \"t\")", {"A": "1", "B": select({"//conditions:default": "2"})})
    asserts.equals(env, 1, len(errors))
    asserts.true(env, errors[0].startswith("gpu_autotuned_test(name = \"t\"): env[\"B\"] may not be a select()"), errors[0])
    asserts.equals(env, 1, len(env_select_errors("t", select({"//conditions:default": {}}))))
    return unittest.end(env)

select_test = unittest.make(_select_test)

def _test_exec_properties_test(ctx):
    env = unittest.begin(ctx)
    what = "gpu_autotuned_test(name = \"t\")"

    # Nothing for the test action: the caller's value as given.
    asserts.equals(env, None, test_exec_properties(what, None, None).value)
    asserts.equals(env, {"Pool": "cpu"}, test_exec_properties(what, {"Pool": "cpu"}, {}).value)

    # The GPU pool for the test action only; the caller's keys as given.
    got = test_exec_properties(what, {"OSFamily": "Linux"}, {"Pool": "gpu-h100", "test.gpus": "1"})
    asserts.equals(env, None, got.error)
    asserts.equals(env, {"OSFamily": "Linux", "test.Pool": "gpu-h100", "test.gpus": "1"}, got.value)
    same = test_exec_properties(what, {"test.Pool": "gpu-h100"}, {"Pool": "gpu-h100"})
    asserts.equals(env, {"test.Pool": "gpu-h100"}, same.value)

    # Two values for the test action's key.
    clash = test_exec_properties(what, {"test.Pool": "gpu-a100"}, {"Pool": "gpu-h100"})
    asserts.true(env, clash.error.startswith(what + ": exec_properties[\"test.Pool\"] is \"gpu-a100\""), clash.error)
    chosen = select({"//conditions:default": {}})
    asserts.true(env, "may not be a select()" in test_exec_properties(what, chosen, {"Pool": "g"}).error)
    asserts.true(env, "gpu_type's exec_properties may not be a select()" in test_exec_properties(what, None, chosen).error)
    return unittest.end(env)

test_exec_properties_test = unittest.make(_test_exec_properties_test)

def _removed_parameters_test(ctx):
    env = unittest.begin(ctx)
    what = "gpu_autotuned_test(name = \"t\")"
    asserts.equals(env, [], removed_parameter_errors(what, {"deps": [":k"], "data": []}))
    asserts.equals(env, [
        what + ": gpu_tags is gone: write gpu_types = gpu_type(tags = [\"gpu\"])",
        what + ": gpu_type is gone: write gpu_types = gpu_type(device = \"H200\")",
    ], removed_parameter_errors(what, {"gpu_type": "H200", "gpu_tags": ["gpu"], "srcs": []}))
    errors = removed_parameter_errors(what, {"per_fusion_cache_files": []})
    asserts.true(env, "write per_fusion_cache = " in errors[0], errors[0])
    errors = removed_parameter_errors(what, {"compile_deps": [":k"]})
    asserts.true(env, "reads the kernels from deps and data" in errors[0], errors[0])
    return unittest.end(env)

removed_parameters_test = unittest.make(_removed_parameters_test)

def _kind(device, name = None):
    return struct(device = device, name = name or (device.lower() if device else None), tags = [], exec_properties = {}, exec_compatible_with = [])

def _gpu_type_list_test(ctx):
    env = unittest.begin(ctx)
    what = "gpu_autotuned_test(name = \"t\")"

    # One struct is a list of one; a list stays as it is.
    one = _kind(None)
    asserts.equals(env, [one], gpu_type_list(what, one).value)
    two = [_kind("H100"), _kind("triton-interpreter", "cpu")]
    asserts.equals(env, two, gpu_type_list(what, two).value)

    # The old dict form, an empty list, a stranger, unnamed or twice named.
    old = gpu_type_list(what, {"h100": _kind("H100")})
    asserts.true(env, "gpu_types is a list now" in old.error, old.error)
    asserts.true(env, "is empty" in gpu_type_list(what, []).error)
    asserts.true(env, "not a gpu_type(...)" in gpu_type_list(what, ["H100"]).error)
    unnamed = gpu_type_list(what, [_kind("H100"), _kind(None)])
    asserts.true(env, "needs a device or a name" in unnamed.error, unnamed.error)
    twice = gpu_type_list(what, [_kind("H100"), _kind("A100", "h100")])
    asserts.true(env, "two gpu_types are named \"h100\"" in twice.error, twice.error)
    return unittest.end(env)

gpu_type_list_test = unittest.make(_gpu_type_list_test)

def helpers_test_suite(name):
    unittest.suite(
        name,
        combine_flags_test,
        split_flags_test,
        flags_env_test,
        parse_cache_label_test,
        repositories_test,
        select_test,
        test_exec_properties_test,
        removed_parameters_test,
        gpu_type_list_test,
    )
