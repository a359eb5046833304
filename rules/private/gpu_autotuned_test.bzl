"""Implementation of gpu_autotuned_test and autotune_cache_test.

Macros, not rules: they wrap whatever test rule the caller passes (py_test,
sh_test, cc_test, ...), so nothing here depends on a native rule (Bazel 9
has none) or on a language.
"""

load(":compiled_kernels.bzl", "autotune_compiled_kernels")
load(
    ":helpers.bzl",
    "cache_path_expression",
    "env_select_errors",
    "flags_env",
    "is_main_repository",
    "is_select",
    "parse_cache_label",
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

# Client variables both targets inherit: Bazel starts a test with a fresh
# environment, so without it every test sees every GPU of the machine.
# The runner stamp keys these targets' cached results (and no other
# test's): autotune/measure/stamp.py.
GPU_ENV_INHERIT = [
    "CUDA_VISIBLE_DEVICES",
    "AUTOTUNE_RUNNER_STAMP",
]

REGENERATE_COMMAND = "bazel run @rules_autotune//tools:regenerate"

# The modules autotune imports; a test or tool run without them stops with
# one line naming the python_deps flag (tools/require_python_deps.py).
RUNTIME_PACKAGES = "absl-py,protobuf"
KERNEL_PACKAGES = "absl-py,protobuf,torch,triton"

COMPILED_SUFFIX = "_compiled_kernels"

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

def gpu_type(device, exec_properties = {}, tags = [], exec_compatible_with = []):
    """One GPU type of a fleet, for gpu_autotuned_test(gpu_types = {...}).

    Declare a project's types once in a .bzl of its own and reuse them.

    Args:
      device: what the device key of that GPU contains, for example "H100"
        or "A100" (its name), or "triton-interpreter" for CPU CI.
      exec_properties: execution properties of that type's test actions
        alone (each key gets Bazel's `test.` prefix), e.g. {"Pool": "h100"}.
      tags: tags of that type's targets (`gpu-<type>` is always added).
      exec_compatible_with: constraint values of that type's executors.

    Returns:
      A struct for gpu_types.
    """
    if type(device) != type("") or not device:
        fail("gpu_type: device must be a non-empty string, e.g. \"H100\"")
    if type(exec_properties) != type({}):
        fail("gpu_type(device = %r): exec_properties must be a dict" % device)
    if type(tags) != type([]) or type(exec_compatible_with) != type([]):
        fail("gpu_type(device = %r): tags and exec_compatible_with must be lists" % device)
    return struct(
        device = device,
        exec_properties = exec_properties,
        tags = tags,
        exec_compatible_with = exec_compatible_with,
    )

def gpu_autotuned_test(
        name,
        test_rule,
        autotune_cache = None,
        per_fusion_cache_dir = None,
        per_fusion_cache_files = [],
        require_complete = False,
        gpu_type = None,
        gpu_tags = DEFAULT_GPU_TAGS,
        autotune_flags = [],
        data = [],
        env = {},
        tags = [],
        shard_count = None,
        exec_properties = None,
        gpu_exec_properties = None,
        compile_for = [],
        compile_deps = None,
        gpu_types = None,
        env_inherit = [],
        **kwargs):
    """A GPU test that loads a checked-in autotune cache, plus a dump target.

    Creates:
      name: loads `autotune_cache` (via $(execpath); $(rootpath) when
        this BUILD file is in another module than the root) or reads
        `per_fusion_cache_dir`; runs sharded when shard_count is set.
      name + "_autotune_dump": tagged manual, unsharded; tunes the fusions
        the test meets that are missing or stale in the checked-in cache
        (--autotune_incumbents_from; every fusion, the checked-in configs as
        incumbents, with AUTOTUNE_RETUNE=1: `regenerate --retune`), and
        writes every fusion the test used to TEST_UNDECLARED_OUTPUTS_DIR/
        autotune_cache.textproto. `bazel run @rules_autotune//tools:regenerate`
        runs these and writes their dumps into the checked-in caches.

    Both targets get `import autotune` without a Python launcher (PYTHONPATH
    in env, unless env sets it; the runtime's files in data), so sh_test and
    cc_test that start Python work as py_test does.

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
      per_fusion_cache_dir: instead of a file, a per-fusion cache directory
        (a path, TEST_WORKSPACE/ prefix allowed), read only.
      per_fusion_cache_files: labels of that directory's files (data deps).
      require_complete: in load mode, fail listing every fusion the cache
        lacks instead of tuning it.
      gpu_type: GPU name the cache was tuned on (for example "H200"); the
        load target fails on another GPU instead of running untuned.
      gpu_tags: tags that route the tests to GPU machines.
      autotune_flags: extra AUTOTUNE_FLAGS for both targets; no select().
      data: data dependencies of both targets; a select() works.
      env: environment of both targets; an AUTOTUNE_FLAGS value in it comes
        before the flags this macro adds (a list flag given in both is
        joined into one; a single-value flag given twice is an error); no
        select().
      tags: tags of both targets (the dump target adds manual).
      shard_count: shards of the load target; the dump target never shards.
      exec_properties: passed through; a key without the `test.` prefix
        applies to every action of the target (building it too).
      gpu_exec_properties: execution properties of the test action alone,
        e.g. {"Pool": "gpu-h100"} for a remote GPU pool: each key gets
        Bazel's `test.` prefix (`test.Pool`), so building the target stays
        on CPU executors; joined with exec_properties; no select().
      compile_for: GPU targets (["sm_90", "sm_80"]) to compile the
        checked-in cache's winners for, in a build action on a CPU
        executor (name + "_compiled_kernels"); the load target then loads
        those binaries instead of compiling them (docs/bazel.md#compiled-kernels).
        Needs autotune_cache.
      compile_deps: the libraries that provide the kernels, for that
        action (default: deps).
      gpu_types: {type name: gpu_type(...)}: one load target per type,
        `<name>_<type>` (tags: the type's and `gpu-<type>`; the type's
        test action properties and exec_compatible_with; failing at once
        on a device of another type), a dump target per type likewise, and
        `name` a test_suite of the load targets. Not with gpu_type.
      env_inherit: client variables both targets inherit, joined after
        CUDA_VISIBLE_DEVICES (which they always inherit); no select().
      **kwargs: passed to test_rule for both targets.
    """
    if gpu_types == None:
        _gpu_autotuned_test(
            name = name,
            test_rule = test_rule,
            autotune_cache = autotune_cache,
            per_fusion_cache_dir = per_fusion_cache_dir,
            per_fusion_cache_files = per_fusion_cache_files,
            require_complete = require_complete,
            gpu_type = gpu_type,
            gpu_tags = gpu_tags,
            autotune_flags = autotune_flags,
            data = data,
            env = env,
            tags = tags,
            shard_count = shard_count,
            exec_properties = exec_properties,
            gpu_exec_properties = gpu_exec_properties,
            compile_for = compile_for,
            compile_deps = compile_deps,
            env_inherit = env_inherit,
            **kwargs
        )
        return
    what = "gpu_autotuned_test(name = %r)" % name
    if gpu_type != None:
        fail("%s: give gpu_type or gpu_types, not both" % what)
    if type(gpu_types) != type({}) or not gpu_types:
        fail("%s: gpu_types must be a non-empty dict of gpu_type(...)" % what)
    tests = []
    for key in sorted(gpu_types.keys()):
        kind = gpu_types[key]
        if not hasattr(kind, "device") or not hasattr(kind, "exec_properties"):
            fail("%s: gpu_types[%r] is not a gpu_type(...)" % (what, key))
        properties = dict(gpu_exec_properties or {})
        for prop, value in kind.exec_properties.items():
            if prop in properties and properties[prop] != value:
                fail("%s: gpu_types[%r]: exec property %r given twice with two values" % (what, key, prop))
            properties[prop] = value
        type_tags = list(tags) + [t for t in kind.tags if t not in tags]
        if "gpu-" + key.lower() not in type_tags:
            type_tags.append("gpu-" + key.lower())
        extra = dict(kwargs)
        if kind.exec_compatible_with:
            extra["exec_compatible_with"] = kind.exec_compatible_with
        one = {p: v for p, v in [
            ("name", name),
            ("test_rule", test_rule),
            ("autotune_cache", autotune_cache),
            ("per_fusion_cache_dir", per_fusion_cache_dir),
            ("per_fusion_cache_files", per_fusion_cache_files),
            ("require_complete", require_complete),
            ("gpu_type", gpu_type),
            ("gpu_tags", gpu_tags),
            ("autotune_flags", autotune_flags),
            ("data", data),
            ("env", env),
            ("tags", tags),
            ("shard_count", shard_count),
            ("exec_properties", exec_properties),
            ("gpu_exec_properties", gpu_exec_properties),
            ("compile_for", compile_for),
            ("compile_deps", compile_deps),
            ("env_inherit", env_inherit),
        ]}
        one.update(
            name = "%s_%s" % (name, key),
            gpu_type = kind.device,
            tags = type_tags,
            gpu_tags = [] if kind.device == INTERPRETER_DEVICE else gpu_tags,
            gpu_exec_properties = properties or None,
        )
        one.update(extra)
        _gpu_autotuned_test(**one)
        tests.append(":%s_%s" % (name, key))
    native.test_suite(name = name, tests = tests)

def _gpu_autotuned_test(
        name,
        test_rule,
        autotune_cache = None,
        per_fusion_cache_dir = None,
        per_fusion_cache_files = [],
        require_complete = False,
        gpu_type = None,
        gpu_tags = DEFAULT_GPU_TAGS,
        autotune_flags = [],
        data = [],
        env = {},
        tags = [],
        shard_count = None,
        exec_properties = None,
        gpu_exec_properties = None,
        compile_for = [],
        compile_deps = None,
        env_inherit = [],
        **kwargs):
    """One load target and its dump target: gpu_autotuned_test's work."""
    what = "gpu_autotuned_test(name = %r)" % name
    if autotune_cache and per_fusion_cache_dir:
        fail("%s: give autotune_cache or per_fusion_cache_dir, not both" % what)
    if type(gpu_tags) != type([]):
        fail("%s: gpu_tags must be a list" % what)
    if is_select(autotune_flags):
        fail(select_error(what, "autotune_flags"))
    _check_env(what, env)
    if is_select(env_inherit):
        fail(select_error(what, "env_inherit"))
    inherit = GPU_ENV_INHERIT + [v for v in env_inherit if v not in GPU_ENV_INHERIT]
    if "AUTOTUNE_FLAGS" in env and type(env["AUTOTUNE_FLAGS"]) != type(""):
        fail("%s: env AUTOTUNE_FLAGS must be a string" % what)

    runtime = Label("//:autotune")
    cache = _cache_file(autotune_cache, what + ": autotune_cache") if autotune_cache else None

    # data may be a select(): it is only ever extended with +, never read.
    load_flags = list(autotune_flags)
    load_data = data + [runtime]
    if cache and cache.exists == False:
        # Not there yet: the runtime reports the missing file and the
        # command that creates it when the test runs.
        load_flags.append("--load_autotune_results_from=" + (
            "TEST_WORKSPACE/" + cache.path if _caller_repository() == "" else cache.runfiles_path
        ))
    elif cache:
        load_data = load_data + [cache.label]
        load_flags.append("--load_autotune_results_from=" + cache.expression)
    if per_fusion_cache_dir:
        load_data = load_data + per_fusion_cache_files
        load_flags.append("--per_fusion_autotune_cache_dir=%s" % per_fusion_cache_dir)
        load_flags.append("--autotune_cache_mode=read")
    if require_complete:
        load_flags.append("--require_complete_autotune_results")
    if gpu_type:
        load_flags.append("--autotune_expected_gpu=%s" % gpu_type)
    load_env = env
    if compile_for and type(compile_for) != type([]):
        fail("%s: compile_for must be a list of GPU targets, e.g. [\"sm_90\"]" % what)
    if compile_for and not cache:
        fail("%s: compile_for compiles the winners of autotune_cache, which is not given" % what)

    # A cache that does not exist yet has nothing to compile: the load
    # target fails at test time naming the command that creates it.
    if compile_for and cache.exists != False:
        kernels = compile_deps if compile_deps != None else kwargs.get("deps", [])
        if is_select(kernels):
            fail(select_error(what, "compile_deps (or deps)"))
        triton_env = dict(COMPILE_TRITON_ENV)
        for key, value in env.items():
            if key.startswith("TRITON_") and key not in _TRITON_PLACES:
                triton_env[key] = value
        autotune_compiled_kernels(
            name = name + COMPILED_SUFFIX,
            cache = cache.label,
            kernels = kernels,
            targets = compile_for,
            triton_env = triton_env,
            tags = [t for t in tags if t not in gpu_tags],
            visibility = ["//visibility:private"],
        )
        compiled = ":" + name + COMPILED_SUFFIX
        load_data = load_data + [compiled]

        # $(rootpath): a generated directory's exec path (bazel-out/...) is
        # not where it sits in the test's runfiles.
        load_flags.append("--autotune_compiled_kernels=$(rootpath %s)" % compiled)
        load_env = dict(env)
        load_env.update(triton_env)

    common = dict(kwargs)
    common["env_inherit"] = inherit
    properties = test_exec_properties(what, exec_properties, gpu_exec_properties)
    if properties.error:
        fail(properties.error)
    if properties.value != None:
        common["exec_properties"] = properties.value
    test_tags = [t for t in tags if t not in gpu_tags] + gpu_tags
    if gpu_type:
        tag = "gpu-" + gpu_type.lower()
        if gpu_type != INTERPRETER_DEVICE and tag not in test_tags:
            test_tags.append(tag)

    load_kwargs = dict(common)
    if shard_count != None:
        load_kwargs["shard_count"] = shard_count
    test_rule(
        name = name,
        data = load_data,
        env = _test_env(what, load_env, load_flags),
        tags = test_tags,
        **load_kwargs
    )

    dump_tags = test_tags + ["manual", DUMP_TAG]
    dump_data = data + [runtime]
    dump_flags = list(autotune_flags) + [
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/" + DUMP_FILE,
        "--autotune_fail_if_sharded",
    ]
    if cache:
        dump_tags.append(CACHE_TAG_PREFIX + cache.path)
    if gpu_type:
        # Regenerate runs a dump target only where the device matches.
        dump_tags.append(DEVICE_TAG_PREFIX + gpu_type)
    if cache and cache.exists != False:
        # The checked-in entries are incumbents: a fusion whose entry
        # matches is a hit, dumped as it is without measuring; a missing or
        # stale one is tuned. With AUTOTUNE_RETUNE=1 in the environment
        # (regenerate --retune) every fusion is re-measured, and a config
        # stays unless a challenger is faster beyond the timing noise.
        dump_data = dump_data + [cache.label]
        dump_flags.append("--autotune_incumbents_from=" + cache.expression)
    test_rule(
        name = name + DUMP_SUFFIX,
        data = dump_data,
        env = _test_env(what, env, dump_flags),
        tags = dump_tags,
        shard_count = 1,
        **common
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
