"""AUTOTUNE_FLAGS: absl-style flags in one environment variable, as XLA_FLAGS
works for XLA, so a Bazel `env` attribute can configure a test.

    AUTOTUNE_FLAGS="--load_autotune_results_from=TEST_WORKSPACE/testdata/c.textproto
                    --require_complete_autotune_results"

Every flag has a keyword of the same name in autotune.configure().
"""
import dataclasses
import difflib
import math
import os
import re
import shlex
import sys
import textwrap

from absl import flags as absl_flags

from autotune.contract import REGENERATE_COMMAND
from autotune.errors import AutotuneFlagsError
from autotune.log import redact_text

ENV_VAR = "AUTOTUNE_FLAGS"
# Sets --autotune_retune from outside a target's AUTOTUNE_FLAGS (which its
# env attribute fixes): `bazel test --test_env=AUTOTUNE_RETUNE=1`.
RETUNE_ENV_VAR = "AUTOTUNE_RETUNE"
# The largest cache file read: a 1,000,000-entry cache is about 1.5 GB as
# text, and a read past this stops with one line naming the size (a
# device or a pipe that never ends must not fill the memory).
DEFAULT_MAX_CACHE_BYTES = 16 << 30
BACKEND_NAMES = ("auto", "gpu", "interpreter")
MISS_POLICIES = ("tune", "nearest", "seeded")
VERSION_MATCHES = ("loose", "strict")




@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """One flag: the absl definition and the Options field are both made
    from it, so the two cannot drift apart."""
    name: str
    kind: str  # string, enum, bool, integer, float or list
    default: object
    help: str
    enum_values: tuple = ()
    lower_bound: object = None
    # Resolved against the TEST_WORKSPACE/ and TEST_UNDECLARED_OUTPUTS_DIR/
    # prefixes (list flags: every item).
    path: bool = False
    # Who sets it, as docs/flags.md groups the table: YOU, FOR_YOU (the
    # macro, the pytest plugin or regenerate write it) or REMOTE.
    group: str = "you"


# The groups of docs/flags.md, in its order.
YOU = "you"
FOR_YOU = "for you"
REMOTE = "remote"
GROUPS = (YOU, FOR_YOU, REMOTE)


# Options' fields follow this order (it is also the order in which error
# messages list the known flags).
FLAGS = (
    FlagSpec(
        "per_fusion_autotune_cache_dir", "string", None,
        "Directory with one cache file per fusion, shared by runs and "
        "processes. Must exist.", path=True,
        group=FOR_YOU),
    FlagSpec(
        "autotune_cache_mode", "enum", "update",
        "update: add tuned fusions to the per-fusion directory; read: never "
        "write it.", enum_values=("update", "read"),
        group=FOR_YOU),
    FlagSpec(
        "dump_autotune_results_to", "string", None,
        "Write the results used by this run to this file at exit (.txt, "
        ".textproto, .pbtxt, .txtpb, .prototxt: text format; otherwise "
        "binary).", path=True,
        group=FOR_YOU),
    FlagSpec(
        "load_autotune_results_from", "list", (),
        "Comma-separated results files to load at start; may be repeated.",
        path=True, group=FOR_YOU),
    FlagSpec(
        "autotune_max_cache_bytes", "integer", DEFAULT_MAX_CACHE_BYTES,
        "The largest results file read (loaded, incumbents, an existing "
        "dump); a larger one is an error naming its size.", lower_bound=1),
    FlagSpec(
        "require_complete_autotune_results", "bool", False,
        "Fail on any cache miss, listing every missing fusion.",
        group=FOR_YOU),
    FlagSpec(
        "autotune_backend", "enum", "auto",
        "auto: the GPU when one is visible, else Triton's interpreter.",
        enum_values=tuple(BACKEND_NAMES)),
    FlagSpec(
        "autotune_miss_policy", "enum", "tune",
        "On a miss: tune (full search), nearest (reuse the nearest tuned "
        "shape's config without tuning), seeded (short search from "
        "neighbours).", enum_values=MISS_POLICIES),
    FlagSpec(
        "autotune_expected_gpu", "string", None,
        "Fail unless the device key contains this GPU name (for example "
        "H200): a cache tuned for one GPU type is not run on another.",
        group=FOR_YOU),
    FlagSpec(
        "autotune_report_to", "string", None,
        "JSON report path (default: TEST_UNDECLARED_OUTPUTS_DIR/"
        "autotune_report.json when that is set).", path=True),
    FlagSpec(
        "autotune_verbosity", "enum", "normal",
        "What tuning says while it runs (through the autotune.tuning "
        "logger): quiet: nothing; normal: a line when each fusion starts "
        "and ends tuning; verbose: also one line per candidate measured.",
        enum_values=("quiet", "normal", "verbose")),
    FlagSpec(
        "autotune_fail_if_sharded", "bool", False,
        "Fail when run as one shard of several (dump targets set this: a "
        "dump must see every fusion).",
        group=FOR_YOU),
    # Remote cache (autotune/cache/remote.py): its settings travel in its
    # URL (REMOTE_URL_PARAMETERS). No password anywhere in flags or URL:
    # both are printed in test logs; the password comes from the
    # environment or a file.
    FlagSpec(
        "autotune_remote_cache", "string", None,
        "redis://HOST:PORT/DB (rediss:// for TLS), its settings as URL "
        "parameters (?mode=read&prefix=NAME&expiry_s=N&timeout_s=S"
        "&password_file=PATH&ca_file=PATH): a shared cache looked up after the per-fusion "
        "directory. The password comes from AUTOTUNE_REMOTE_CACHE_PASSWORD "
        "or a file, never from a flag or the URL.", group=REMOTE),
    FlagSpec(
        "autotune_compile_check", "string", None,
        "Comma-separated GPU targets (sm_90,sm_80): before measuring a "
        "fusion, compile every config for each with Triton's compiler and "
        "drop those that fail or exceed the target's limits."),
    FlagSpec(
        "autotune_compile_jobs", "integer", 0,
        "GPU backend: on a miss, compile the candidates for the device's "
        "target in this many processes (into Triton's on-disk cache) before "
        "timing them one by one; 0: the number of CPUs, at most 8; 1: "
        "compile in the tuning process as each is first launched.",
        lower_bound=0),
    FlagSpec(
        "autotune_compiled_kernels", "list", (),
        "Comma-separated directories of kernels compiled ahead "
        "(`autotune_cache compile`, or gpu_autotuned_test's compile_for): "
        "Triton loads a binary from them instead of compiling it when its "
        "cache key matches; read when autotune is imported. A "
        "compiled-kernel directory is code: use only ones you trust.",
        path=True, group=FOR_YOU),
    FlagSpec(
        "require_compiled_kernels", "bool", False,
        "With --autotune_compiled_kernels (for CI): a launch that "
        "compiles instead of being served from them is an error naming "
        "the kernel and why nothing was served."),
    FlagSpec(
        "autotune_incumbents_from", "list", (),
        "Comma-separated results files whose entries are incumbents: a "
        "fusion being tuned keeps its incumbent's config unless a challenger "
        "is faster by more than the measured noise. Files that do not exist "
        "are ignored; may be repeated.", path=True, group=FOR_YOU),
    FlagSpec(
        "autotune_retune", "bool", False,
        "With --autotune_incumbents_from: re-measure every fusion, the "
        "incumbents' configs kept unless beaten (a new GPU, driver or "
        "Triton). Default: an incumbent whose key matches is used as it is, "
        "without measuring, and only missing or stale fusions are tuned. "
        "AUTOTUNE_RETUNE=1 in the environment sets it too (`regenerate "
        "--retune` passes it to the dump targets).",
        group=FOR_YOU),
    FlagSpec(
        "autotune_version_match", "enum", "loose",
        "An entry tuned under another Triton, torch or CUDA major.minor: "
        "loose: a hit, counted and listed in the exit summary and report "
        "(`regenerate --retune` refreshes them); strict: stale, re-tuned "
        "(or, with require-complete, an error).",
        enum_values=VERSION_MATCHES),
    FlagSpec(
        "autotune_workers", "integer", 1,
        "On a miss, measure candidates in this many worker processes (one "
        "per GPU on a multi-GPU host; plain processes on the interpreter).",
        lower_bound=1),
    FlagSpec(
        "autotune_distributed", "enum", "auto",
        "Ranks of a torch.distributed job tune each miss together: the "
        "candidates split among them, one winner for all (docs/multi-gpu.md)."
        " auto: when a default process group is initialized; on: require "
        "one; off: every process tunes alone.",
        enum_values=("auto", "on", "off")),
    FlagSpec(
        "autotune_distributed_timeout_s", "float", 120.0,
        "How long a rank waits for the others at each step of a shared "
        "tuning before it stops with an error naming the missing ranks "
        "(a dead rank, or one that missed another fusion).",
        lower_bound=0.001),
    FlagSpec(
        "autotune_dropin", "bool", False,
        "Read at `import autotune`: triton.autotune builds this project's "
        "autotuner (autotune.install()), so @triton.autotune kernels are "
        "persisted unchanged."),
)



@dataclasses.dataclass(frozen=True)
class URLParameter:
    """One setting of the remote cache, a parameter of its URL."""
    name: str
    kind: str  # string, integer, float, enum
    default: object
    help: str
    path: bool = False
    enum_values: tuple = ()


# The remote cache's settings: --autotune_remote_cache=URL?NAME=VALUE&...
# (autotune/cache/remote.py parses them).
REMOTE_URL_PARAMETERS = (
    URLParameter("mode", "enum", "update",
                 "update: publish tuned fusions (first writer wins); read: "
                 "never write to the remote.",
                 enum_values=("update", "read")),
    URLParameter("prefix", "string", "autotune",
                 "Namespace of the remote keys: PREFIX:vKEY_VERSION:... (1 "
                 "to 64 letters, digits or _ . - /)."),
    URLParameter("expiry_s", "integer", 0,
                 "Expire published entries after this many seconds (0: "
                 "never)."),
    URLParameter("timeout_s", "float", 1.0,
                 "Connect and read timeout of each remote operation, in "
                 "seconds (> 0)."),
    URLParameter("password_file", "string", None,
                 "File holding the password (instead of "
                 "AUTOTUNE_REMOTE_CACHE_PASSWORD).", path=True),
    URLParameter("ca_file", "string", None,
                 "CA certificates to verify a rediss:// server with "
                 "(default: the system's).", path=True),
)

# Flags of earlier releases whose setting is now a URL parameter: given,
# each is one line naming the URL form.
REMOVED_FLAGS = {
    "autotune_remote_cache_prefix": "prefix",
    "autotune_remote_cache_expiry_s": "expiry_s",
    "autotune_remote_cache_timeout_s": "timeout_s",
    "autotune_remote_cache_password_file": "password_file",
    "autotune_remote_cache_ca_file": "ca_file",
    "autotune_remote_cache_mode": "mode",
}


def removed_flag_message(name):
    """The line for a flag REMOVED_FLAGS names; None for any other."""
    parameter = REMOVED_FLAGS.get(name)
    if parameter is None:
        return None
    return (f"--{name} is gone: the remote cache's settings are parameters "
            f"of its URL: --autotune_remote_cache=redis://HOST:PORT/DB?"
            f"{parameter}=VALUE")


@dataclasses.dataclass(frozen=True)
class EnvVar:
    """One environment variable the package or its tools read."""
    name: str
    group: str  # YOU, FOR_YOU or REMOTE, as for flags
    setter: str  # who sets it
    help: str


# Every environment variable the package and its tools read, or its
# macros set (besides Bazel's TEST_* and Triton's own);
# tests/test_flags.py checks that the code names no other AUTOTUNE_ one
# and that docs/flags.md lists each.
ENV_VARS = (
    EnvVar(ENV_VAR, YOU, "you; the macro adds to it",
           "The flags above, as XLA_FLAGS holds XLA's."),
    EnvVar("AUTOTUNE_RUNNER_STAMP", YOU, "the GPU runner, before bazel test",
           "The runner's GPU, driver, Triton, torch and CUDA "
           "(tools/runner_stamp.py): keys the cached results of the "
           "macro's targets, which inherit it; a test checks it against "
           "what it runs with."),
    EnvVar("AUTOTUNE_LOCK_DIR", YOU, "you (regenerate passes it on)",
           "Folder of the device locks and GPU slots, shared by every "
           "process of a host (default /tmp/rules_autotune-locks-UID); an "
           "absolute path."),
    EnvVar("AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE", YOU,
           "you (regenerate passes it on)",
           "Load targets that share one GPU under the gpu_slot wrapper "
           "(default 2)."),
    EnvVar("AUTOTUNE_GPU_SLOT_DEVICES", YOU, "you (regenerate passes it on)",
           "How many devices the gpu_slot wrapper spreads tests over "
           "(default: the GPUs nvidia-smi lists)."),
    EnvVar("AUTOTUNE_GPU_SLOT_KIND", YOU, "you, rarely",
           "dump or load: overrides the gpu_slot wrapper's guess of what a "
           "test is."),
    EnvVar("AUTOTUNE_GPU_TYPES_ENTRY", FOR_YOU,
           "the macro, on each target of several GPU types",
           "The target's gpu_type name, for the line a test on another "
           "device prints."),
    EnvVar(RETUNE_ENV_VAR, FOR_YOU, "regenerate --retune",
           "1: sets --autotune_retune in the dump targets it runs."),
    EnvVar("AUTOTUNE_COMPILED_KERNEL_DIRS", FOR_YOU, "import autotune",
           "The compiled-kernel folders (--autotune_compiled_kernels) for "
           "the Triton cache manager of this process and its children."),
    EnvVar("AUTOTUNE_REQUIRE_COMPILED_KERNELS", FOR_YOU, "import autotune",
           "1: --require_compiled_kernels, carried to the Triton cache "
           "manager of this process and its children (a kernel compiled "
           "there is an error)."),
    EnvVar("AUTOTUNE_REMOTE_CACHE_PASSWORD", REMOTE, "you, or the CI secret",
           "The remote cache's password (never a flag or in the URL)."),
    EnvVar("AUTOTUNE_REMOTE_CACHE_PASSWORD_FILE", REMOTE, "you",
           "A file holding it (the URL's password_file comes first)."),
)

_PYTHON_TYPES = {"string": str, "enum": str, "bool": bool, "integer": int,
                 "float": float, "list": list}


def _options_field(spec):
    if spec.kind == "list":
        default = dataclasses.field(
            default_factory=lambda items=spec.default: list(items))
    else:
        default = dataclasses.field(default=spec.default)
    return spec.name, _PYTHON_TYPES[spec.kind], default


Options = dataclasses.make_dataclass(
    "Options", [_options_field(spec) for spec in FLAGS],
    namespace={"__module__": __name__})
Options.__doc__ = ("The value of every flag, one field per flag, named as "
                   "the flag.")

# Flags that take a comma-separated list: repeating one adds to the list.
# Any other flag given twice is an error (the last value would silently win).
LIST_FLAGS = tuple(spec.name for spec in FLAGS if spec.kind == "list")


def _define(values):
    """Defines every flag of FLAGS in the absl FlagValues `values`."""
    for spec in FLAGS:
        common = dict(help=spec.help, flag_values=values)
        if spec.kind == "string":
            absl_flags.DEFINE_string(spec.name, spec.default, **common)
        elif spec.kind == "enum":
            absl_flags.DEFINE_enum(spec.name, spec.default,
                                   list(spec.enum_values), **common)
        elif spec.kind == "bool":
            absl_flags.DEFINE_bool(spec.name, spec.default, **common)
        elif spec.kind == "integer":
            absl_flags.DEFINE_integer(spec.name, spec.default,
                                      lower_bound=spec.lower_bound, **common)
        elif spec.kind == "float":
            absl_flags.DEFINE_float(spec.name, spec.default,
                                    lower_bound=spec.lower_bound, **common)
        elif spec.kind == "list":
            absl_flags.DEFINE_multi_string(spec.name, list(spec.default),
                                           **common)
        else:
            raise ValueError(f"flag --{spec.name}: unknown kind {spec.kind!r}")


def flag_names():
    return [spec.name for spec in FLAGS]


HELP_ARGS = ("--help", "-h", "--helpfull")


def usage():
    """Every flag with its kind, default and help text, from FLAGS."""
    lines = [f"{ENV_VAR} flags (also autotune.configure() keywords):"]
    for spec in FLAGS:
        kind = "|".join(spec.enum_values) if spec.enum_values else spec.kind
        default = "" if spec.default in (None, ()) else \
            f", default {spec.default!r}"
        lines.append(f"  --{spec.name} ({kind}{default})")
        lines += textwrap.wrap(spec.help, 76, initial_indent="      ",
                               subsequent_indent="      ")
    return "\n".join(lines)


def _did_you_mean(name):
    close = difflib.get_close_matches(name, flag_names(), n=1)
    return f"did you mean --{close[0]}? " if close else ""


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


def parse(text, env=None, resolve=True):
    """Parses an AUTOTUNE_FLAGS value into Options, resolving path prefixes
    (unless resolve is False)."""
    values = absl_flags.FlagValues()
    _define(values)
    try:
        argv = shlex.split(text or "")
    except ValueError as e:
        # Never the value itself: it may hold a URL with a password, and
        # with an unbalanced quote no part of it can be trusted to be one.
        named = re.findall(r"(?<![^\s'\"])--?([A-Za-z_]+)", text)
        raise AutotuneFlagsError(
            f"{ENV_VAR}: cannot split into flags ({e}; check the quotes)"
            + (f"; it names {', '.join('--' + n for n in named)}"
               if named else ""))
    for number, arg in enumerate(argv, 1):
        if arg.split("=", 1)[0] in HELP_ARGS:
            # Asked for where the flags are read, so it shows wherever that
            # is (a test log, a pytest error, a script's traceback).
            raise AutotuneFlagsError(f"{ENV_VAR}={arg}: the flags are:\n"
                                     + usage())
        removed = removed_flag_message(arg.lstrip("-").split("=", 1)[0])
        if removed:
            raise AutotuneFlagsError(f"{ENV_VAR}: {removed}")
        if not arg.startswith("-"):
            # Not quoted: it may be the part of a password after a space.
            after = f" (after {argv[number - 2].split('=')[0]})" \
                if number > 1 and argv[number - 2].startswith("-") else ""
            raise AutotuneFlagsError(
                f"{ENV_VAR}: item {number}{after} is not a flag (flags look "
                "like --name=value; a value with spaces needs quotes)")
    try:
        values(["autotune"] + argv, known_only=False)
    except absl_flags.UnrecognizedFlagError as e:
        raise AutotuneFlagsError(
            f"{ENV_VAR}: unknown flag --{e.flagname}; "
            f"{_did_you_mean(e.flagname)}known flags: "
            + ", ".join("--" + n for n in flag_names())
            + f" ({ENV_VAR}=--help explains each)")
    except absl_flags.Error as e:
        raise AutotuneFlagsError(f"{ENV_VAR}: {redact_text(e)}")
    for spec in FLAGS:
        if spec.kind == "float" and not math.isfinite(values[spec.name].value):
            raise AutotuneFlagsError(
                f"{ENV_VAR}: --{spec.name}={values[spec.name].value}: "
                "expected a finite number")
    for name in flag_names():
        if name not in LIST_FLAGS and values[name].present > 1:
            raise AutotuneFlagsError(
                f"{ENV_VAR}: --{name} is given {values[name].present} times; "
                "it takes one value (give it once)")
    options = Options(**{name: values[name].value for name in flag_names()})
    for name in LIST_FLAGS:
        setattr(options, name, split_list(getattr(options, name)))
    return resolve_options(options, env) if resolve else options


def import_time_choices(env=None):
    """(backend, drop-in, compiled-kernel directories) as AUTOTUNE_FLAGS
    sets them, for the choices made when the package is imported, before
    any kernel is decorated or compiled. The same parser as the session's,
    so `--autotune_dropin=1`, `=true`, `=True` and the bare flag agree; a
    value that does not parse gives the defaults here, and the session
    reports it with its context."""
    env = os.environ if env is None else env
    exit_with_help_if_asked(env.get(ENV_VAR, ""))
    try:
        options = parse(env.get(ENV_VAR, ""), env, resolve=False)
    except AutotuneFlagsError:
        return "auto", False, (), False
    exit_if_bazel_cache_missing(options, env)
    compiled = []
    for path in options.autotune_compiled_kernels:
        try:
            compiled.append(resolve_path(path, env,
                                         "autotune_compiled_kernels"))
        except AutotuneFlagsError:
            pass  # the session reports it
    return (options.autotune_backend, bool(options.autotune_dropin),
            tuple(compiled), bool(options.require_compiled_kernels))


def exit_with_help_if_asked(text):
    """AUTOTUNE_FLAGS=--help: the flag list on stdout and exit status 0,
    as a program's --help does, when the package is imported (before any
    session reads the flags)."""
    try:
        argv = shlex.split(text or "")
    except ValueError:
        return  # parse() reports it, with its context
    if any(arg.split("=", 1)[0] in HELP_ARGS for arg in argv):
        sys.stdout.write(usage() + "\n")
        sys.stdout.flush()
        raise SystemExit(0)


def exit_if_bazel_cache_missing(options, env):
    """Under `bazel test` (TEST_TARGET set), a results file to load that
    does not exist fails the whole target: one line saying so and the
    command that creates it, and exit status 1, when the package is
    imported, instead of a traceback in every test that meets a kernel
    (and in every shard). Elsewhere the session reports it where the cache
    is first needed."""
    if not env.get("TEST_TARGET"):
        return
    root = os.path.join(env.get("TEST_SRCDIR", ""),
                        env.get("TEST_WORKSPACE", "")) + os.sep
    for given in split_list(options.load_autotune_results_from):
        try:
            path = resolve_path(given, env, "load_autotune_results_from")
        except AutotuneFlagsError:
            return  # the session reports it, with its context
        if os.path.exists(path):
            continue
        shown = path[len(root):] if env.get("TEST_SRCDIR") and \
            path.startswith(root) else path
        sys.stderr.write(
            f"autotune: autotune cache {shown} does not exist yet: create "
            f"it with `{REGENERATE_COMMAND}`, then commit it\n")
        sys.stderr.flush()
        raise SystemExit(1)


def split_list(value):
    """A list flag's value from one string or a list of them: each item
    may hold several comma-separated paths; empty items are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [part for item in value for part in str(item).split(",") if part]


def resolve_options(options, env=None):
    """Checks the values (check_values) and resolves the path flags."""
    check_values(options)
    for spec in FLAGS:
        if spec.path and spec.kind != "list":
            setattr(options, spec.name, resolve_path(
                getattr(options, spec.name), env, spec.name))
    for name in LIST_FLAGS:
        setattr(options, name, [resolve_path(p, env, name)
                                for p in getattr(options, name) or []])
    return options


def _kind_problem(spec, value):
    """What is wrong with the type of a value given through the Python API
    (None: nothing). The flag parser gets text and converts it; the API
    gets Python values and takes them as they are."""
    if spec.kind == "bool" and not isinstance(value, bool):
        return "expected True or False"
    if spec.kind == "integer" and (isinstance(value, bool) or
                                   not isinstance(value, int)):
        return "expected a whole number"
    if spec.kind == "float" and (isinstance(value, bool) or
                                 not isinstance(value, (int, float)) or
                                 not math.isfinite(value)):
        return "expected a finite number"
    if spec.kind in ("string", "enum") and not isinstance(value, str):
        return "expected a string"
    return None


def check_values(options):
    """Checks every value as the flag parser checks flags, with the same
    definitions: the types, then the flag's own parser (enum values,
    bounds). Options made by parse() pass unchanged; values given through
    the Python API (configure(), @pytest.mark.autotune) get one line
    naming the option instead of an error deep inside a run."""
    values = absl_flags.FlagValues()
    _define(values)
    for spec in FLAGS:
        value, flag = getattr(options, spec.name), values[spec.name]
        if value is None or spec.kind == "list":
            continue
        if spec.kind == "string" and spec.path and \
                isinstance(value, os.PathLike):
            value = os.fspath(value)
            setattr(options, spec.name, value)
        problem = _kind_problem(spec, value)
        if problem is None:
            try:
                # Converts nothing for values of the right type: it checks
                # the enum values and the bounds, as for a flag.
                flag.parser.parse(value)
            except (ValueError, TypeError) as e:
                problem = _parser_message(spec, e)
        if problem is not None:
            raise AutotuneFlagsError(f"{spec.name}={value!r}: {problem}")


def _parser_message(spec, error):
    """absl's message, in the words of this module for the common cases."""
    if spec.enum_values:
        return "expected one of " + ", ".join(spec.enum_values)
    if spec.lower_bound is not None:
        what = "a whole number" if spec.kind == "integer" else "a number"
        return f"expected {what} >= {spec.lower_bound}"
    return redact_text(error)


def from_environment(env=None):
    env = os.environ if env is None else env
    options = parse(env.get(ENV_VAR, ""), env)
    retune = env.get(RETUNE_ENV_VAR, "").strip().lower()
    if retune in ("1", "true", "yes", "on"):
        options.autotune_retune = True
    elif retune not in ("", "0", "false", "no", "off"):
        raise AutotuneFlagsError(
            f"{RETUNE_ENV_VAR}={env[RETUNE_ENV_VAR]!r}: expected 1 or 0")
    return options


if __name__ == "__main__":  # python3 -m autotune.flags: the same listing
    print(usage())
