"""AUTOTUNE_FLAGS: absl-style flags in one environment variable, as XLA_FLAGS
works for XLA, so a Bazel `env` attribute can configure a test.

    AUTOTUNE_FLAGS="--load_autotune_results_from=TEST_WORKSPACE/testdata/c.textproto
                    --require_complete_autotune_results"

Every flag has a keyword of the same name in autotune.configure().
"""
import dataclasses
import os
import shlex

from absl import flags as absl_flags

from autotune.backends import BACKEND_NAMES

ENV_VAR = "AUTOTUNE_FLAGS"
MISS_POLICIES = ("tune", "nearest", "seeded")


class AutotuneFlagsError(Exception):
    pass


@dataclasses.dataclass
class Options:
    per_fusion_autotune_cache_dir: str = None
    autotune_cache_mode: str = "update"
    dump_autotune_results_to: str = None
    load_autotune_results_from: list = dataclasses.field(default_factory=list)
    require_complete_autotune_results: bool = False
    autotune_backend: str = "auto"
    autotune_miss_policy: str = "tune"
    autotune_expected_gpu: str = None
    autotune_report_to: str = None
    autotune_fail_if_sharded: bool = False
    # Remote cache (autotune/remote_cache.py). No password flag: flags are
    # printed in test logs; the password comes from the environment or a file.
    autotune_remote_cache: str = None
    autotune_remote_cache_mode: str = "update"
    autotune_remote_cache_prefix: str = "autotune"
    autotune_remote_cache_expiry_s: int = 0
    autotune_remote_cache_timeout_s: float = 1.0
    autotune_remote_cache_password_file: str = None
    autotune_remote_cache_ca_file: str = None
    autotune_compile_check: str = None
    autotune_incumbents_from: list = dataclasses.field(default_factory=list)
    autotune_workers: int = 1
    autotune_dropin: bool = False


# Flags that take a comma-separated list: repeating one adds to the list.
# Any other flag given twice is an error (the last value would silently win).
LIST_FLAGS = ("load_autotune_results_from", "autotune_incumbents_from")


def _define(values):
    absl_flags.DEFINE_string(
        "per_fusion_autotune_cache_dir", None,
        "Directory with one cache file per fusion, shared by runs and "
        "processes. Must exist.", flag_values=values)
    absl_flags.DEFINE_enum(
        "autotune_cache_mode", "update", ["update", "read"],
        "update: add tuned fusions to the per-fusion directory; read: never "
        "write it.", flag_values=values)
    absl_flags.DEFINE_string(
        "dump_autotune_results_to", None,
        "Write the results used by this run to this file at exit (.txt, "
        ".textproto, .pbtxt, .txtpb, .prototxt: text format; otherwise "
        "binary).",
        flag_values=values)
    absl_flags.DEFINE_multi_string(
        "load_autotune_results_from", [],
        "Comma-separated results files to load at start; may be repeated.",
        flag_values=values)
    absl_flags.DEFINE_bool(
        "require_complete_autotune_results", False,
        "Fail on any cache miss, listing every missing fusion.",
        flag_values=values)
    absl_flags.DEFINE_enum(
        "autotune_backend", "auto", list(BACKEND_NAMES),
        "auto: the GPU when one is visible, else Triton's interpreter.",
        flag_values=values)
    absl_flags.DEFINE_enum(
        "autotune_miss_policy", "tune", list(MISS_POLICIES),
        "On a miss: tune (full search), nearest (reuse the nearest tuned "
        "shape's config without tuning), seeded (short search from "
        "neighbours).", flag_values=values)
    absl_flags.DEFINE_string(
        "autotune_expected_gpu", None,
        "Fail unless the device key contains this GPU name (for example "
        "H200): a cache tuned for one GPU type is not run on another.",
        flag_values=values)
    absl_flags.DEFINE_string(
        "autotune_report_to", None,
        "JSON report path (default: TEST_UNDECLARED_OUTPUTS_DIR/"
        "autotune_report.json when that is set).", flag_values=values)
    absl_flags.DEFINE_bool(
        "autotune_fail_if_sharded", False,
        "Fail when run as one shard of several (dump targets set this: a "
        "dump must see every fusion).", flag_values=values)
    absl_flags.DEFINE_multi_string(
        "autotune_incumbents_from", [],
        "Comma-separated results files whose entries are incumbents: a "
        "fusion being tuned keeps its incumbent's config unless a challenger "
        "is faster by more than the measured noise. Files that do not exist "
        "are ignored; may be repeated.", flag_values=values)
    absl_flags.DEFINE_bool(
        "autotune_dropin", False,
        "Read at `import autotune`: triton.autotune builds this project's "
        "autotuner (autotune.install()), so @triton.autotune kernels are "
        "persisted unchanged.", flag_values=values)
    _define_remote(values)
    _define_compile_check(values)
    absl_flags.DEFINE_integer(
        "autotune_workers", 1,
        "On a miss, measure candidates in this many worker processes (one "
        "per GPU on a multi-GPU host; plain processes on the interpreter).",
        lower_bound=1, flag_values=values)


def _define_remote(values):
    absl_flags.DEFINE_string(
        "autotune_remote_cache", None,
        "redis://HOST:PORT/DB (rediss:// for TLS): a shared cache looked up "
        "after the per-fusion directory. The password comes from "
        "AUTOTUNE_REMOTE_CACHE_PASSWORD or a file, never from a flag.",
        flag_values=values)
    absl_flags.DEFINE_enum(
        "autotune_remote_cache_mode", "update", ["update", "read"],
        "update: publish tuned fusions (first writer wins); read: never "
        "write to the remote.", flag_values=values)
    absl_flags.DEFINE_string(
        "autotune_remote_cache_prefix", "autotune",
        "Namespace of the remote keys: PREFIX:vKEY_VERSION:...",
        flag_values=values)
    absl_flags.DEFINE_integer(
        "autotune_remote_cache_expiry_s", 0,
        "Expire published entries after this many seconds (0: never).",
        lower_bound=0, flag_values=values)
    absl_flags.DEFINE_float(
        "autotune_remote_cache_timeout_s", 1.0,
        "Connect and read timeout of each remote operation.",
        lower_bound=0.001, flag_values=values)
    absl_flags.DEFINE_string(
        "autotune_remote_cache_password_file", None,
        "File holding the remote cache password (instead of "
        "AUTOTUNE_REMOTE_CACHE_PASSWORD).", flag_values=values)
    absl_flags.DEFINE_string(
        "autotune_remote_cache_ca_file", None,
        "CA certificates to verify a rediss:// server with (default: the "
        "system's).", flag_values=values)


def _define_compile_check(values):
    absl_flags.DEFINE_string(
        "autotune_compile_check", None,
        "Comma-separated GPU targets (sm_90,sm_80): before measuring a "
        "fusion, compile every config for each with Triton's compiler and "
        "drop those that fail or exceed the target's limits.",
        flag_values=values)


def flag_names():
    return [f.name for f in dataclasses.fields(Options)]


def resolve_path(path, env=None, flag="path"):
    """Expands the TEST_WORKSPACE/ and TEST_UNDECLARED_OUTPUTS_DIR/ prefixes
    from the environment, as XLA does."""
    env = os.environ if env is None else env
    if path is None:
        return None
    if path.startswith("TEST_WORKSPACE/"):
        srcdir, workspace = env.get("TEST_SRCDIR"), env.get("TEST_WORKSPACE")
        if not srcdir or not workspace:
            raise AutotuneFlagsError(
                f"--{flag}={path}: TEST_WORKSPACE/ needs TEST_SRCDIR and "
                "TEST_WORKSPACE in the environment (set by bazel test)")
        return os.path.join(srcdir, workspace, path[len("TEST_WORKSPACE/"):])
    if path.startswith("TEST_UNDECLARED_OUTPUTS_DIR/"):
        outdir = env.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if not outdir:
            raise AutotuneFlagsError(
                f"--{flag}={path}: TEST_UNDECLARED_OUTPUTS_DIR is not set "
                "(it is set by bazel test)")
        return os.path.join(outdir, path[len("TEST_UNDECLARED_OUTPUTS_DIR/"):])
    return path


def parse(text, env=None):
    """Parses an AUTOTUNE_FLAGS value into Options, resolving path prefixes."""
    values = absl_flags.FlagValues()
    _define(values)
    try:
        argv = shlex.split(text or "")
    except ValueError as e:
        raise AutotuneFlagsError(f"{ENV_VAR}: cannot split {text!r}: {e}")
    for arg in argv:
        if not arg.startswith("-"):
            raise AutotuneFlagsError(
                f"{ENV_VAR}: {arg!r} is not a flag (flags look like "
                "--name=value)")
    try:
        values(["autotune"] + argv, known_only=False)
    except absl_flags.UnrecognizedFlagError as e:
        raise AutotuneFlagsError(
            f"{ENV_VAR}: unknown flag --{e.flagname}; known flags: "
            + ", ".join("--" + n for n in flag_names()))
    except absl_flags.Error as e:
        raise AutotuneFlagsError(f"{ENV_VAR}: {e}")
    for name in flag_names():
        if name not in LIST_FLAGS and values[name].present > 1:
            raise AutotuneFlagsError(
                f"{ENV_VAR}: --{name} is given {values[name].present} times; "
                "it takes one value (give it once)")
    options = Options(**{name: values[name].value for name in flag_names()})
    for name in LIST_FLAGS:
        setattr(options, name, split_list(getattr(options, name)))
    return resolve_options(options, env)


def split_list(value):
    """A list flag's value from one string or a list of them: each item
    may hold several comma-separated paths; empty items are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [part for item in value for part in str(item).split(",") if part]


def resolve_options(options, env=None):
    workers = options.autotune_workers
    if isinstance(workers, bool) or not isinstance(workers, int) \
            or workers < 1:
        raise AutotuneFlagsError(
            f"autotune_workers must be a whole number >= 1, got {workers!r}")
    options.per_fusion_autotune_cache_dir = resolve_path(
        options.per_fusion_autotune_cache_dir, env,
        "per_fusion_autotune_cache_dir")
    options.dump_autotune_results_to = resolve_path(
        options.dump_autotune_results_to, env, "dump_autotune_results_to")
    options.autotune_report_to = resolve_path(
        options.autotune_report_to, env, "autotune_report_to")
    for name in ("autotune_remote_cache_password_file",
                 "autotune_remote_cache_ca_file"):
        setattr(options, name, resolve_path(getattr(options, name), env,
                                            name))
    for name in LIST_FLAGS:
        setattr(options, name, [resolve_path(p, env, name)
                                for p in getattr(options, name) or []])
    return options


def check_values(options):
    """Options given through the Python API are checked as the flag parser
    checks flags (enum values, booleans, numbers), using its definitions."""
    values = absl_flags.FlagValues()
    _define(values)
    for name in flag_names():
        value, flag = getattr(options, name), values[name]
        if value is None or value == flag.default:
            continue
        allowed = getattr(flag.parser, "enum_values", None)
        if allowed and value not in allowed:
            raise AutotuneFlagsError(
                f"{name}={value!r}: expected one of {', '.join(allowed)}")
        if isinstance(flag.parser, absl_flags.BooleanParser) and \
                not isinstance(value, bool):
            raise AutotuneFlagsError(
                f"{name}={value!r}: expected True or False")
        if isinstance(flag.parser, absl_flags.FloatParser) and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))):
            raise AutotuneFlagsError(f"{name}={value!r}: expected a number")


def from_environment(env=None):
    env = os.environ if env is None else env
    return parse(env.get(ENV_VAR, ""), env)
