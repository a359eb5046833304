"""Implementation of gpu_autotuned_test and autotune_cache_test.

Macros, not rules: they wrap whatever test rule the caller passes (py_test,
sh_test, cc_test, ...), so nothing here depends on a native rule (Bazel 9
has none) or on a language.
"""

DUMP_SUFFIX = "_autotune_dump"
DUMP_FILE = "autotune_cache.textproto"
DUMP_TAG = "autotune_dump"
CACHE_TAG_PREFIX = "autotune_cache="
DEFAULT_GPU_TAGS = ["gpu", "requires-gpu-nvidia"]

def _source_path(label):
    """Returns the workspace-relative path of a source file label.

    It is recorded in a tag of the dump target, so tools/regenerate.py knows
    which checked-in file the dump replaces.
    """
    if label.startswith("@"):
        fail("autotune_cache %r: the cache must be a file of this repository" % label)
    if label.startswith("//"):
        package, _, name = label[2:].partition(":")
        if not name:
            name = package.rpartition("/")[2]
    else:
        package = native.package_name()
        name = label[1:] if label.startswith(":") else label
    return package + "/" + name if package else name

def _flags_env(env, flags):
    """env with AUTOTUNE_FLAGS extended by flags (the caller's come first)."""
    out = dict(env)
    user = out.get("AUTOTUNE_FLAGS", "")
    out["AUTOTUNE_FLAGS"] = " ".join([f for f in [user] + flags if f])
    return out

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
        **kwargs):
    """A GPU test that loads a checked-in autotune cache, plus a dump target.

    Creates:
      name: loads `autotune_cache` (via $(execpath)) or reads
        `per_fusion_cache_dir`; runs sharded when shard_count is set.
      name + "_autotune_dump": tagged manual, unsharded; tunes every fusion
        the test meets and writes TEST_UNDECLARED_OUTPUTS_DIR/
        autotune_cache.textproto. tools/regenerate.py runs these.

    Args:
      name: the load target's name.
      test_rule: the rule to wrap, e.g. py_test from rules_python.
      autotune_cache: label of the checked-in results file (.textproto,
        .pbtxt, .txt: text; otherwise binary).
      per_fusion_cache_dir: instead of a file, a per-fusion cache directory
        (a path, TEST_WORKSPACE/ prefix allowed), read only.
      per_fusion_cache_files: labels of that directory's files (data deps).
      require_complete: in load mode, fail listing every fusion the cache
        lacks instead of tuning it.
      gpu_type: GPU name the cache was tuned on (for example "H200"); the
        load target fails on another GPU instead of running untuned.
      gpu_tags: tags that route the tests to GPU machines.
      autotune_flags: extra AUTOTUNE_FLAGS for both targets.
      data: data dependencies of both targets.
      env: environment of both targets; an AUTOTUNE_FLAGS value in it comes
        before the flags this macro adds.
      tags: tags of both targets (the dump target adds manual).
      shard_count: shards of the load target; the dump target never shards.
      exec_properties: passed through, e.g. to pick a remote GPU pool.
      **kwargs: passed to test_rule for both targets.
    """
    if autotune_cache and per_fusion_cache_dir:
        fail("gpu_autotuned_test(name = %r): give autotune_cache or per_fusion_cache_dir, not both" % name)
    if type(gpu_tags) != type([]):
        fail("gpu_autotuned_test(name = %r): gpu_tags must be a list" % name)
    if "AUTOTUNE_FLAGS" in env and type(env["AUTOTUNE_FLAGS"]) != type(""):
        fail("gpu_autotuned_test(name = %r): env AUTOTUNE_FLAGS must be a string" % name)

    load_flags = list(autotune_flags)
    load_data = list(data)
    if autotune_cache:
        load_data.append(autotune_cache)
        load_flags.append("--load_autotune_results_from=$(execpath %s)" % autotune_cache)
    if per_fusion_cache_dir:
        load_data.extend(per_fusion_cache_files)
        load_flags.append("--per_fusion_autotune_cache_dir=%s" % per_fusion_cache_dir)
        load_flags.append("--autotune_cache_mode=read")
    if require_complete:
        load_flags.append("--require_complete_autotune_results")
    if gpu_type:
        load_flags.append("--autotune_expected_gpu=%s" % gpu_type)

    common = dict(kwargs)
    if exec_properties != None:
        common["exec_properties"] = exec_properties
    test_tags = [t for t in tags if t not in gpu_tags] + gpu_tags
    if gpu_type:
        test_tags.append("gpu-" + gpu_type.lower())

    load_kwargs = dict(common)
    if shard_count != None:
        load_kwargs["shard_count"] = shard_count
    test_rule(
        name = name,
        data = load_data,
        env = _flags_env(env, load_flags),
        tags = test_tags,
        **load_kwargs
    )

    dump_tags = test_tags + ["manual", DUMP_TAG]
    if autotune_cache:
        dump_tags.append(CACHE_TAG_PREFIX + _source_path(autotune_cache))
    test_rule(
        name = name + DUMP_SUFFIX,
        data = list(data),
        env = _flags_env(env, list(autotune_flags) + [
            "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/" + DUMP_FILE,
            "--autotune_fail_if_sharded",
        ]),
        tags = dump_tags,
        shard_count = 1,
        **common
    )

def autotune_cache_test(name, test_rule, cache, kernel_modules = [], tool = None, deps = [], **kwargs):
    """Validates a checked-in autotune cache on the CPU.

    The test fails when the cache does not parse, its format version is not
    current, a key repeats, or (with kernel_modules) an entry names a kernel
    fingerprint that no kernel in the tree has.

    Args:
      name: test name.
      test_rule: py_test (from rules_python).
      cache: label of the results file.
      kernel_modules: Python modules whose tuned kernels are the tree's.
      tool: the validation script (default: the one in this repository).
      deps: py_library targets that provide kernel_modules.
      **kwargs: passed to test_rule.
    """
    tool = tool or Label("//tools:validate_cache.py")
    args = ["$(execpath %s)" % cache]
    for module in kernel_modules:
        args.append("--kernel_module=" + module)
    test_rule(
        name = name,
        srcs = [tool],
        main = tool,
        args = args,
        data = [cache],
        deps = deps + [Label("//:autotune")],
        env = {"TRITON_INTERPRET": "1"},
        **kwargs
    )
