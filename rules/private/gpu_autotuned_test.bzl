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

REGENERATE_COMMAND = "bazel run @rules_autotune//tools:regenerate"

# AUTOTUNE_FLAGS that take a comma-separated list: given twice, the values
# are joined into one flag (the runtime keeps only one value per flag).
_LIST_FLAGS = ["load_autotune_results_from", "autotune_incumbents_from"]

def _cache_file(label, what):
    """Where a checked-in cache lives and whether it exists yet.

    Returns a struct: label (for data and $(execpath)), path (workspace-
    relative, recorded in a tag of the dump target so regenerate knows
    which file the dumps go to), exists (None: unknown, the file is in
    another package and Bazel reports a missing one).

    A cache in the calling package (also in a subdirectory without a
    BUILD file) may not exist yet: the targets are still defined, the load
    target fails at test time naming the command that creates the file,
    and regenerate can create it.
    """
    if label.startswith("@"):
        fail("%s %r: the cache must be a file of this repository" % (what, label))
    here = native.package_name()
    if label.startswith("//"):
        package, _, name = label[2:].partition(":")
        if not name:
            name = package.rpartition("/")[2]
    else:
        package = here
        name = label[1:] if label.startswith(":") else label
    path = package + "/" + name if package else name
    if package != here:
        return struct(label = label, path = path, exists = None)
    exists = len(native.glob([name], allow_empty = True)) > 0
    return struct(label = ":" + name, path = path, exists = exists)

def _split_flags(text):
    """AUTOTUNE_FLAGS text as a list of flags.

    None when the text uses shell quoting: it is then passed on as it is.
    """
    if "'" in text or '"' in text or "\\" in text:
        return None
    return text.replace("\t", " ").replace("\n", " ").split(" ")

def _combine_flags(name, flags):
    """Flags in order, each once.

    Repeated list flags are joined into one; a single-value flag given
    twice with two values is an error.
    """
    out = []
    list_index = {}
    single = {}
    for flag in flags:
        if not flag:
            continue
        if not flag.startswith("--") or "=" not in flag:
            if flag not in out:
                out.append(flag)
            continue
        flag_name, _, value = flag[2:].partition("=")
        if flag_name in _LIST_FLAGS:
            if flag_name in list_index:
                if value:
                    i = list_index[flag_name]
                    out[i] = out[i] + ("," if not out[i].endswith("=") else "") + value
            else:
                list_index[flag_name] = len(out)
                out.append(flag)
        elif flag_name in single:
            if single[flag_name] != value:
                fail(("gpu_autotuned_test(name = %r): --%s is given twice, as %r " +
                      "and %r (env AUTOTUNE_FLAGS, autotune_flags and the macro's " +
                      "own attributes must agree)") % (name, flag_name, single[flag_name], value))
        else:
            single[flag_name] = value
            out.append(flag)
    return out

def _flags_env(name, env, flags):
    """Env with AUTOTUNE_FLAGS extended by flags.

    The caller's flags come first; each flag appears once (_combine_flags).
    """
    out = dict(env)
    user = out.get("AUTOTUNE_FLAGS", "")
    user_flags = _split_flags(user)
    if user_flags == None:
        out["AUTOTUNE_FLAGS"] = " ".join([f for f in [user] + _combine_flags(name, flags) if f])
    else:
        out["AUTOTUNE_FLAGS"] = " ".join(_combine_flags(name, user_flags + flags))
    return out

def _runtime_python_path():
    """PYTHONPATH that makes the runtime and the caller's modules importable.

    Entries are relative to a test's working directory (its workspace's
    runfiles root). sh_test and cc_test have no Python launcher that would
    set them.
    """
    repo = Label("//:autotune").workspace_name
    return ".:../" + repo if repo else "."

def _test_env(name, env, flags):
    out = _flags_env(name, env, flags)
    if "PYTHONPATH" not in out:
        out["PYTHONPATH"] = _runtime_python_path()
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
        .pbtxt, .txt: text; otherwise binary). In the calling package (or a
        subdirectory of it without a BUILD file) it may not exist yet: the
        load target then fails at test time naming the command that
        creates it.
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
        before the flags this macro adds (a list flag given in both is
        joined into one; a single-value flag given twice is an error).
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

    runtime = Label("//:autotune")
    cache = _cache_file(autotune_cache, "gpu_autotuned_test(name = %r): autotune_cache" % name) if autotune_cache else None
    load_flags = list(autotune_flags)
    load_data = list(data) + [runtime]
    if cache and cache.exists == False:
        # Not there yet: the runtime reports the missing file and the
        # command that creates it when the test runs.
        load_flags.append("--load_autotune_results_from=TEST_WORKSPACE/" + cache.path)
    elif cache:
        load_data.append(cache.label)
        load_flags.append("--load_autotune_results_from=$(execpath %s)" % cache.label)
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
        env = _test_env(name, env, load_flags),
        tags = test_tags,
        **load_kwargs
    )

    dump_tags = test_tags + ["manual", DUMP_TAG]
    dump_data = list(data) + [runtime]
    dump_flags = list(autotune_flags) + [
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/" + DUMP_FILE,
        "--autotune_fail_if_sharded",
    ]
    if cache:
        dump_tags.append(CACHE_TAG_PREFIX + cache.path)
    if cache and cache.exists != False:
        # The checked-in entries are incumbents: a fusion whose entry
        # matches is a hit, dumped as it is without measuring; a missing or
        # stale one is tuned. With AUTOTUNE_RETUNE=1 in the environment
        # (regenerate --retune) every fusion is re-measured, and a config
        # stays unless a challenger is faster beyond the timing noise.
        dump_data.append(cache.label)
        dump_flags.append("--autotune_incumbents_from=$(execpath %s)" % cache.label)
    test_rule(
        name = name + DUMP_SUFFIX,
        data = dump_data,
        env = _test_env(name, env, dump_flags),
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
      cache: label of the results file. In the calling package it may
        not exist yet: the test then fails naming the command that
        creates it.
      kernel_modules: Python modules whose tuned kernels are the tree's.
      tool: the validation script (default: the one in this repository).
      deps: py_library targets that provide kernel_modules.
      **kwargs: passed to test_rule.
    """
    tool = tool or Label("//tools:validate_cache.py")
    found = _cache_file(cache, "autotune_cache_test(name = %r): cache" % name)
    if found.exists == False:
        args = [found.path]
        data = []
    else:
        args = ["$(execpath %s)" % found.label]
        data = [found.label]
    for module in kernel_modules:
        args.append("--kernel_module=" + module)
    test_rule(
        name = name,
        srcs = [tool],
        main = tool,
        args = args,
        data = data,
        deps = deps + [Label("//:autotune")],
        env = {"TRITON_INTERPRET": "1"},
        **kwargs
    )
