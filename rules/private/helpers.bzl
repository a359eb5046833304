"""Pure helpers of the macros: AUTOTUNE_FLAGS handling and cache labels.

Nothing here calls `native`, so the Starlark unit tests in rules/tests can
call every function from a rule implementation. Errors are returned, not
raised: the macros turn them into one `fail()` naming the target, and the
tests read them.
"""

# AUTOTUNE_FLAGS that take a comma-separated list: given twice, the values
# are joined into one flag (the runtime keeps only one value per flag).
LIST_FLAGS = [
    "load_autotune_results_from",
    "autotune_incumbents_from",
    "autotune_compiled_kernels",
]

# The spellings of the main repository's name: "" and "@" before Bzlmod
# and on it (native.repository_name()), "@@" from Bazel 7 on.
_MAIN_REPOSITORY_NAMES = ["", "@", "@@"]

def is_select(value):
    """Whether value is a select() (or a list concatenated with one)."""
    return type(value) == "select"

def select_error(what, attribute):
    """The message for a select() where the macro must read the value.

    None when there is nothing to report. `what` names the macro call,
    `attribute` the attribute and, for env, the key.
    """
    return ("%s: %s may not be a select(): the macro combines AUTOTUNE_FLAGS " +
            "while the BUILD file loads, before select() is resolved; " +
            "declare one target per configuration, or pass the value " +
            "with --test_env") % (what, attribute)

def env_select_errors(what, env):
    """Messages for select() in env (the dict itself or any value)."""
    if is_select(env):
        return [select_error(what, "env")]
    return [
        select_error(what, "env[%r]" % key)
        for key, value in env.items()
        if is_select(value)
    ]

def split_flags(text):
    """AUTOTUNE_FLAGS text as a list of flags.

    None when the text uses shell quoting: it is then passed on as it is.
    """
    if "'" in text or '"' in text or "\\" in text:
        return None
    return [f for f in text.replace("\t", " ").replace("\n", " ").split(" ") if f]

def combine_flags(flags):
    """Flags in order, each once.

    Repeated list flags are joined into one (LIST_FLAGS); a single-value
    flag given twice with two values is an error.

    Args:
      flags: flags such as "--name=value", in order.

    Returns:
      struct(flags = [str], error = None or str).
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
        if flag_name in LIST_FLAGS:
            if flag_name in list_index:
                if value:
                    i = list_index[flag_name]
                    out[i] = out[i] + ("," if not out[i].endswith("=") else "") + value
            else:
                list_index[flag_name] = len(out)
                out.append(flag)
        elif flag_name in single:
            if single[flag_name] != value:
                return struct(flags = out, error = (
                    "--%s is given twice, as %r and %r (env AUTOTUNE_FLAGS, " +
                    "autotune_flags and the macro's own attributes must agree)"
                ) % (flag_name, single[flag_name], value))
        else:
            single[flag_name] = value
            out.append(flag)
    return struct(flags = out, error = None)

def flags_env(env, flags):
    """env with AUTOTUNE_FLAGS extended by flags.

    The caller's flags come first; each flag appears once (combine_flags).

    Args:
      env: the caller's env; its AUTOTUNE_FLAGS, if any, comes first.
      flags: the flags the macro adds.

    Returns:
      struct(env = dict, error = None or str).
    """
    out = dict(env)
    user = out.get("AUTOTUNE_FLAGS", "")
    user_flags = split_flags(user)
    if user_flags == None:
        combined = combine_flags(flags)
        text = " ".join([f for f in [user] + combined.flags if f])
    else:
        combined = combine_flags(user_flags + flags)
        text = " ".join(combined.flags)
    out["AUTOTUNE_FLAGS"] = text
    return struct(env = out, error = combined.error)

def is_main_repository(repository_name):
    """Whether a repository name is the main repository's.

    Args:
      repository_name: as native.repository_name() returns it.

    Returns:
      True for the main repository's spellings.
    """
    return repository_name in _MAIN_REPOSITORY_NAMES

def parse_cache_label(label, here_package):
    """Where a cache label points, relative to the calling package.

    Main-repository spellings (`//pkg:f`, `@//pkg:f`, `@@//pkg:f`, `:f`,
    `f`) are accepted; another repository's file is an error (regenerate
    writes caches into the workspace it runs in).

    Args:
      label: the cache label as the BUILD file gives it.
      here_package: the calling package.

    Returns:
      struct(package, name, path (workspace-relative), local (in the
      calling package), label (for data and $(execpath)), error).
    """
    text = label
    for prefix in ["@@//", "@//"]:
        if text.startswith(prefix):
            text = text[len(prefix) - 2:]
    if text.startswith("@"):
        return struct(package = None, name = None, path = None, local = False, label = label, error = (
            "%r: the cache must be a file of the repository whose BUILD " +
            "file names it (//pkg:file, @//pkg:file, :file or a path)"
        ) % label)
    if text.startswith("//"):
        package, _, name = text[2:].partition(":")
        if not name:
            name = package.rpartition("/")[2]
    else:
        package = here_package
        name = text[1:] if text.startswith(":") else text
    if not name:
        return struct(package = package, name = name, path = None, local = False, label = label, error = (
            "%r: names no file" % label
        ))
    path = package + "/" + name if package else name
    local = package == here_package
    return struct(
        package = package,
        name = name,
        path = path,
        local = local,
        label = ":" + name if local else "//" + package + ":" + name,
        error = None,
    )

def cache_path_expression(label, main_repository):
    """How a test finds a cache file of its data at run time.

    In the main repository, $(execpath), XLA's recipe. A BUILD file of
    another repository (a non-root module) gets $(rootpath): Bazel 8 and
    later no longer link external/ into the main repository's runfiles, so
    the exec path (external/REPO/...) does not exist where the test runs;
    the runfiles path (../REPO/...) does, on every version.
    """
    return "$(%s %s)" % ("execpath" if main_repository else "rootpath", label)

def runtime_python_path(runtime_repository, caller_repository):
    """PYTHONPATH that makes the runtime and the caller's modules importable.

    Entries are relative to a test's working directory (the main
    repository's runfiles directory). sh_test and cc_test have no Python
    launcher that would set them.

    Args:
      runtime_repository: rules_autotune's repository name, without "@"
        ("" when it is the main repository).
      caller_repository: the calling BUILD file's repository name, likewise.

    Returns:
      A PYTHONPATH value.
    """
    entries = ["."]
    for repository in [caller_repository, runtime_repository]:
        if repository and "../" + repository not in entries:
            entries.append("../" + repository)
    return ":".join(entries)

# Bazel gives exec_properties keys with this prefix to the test action
# alone (its "test" exec group), without the prefix: every action of the
# target (compiling, linking, the test).
TEST_EXEC_PREFIX = "test."

def test_exec_properties(what, exec_properties, type_properties):
    """exec_properties of a GPU test, a GPU type's properties as test. keys.

    The caller's exec_properties, and the gpu_type's exec_properties for
    the test action only.

    Each key of type_properties gets the `test.` prefix (a key that has it
    keeps it), so a remote executor sends only the test action to the GPU
    pool; building the target (and compiling kernels ahead) stays on CPU
    executors. exec_properties are passed as given: a key without the
    prefix applies to every action of the target.

    Args:
      what: the macro call, for messages.
      exec_properties: the caller's exec_properties, or None; a select()
        only when type_properties is empty.
      type_properties: properties of the test action, or None.

    Returns:
      struct(value = the exec_properties to set (None: none), error =
      None or str).
    """
    if is_select(type_properties):
        return struct(value = None, error = select_error(what, "gpu_type's exec_properties"))
    if not type_properties:
        return struct(value = exec_properties, error = None)
    if is_select(exec_properties):
        return struct(value = None, error = (
            "%s: exec_properties may not be a select() together with a " +
            "gpu_type's exec_properties (the macro adds their test. keys " +
            "while the BUILD file loads); put the test. keys in the select()"
        ) % what)
    out = dict(exec_properties or {})
    for key, value in type_properties.items():
        full = key if key.startswith(TEST_EXEC_PREFIX) else TEST_EXEC_PREFIX + key
        if full in out and out[full] != value:
            return struct(value = None, error = (
                "%s: exec_properties[%r] is %r and the gpu_type's " +
                "exec_properties give %r: give the test action's key once"
            ) % (what, full, out[full], value))
        out[full] = value
    return struct(value = out, error = None)

# Parameters gpu_autotuned_test no longer takes, and what replaces each.
REMOVED_PARAMETERS = {
    "gpu_type": "gpu_types = gpu_type(device = %s)",
    "gpu_tags": "gpu_types = gpu_type(tags = %s)",
    "gpu_exec_properties": "gpu_types = gpu_type(exec_properties = %s)",
    "per_fusion_cache_dir": "per_fusion_cache = \"<directory>\" (one label: the directory, whose files become data)",
    "per_fusion_cache_files": "per_fusion_cache = \"<directory>\" (one label: the directory, whose files become data)",
    "compile_deps": "nothing: the compile action reads the kernels from deps and data",
}

def removed_parameter_errors(what, kwargs):
    """Messages for parameters of an older gpu_autotuned_test, in kwargs.

    Args:
      what: the macro call, for messages.
      kwargs: the macro's **kwargs.

    Returns:
      One message per removed parameter given, naming its replacement.
    """
    errors = []
    for name in sorted(kwargs.keys()):
        if name not in REMOVED_PARAMETERS:
            continue
        replacement = REMOVED_PARAMETERS[name]
        if "%s" in replacement:
            replacement = replacement % repr(kwargs[name])
        errors.append("%s: %s is gone: write %s" % (what, name, replacement))
    return errors

def check_gpu_type(device, name, tags, exec_properties, exec_compatible_with):
    """What is wrong with gpu_type(...)'s arguments, if anything.

    Args:
      device: gpu_type's device.
      name: gpu_type's name.
      tags: gpu_type's tags.
      exec_properties: gpu_type's exec_properties.
      exec_compatible_with: gpu_type's exec_compatible_with.

    Returns:
      struct(error = None or str).
    """
    what = "gpu_type(device = %r)" % device
    if device != None and (type(device) != type("") or not device):
        return struct(error = "gpu_type: device must be a non-empty string, e.g. \"H100\"")
    if name != None and (type(name) != type("") or not name or "/" in name or ":" in name):
        return struct(error = "%s: name must be a non-empty string usable in a target name, e.g. \"h100\"" % what)
    if type(exec_properties) != type({}):
        return struct(error = "%s: exec_properties must be a dict" % what)
    if (tags != None and type(tags) != type([])) or type(exec_compatible_with) != type([]):
        return struct(error = "%s: tags and exec_compatible_with must be lists" % what)
    return struct(error = None)

def gpu_type_list(what, gpu_types):
    """gpu_types as a list of gpu_type structs.

    Args:
      what: the macro call, for messages.
      gpu_types: one gpu_type(...) or a list of them.

    Returns:
      struct(value = [gpu_type struct], error = None or str).
    """
    if type(gpu_types) == type({}):
        return struct(value = None, error = (
            "%s: gpu_types is a list now: gpu_types = [gpu_type(name = " +
            "\"h100\", device = \"H100\", ...), ...] (the dict's keys " +
            "become each gpu_type's name)"
        ) % what)
    kinds = gpu_types if type(gpu_types) == type([]) else [gpu_types]
    if not kinds:
        return struct(value = None, error = "%s: gpu_types is empty: leave it out for gpu_type()" % what)
    names = {}
    for kind in kinds:
        if type(kind) != "struct" or not hasattr(kind, "device") or not hasattr(kind, "exec_properties"):
            return struct(value = None, error = "%s: gpu_types holds %r, not a gpu_type(...)" % (what, kind))
        if len(kinds) > 1:
            if not kind.name:
                return struct(value = None, error = (
                    "%s: every gpu_type of a list needs a device or a name " +
                    "(its targets are <name>_<type name>)"
                ) % what)
            if kind.name in names:
                return struct(value = None, error = "%s: two gpu_types are named %r" % (what, kind.name))
            names[kind.name] = None
    return struct(value = kinds, error = None)
