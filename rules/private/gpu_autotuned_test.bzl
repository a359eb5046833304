"""Implementation of gpu_autotuned_test and autotune_cache_test.

Macros, not rules: they wrap whatever test rule the caller passes (py_test,
sh_test, cc_test, ...), so nothing here depends on a native rule (Bazel 9
has none) or on a language.
"""

load(":compiled_kernels.bzl", "autotune_compiled_kernels")
load(
    ":helpers.bzl",
    "cache_path_expression",
    "check_gpu_type",
    "env_select_errors",
    "flags_env",
    "gpu_type_list",
    "is_main_repository",
    "is_select",
    "parse_cache_label",
    "removed_parameter_errors",
    "runtime_python_path",
    "select_error",
    "test_exec_properties",
)

DUMP_SUFFIX = "_autotune_dump"
DUMP_FILE = "autotune_cache.textproto"
DUMP_TAG = "autotune_dump"
CACHE_TAG_PREFIX = "autotune_cache="
DEVICE_TAG_PREFIX = "autotune_device="
DEFAULT_GPU_TAGS = ["gpu", "requires-gpu-nvidia"]

# Client variables the load and dump targets inherit (Bazel starts a test
# with a fresh environment): without CUDA_VISIBLE_DEVICES every test sees
# every GPU of the machine; the runner's stamp keys these tests' cached
# results by the runner's GPU, driver, Triton, torch and CUDA, and no
# other test's (a CPU-only test keeps its cache hits when it changes).
GPU_ENV_INHERIT = ["CUDA_VISIBLE_DEVICES", "AUTOTUNE_RUNNER_STAMP"]

REGENERATE_COMMAND = "bazel run @rules_autotune//tools:regenerate"

# The modules autotune imports; a test or tool run without them stops with
# one line naming the python_deps flag (tools/require_python_deps.py).
RUNTIME_PACKAGES = "absl-py,protobuf"
KERNEL_PACKAGES = "absl-py,protobuf,torch,triton"

COMPILED_SUFFIX = "_compiled_kernels"

# Names the gpu_types entry of a target of several types, for the line a
# test on the wrong device prints.
GPU_TYPES_ENTRY_ENV = "AUTOTUNE_GPU_TYPES_ENTRY"

# Triton's keys hold which cache-invalidating variables are set: the
# compile action and the test must set the same ones. Triton 3.9 warns
# when this one is unset (its default changes in 3.10), so it is set
# explicitly, to the value it defaults to.
COMPILE_TRITON_ENV = {"TRITON_DEFAULT_FP_FUSION": "1"}

# TRITON_ variables that say where Triton works, not what it compiles.
_TRITON_PLACES = ["TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_CACHE_MANAGER", "TRITON_INTERPRET"]

def _caller_repository():
    """The calling BUILD file's repository name, without "@"."""
    name = native.repository_name()
    return "" if is_main_repository(name) else name.lstrip("@")

def _cache_file(label, what):
    """Where a checked-in cache lives and whether it exists yet.

    Returns a struct: label (for data), path (workspace-relative, recorded
    in a tag of the dump target so regenerate knows which file the dumps
    go to), exists (None: unknown, the file is in another package and
    Bazel reports a missing one), expression (how the test finds the file:
    $(execpath), or $(rootpath) in a non-root module), runfiles_path (the
    same relative to the test's working directory, for a file that does
    not exist yet).

    A cache in the calling package (also in a subdirectory without a
    BUILD file) may not exist yet: the targets are still defined, the load
    target fails at test time naming the command that creates the file,
    and regenerate can create it.
    """
    parsed = parse_cache_label(label, native.package_name())
    if parsed.error:
        fail("%s %s" % (what, parsed.error))
    exists = None
    if parsed.local:
        exists = len(native.glob([parsed.name], allow_empty = True)) > 0
    main = _caller_repository() == ""
    return struct(
        label = parsed.label,
        path = parsed.path,
        exists = exists,
        expression = cache_path_expression(parsed.label, main),
        runfiles_path = parsed.path if main else "../%s/%s" % (_caller_repository(), parsed.path),
    )

def _check_env(what, env):
    errors = env_select_errors(what, env)
    if errors:
        fail(errors[0])

def _test_env(what, env, flags):
    combined = flags_env(env, flags)
    if combined.error:
        fail("%s: %s" % (what, combined.error))
    out = combined.env
    if "PYTHONPATH" not in out:
        out["PYTHONPATH"] = runtime_python_path(
            Label("//:autotune").workspace_name,
            _caller_repository(),
        )
    return out

INTERPRETER_DEVICE = "triton-interpreter"

def gpu_type(device = None, name = None, tags = None, exec_properties = {}, exec_compatible_with = []):
    """Where a GPU test runs: one GPU type, for gpu_autotuned_test(gpu_types).

    Declare a project's types once in a .bzl of its own and reuse them.
    gpu_type() alone is the default of every gpu_autotuned_test: today's
    GPU tags, no device check, no properties.

    Args:
      device: what the device key of that GPU contains, for example "H100"
        or "A100" (its name), or "triton-interpreter" for CPU CI; the load
        target fails on another device instead of running untuned. None:
        any device.
      name: the type's name in target names (`<test>_<name>`, when
        gpu_types lists more than one) and in the tag `gpu-<name>`, which
        every type with a device gets; default: device in lower case.
      tags: tags that route the type's tests (default: "gpu" and
        "requires-gpu-nvidia"; none for "triton-interpreter").
      exec_properties: execution properties of that type's test actions
        alone (each key gets Bazel's `test.` prefix), e.g. {"Pool": "h100"}.
      exec_compatible_with: constraint values of that type's executors.

    Returns:
      A struct for gpu_types.
    """
    checked = check_gpu_type(device, name, tags, exec_properties, exec_compatible_with)
    if checked.error:
        fail(checked.error)
    if tags == None:
        tags = [] if device == INTERPRETER_DEVICE else DEFAULT_GPU_TAGS
    return struct(
        device = device,
        name = name or (device.lower() if device else None),
        tags = tags,
        exec_properties = exec_properties,
        exec_compatible_with = exec_compatible_with,
    )

def gpu_autotuned_test(
        name,
        test_rule,
        autotune_cache = None,
        per_fusion_cache = None,
        require_complete = False,
        gpu_types = None,
        autotune_flags = [],
        compile_for = [],
        **kwargs):
    """A GPU test that loads a checked-in autotune cache, plus a dump target.

    Creates, for each GPU type:
      name (or name + "_" + the type's name, when gpu_types lists more
        than one; `name` is then a test_suite of them): loads
        `autotune_cache` (via $(execpath); $(rootpath) when this BUILD file
        is in another module than the root) or reads `per_fusion_cache`;
        runs sharded when shard_count is set.
      the same + "_autotune_dump": tagged manual, unsharded; tunes the
        fusions the test meets that are missing or stale in the checked-in
        cache (--autotune_incumbents_from; every fusion, the checked-in
        configs as incumbents, with AUTOTUNE_RETUNE=1: `regenerate
        --retune`), and writes every fusion the test used to
        TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto. `bazel run
        @rules_autotune//tools:regenerate` runs these and writes their
        dumps into the checked-in caches.

    Both get `import autotune` without a Python launcher (PYTHONPATH in
    env, unless env sets it; the runtime's files in data), so sh_test and
    cc_test that start Python work as py_test does, and inherit
    CUDA_VISIBLE_DEVICES and AUTOTUNE_RUNNER_STAMP from the client.

    Args:
      name: the load target's name.
      test_rule: the rule to wrap, e.g. py_test from rules_python, sh_test
        from rules_shell.
      autotune_cache: label of the checked-in results file (.textproto,
        .pbtxt, .txt: text; otherwise binary), in this repository
        (//pkg:file, @//pkg:file, @@//pkg:file, :file or a path). In the
        calling package (or a subdirectory of it without a BUILD file) it
        may not exist yet: the load target then fails at test time naming
        the command that creates it.
      per_fusion_cache: instead of a file, a per-fusion cache directory,
        read only: a directory of the calling package ("fusions"; its
        files become data), or //pkg:dir, a filegroup of the files of
        pkg/dir.
      require_complete: in load mode, fail listing every fusion the cache
        lacks instead of tuning it.
      gpu_types: where the tests run: one gpu_type(...) or a list of them
        (one load and one dump target per type). Default: gpu_type().
      autotune_flags: extra AUTOTUNE_FLAGS for both targets; no select().
      compile_for: GPU targets (["sm_90", "sm_80"]) to compile the
        checked-in cache's winners for, in a build action on a CPU
        executor (name + "_compiled_kernels", reading the kernels from
        deps and data); the load targets then load those binaries instead
        of compiling them (docs/bazel-compiled-kernels.md). Needs
        autotune_cache.
      **kwargs: attributes of test_rule, for both targets. The macro adds
        to data (the runtime, the cache), env (AUTOTUNE_FLAGS after the
        value given here; PYTHONPATH), env_inherit, tags (the type's) and
        exec_properties (the type's, as test. keys); shard_count applies
        to the load target only. env, env_inherit and autotune_flags may
        not be a select().
    """
    what = "gpu_autotuned_test(name = %r)" % name
    errors = removed_parameter_errors(what, kwargs)
    if errors:
        fail(errors[0])
    kinds = gpu_type_list(what, gpu_types if gpu_types != None else gpu_type())
    if kinds.error:
        fail(kinds.error)
    if autotune_cache and per_fusion_cache:
        fail("%s: give autotune_cache or per_fusion_cache, not both" % what)
    if is_select(autotune_flags):
        fail(select_error(what, "autotune_flags"))
    if compile_for and type(compile_for) != type([]):
        fail("%s: compile_for must be a list of GPU targets, e.g. [\"sm_90\"]" % what)
    if compile_for and not autotune_cache:
        fail("%s: compile_for compiles the winners of autotune_cache, which is not given" % what)

    # The test rule's attributes the macro extends; the rest pass through.
    env = kwargs.pop("env", {})
    _check_env(what, env)
    if "AUTOTUNE_FLAGS" in env and type(env["AUTOTUNE_FLAGS"]) != type(""):
        fail("%s: env AUTOTUNE_FLAGS must be a string" % what)
    env_inherit = kwargs.pop("env_inherit", [])
    if is_select(env_inherit):
        fail(select_error(what, "env_inherit"))
    data = kwargs.pop("data", [])
    tags = kwargs.pop("tags", [])
    shard_count = kwargs.pop("shard_count", None)
    exec_properties = kwargs.pop("exec_properties", None)
    exec_compatible_with = kwargs.pop("exec_compatible_with", [])

    cache = _cache_file(autotune_cache, what + ": autotune_cache") if autotune_cache else None
    runtime = Label("//:autotune")

    # data may be a select(): it is only ever extended with +, never read.
    load_flags = list(autotune_flags)
    load_data = data + [runtime]
    load_env = env
    if cache and cache.exists == False:
        # Not there yet: the runtime reports the missing file and the
        # command that creates it when the test runs.
        load_flags.append("--load_autotune_results_from=" + (
            "TEST_WORKSPACE/" + cache.path if _caller_repository() == "" else cache.runfiles_path
        ))
    elif cache:
        load_data = load_data + [cache.label]
        load_flags.append("--load_autotune_results_from=" + cache.expression)
    if per_fusion_cache:
        fusions = _per_fusion_dir(per_fusion_cache, what)
        load_data = load_data + fusions.files
        load_flags.append("--per_fusion_autotune_cache_dir=" + fusions.path)
        load_flags.append("--autotune_cache_mode=read")
    if require_complete:
        load_flags.append("--require_complete_autotune_results")

    # A cache that does not exist yet has nothing to compile: the load
    # target fails at test time naming the command that creates it.
    if compile_for and cache.exists != False:
        triton_env = dict(COMPILE_TRITON_ENV)
        for key, value in env.items():
            if key.startswith("TRITON_") and key not in _TRITON_PLACES:
                triton_env[key] = value
        routing = []
        for kind in kinds.value:
            routing += kind.tags
        autotune_compiled_kernels(
            name = name + COMPILED_SUFFIX,
            cache = cache.label,
            kernels = kwargs.get("deps", []) + data,
            targets = compile_for,
            triton_env = triton_env,
            tags = [t for t in tags if t not in routing],
            visibility = ["//visibility:private"],
        )
        compiled = ":" + name + COMPILED_SUFFIX
        load_data = load_data + [compiled]

        # $(rootpath): a generated directory's exec path (bazel-out/...) is
        # not where it sits in the test's runfiles.
        load_flags.append("--autotune_compiled_kernels=$(rootpath %s)" % compiled)
        load_env = dict(env)
        load_env.update(triton_env)

    dump_data = data + [runtime]
    dump_flags = list(autotune_flags) + [
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/" + DUMP_FILE,
        "--autotune_fail_if_sharded",
    ]
    dump_tags = ["manual", DUMP_TAG]
    if cache:
        dump_tags.append(CACHE_TAG_PREFIX + cache.path)
    if cache and cache.exists != False:
        # The checked-in entries are incumbents: a fusion whose entry
        # matches is a hit, dumped as it is without measuring; a missing or
        # stale one is tuned. With AUTOTUNE_RETUNE=1 in the environment
        # (regenerate --retune) every fusion is re-measured, and a config
        # stays unless a challenger is faster beyond the timing noise.
        dump_data = dump_data + [cache.label]
        dump_flags.append("--autotune_incumbents_from=" + cache.expression)

    common = dict(kwargs)
    common["env_inherit"] = GPU_ENV_INHERIT + [v for v in env_inherit if v not in GPU_ENV_INHERIT]
    tests = []
    for kind in kinds.value:
        target = name if len(kinds.value) == 1 else "%s_%s" % (name, kind.name)
        tests.append(":" + target)
        routed = dict(common)
        properties = test_exec_properties(what, exec_properties, kind.exec_properties)
        if properties.error:
            fail(properties.error)
        if properties.value != None:
            routed["exec_properties"] = properties.value
        if exec_compatible_with or kind.exec_compatible_with:
            routed["exec_compatible_with"] = exec_compatible_with + kind.exec_compatible_with
        test_tags = [t for t in tags if t not in kind.tags] + kind.tags
        device_flags = []
        device_tags = []
        if kind.device:
            if "gpu-" + kind.name not in test_tags:
                test_tags.append("gpu-" + kind.name)
            device_flags.append("--autotune_expected_gpu=" + kind.device)

            # Regenerate runs a dump target only where the device matches.
            device_tags.append(DEVICE_TAG_PREFIX + kind.device)

        type_load_env, type_env = load_env, env
        if len(kinds.value) > 1 and GPU_TYPES_ENTRY_ENV not in env:
            type_load_env = dict(load_env)
            type_load_env[GPU_TYPES_ENTRY_ENV] = kind.name
            type_env = dict(env)
            type_env[GPU_TYPES_ENTRY_ENV] = kind.name

        load_kwargs = dict(routed)
        if shard_count != None:
            load_kwargs["shard_count"] = shard_count
        test_rule(
            name = target,
            data = load_data,
            env = _test_env(what, type_load_env, load_flags + device_flags),
            tags = test_tags,
            **load_kwargs
        )
        test_rule(
            name = target + DUMP_SUFFIX,
            data = dump_data,
            env = _test_env(what, type_env, dump_flags),
            tags = test_tags + [t for t in dump_tags + device_tags if t not in test_tags],
            shard_count = 1,
            **routed
        )
    if len(tests) > 1:
        native.test_suite(name = name, tests = tests, tags = tags)

def _per_fusion_dir(label, what):
    """The files and the run-time path of a per-fusion cache directory."""
    parsed = parse_cache_label(label, native.package_name())
    if parsed.error:
        fail("%s: per_fusion_cache %s" % (what, parsed.error))
    if parsed.local:
        files = native.glob([parsed.name + "/**"], allow_empty = True)
    else:
        files = [parsed.label]
    main = _caller_repository() == ""
    return struct(
        files = files,
        path = "TEST_WORKSPACE/" + parsed.path if main else "../%s/%s" % (_caller_repository(), parsed.path),
    )

def autotune_cache_test(name, test_rule, cache, kernel_modules = [], tool = None, deps = [], env = {}, **kwargs):
    """Validates a checked-in autotune cache on the CPU.

    The test fails when the cache does not parse, its format version is not
    current, a key repeats, or (with kernel_modules) an entry names a kernel
    fingerprint that no kernel in the tree has.

    Args:
      name: test name.
      test_rule: py_test (from rules_python).
      cache: label of the results file. In the calling package it may
        not exist yet: the test then fails naming the command that
        creates it.
      kernel_modules: Python modules whose tuned kernels are the tree's.
      tool: the validation script (default: the one in this repository).
      deps: py_library targets that provide kernel_modules.
      env: environment of the test, added to TRITON_INTERPRET=1 (which it
        may override); no select().
      **kwargs: passed to test_rule.
    """
    what = "autotune_cache_test(name = %r)" % name
    _check_env(what, env)
    tool = tool or Label("//tools:validate_cache.py")
    found = _cache_file(cache, what + ": cache")
    if found.exists == False:
        cache_args = [found.runfiles_path]
        data = []
    else:
        cache_args = [found.expression]
        data = [found.label]
    test_env = {"TRITON_INTERPRET": "1"}
    test_env.update(env)

    # The entry point checks the Python packages first: without them the
    # test stops with one line naming the python_deps flag.
    entry = Label("//tools:require_python_deps.py")
    test_rule(
        name = name,
        srcs = [entry, tool],
        main = entry,
        args = [
            "--packages=" + (KERNEL_PACKAGES if kernel_modules else RUNTIME_PACKAGES),
            "$(rootpath %s)" % tool,
        ] + cache_args + ["--kernel_module=" + m for m in kernel_modules],
        data = data,
        deps = deps + [Label("//:autotune")],
        env = test_env,
        **kwargs
    )
