"""Regenerate's Bazel driving: the bazel commands it runs and what it
reads back from them.

- the startup options of the `bazel run` that started regenerate, so that
  the nested commands talk to the same server (calling_startup_options);
- the dump targets' query: the targets within the patterns, the other dump
  targets of their caches, the device each needs (select_targets,
  find_target_devices), with the --config values query cannot take
  (QueryArgs);
- the test run: unsharded, under tools/gpu_slot.py, with Triton's cache
  and the outputs Bazel keeps (run_dump_targets);
- the outputs collected: a passed target's dump and the device its report
  names (collect_dump).

autotune/cli/regenerate.py keeps the command line and the merge.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
import zipfile

from autotune import codec
from autotune.cli.kernel_tree import find_workspace
from autotune.contract import (DEVICE_TAG_PREFIX,
                               CACHE_TAG_PREFIX as CACHE_TAG,
                               DUMP_FILE, DUMP_SUFFIX, DUMP_TAG, REPORT_FILE)
from autotune.errors import RegenerateError
from autotune.flags import RETUNE_ENV_VAR
from autotune.host import lock_files
# The repository root, where tools/gpu_slot.py is: dump targets run under
# it, named by its label.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _bazel(bazel, args, cwd, capture=True):
    """Runs bazel (a path, or [path, startup options...]) with args."""
    command = [bazel] if isinstance(bazel, str) else list(bazel)
    try:
        return subprocess.run(command + args, cwd=cwd, text=True,
                              capture_output=capture)
    except FileNotFoundError:
        raise RegenerateError(f"cannot run {command[0]!r}: not found (set "
                              "--bazel or BAZEL)")


_UNDEFINED_CONFIG = re.compile(
    r"[Cc]onfig value '([^']+)' is not defined in any \.rc file")
_UNRECOGNIZED = re.compile(r"Unrecognized option: (\S+)")


class QueryArgs:
    """The --bazel_arg values that `bazel query` takes.

    A --config whose rc lines are all `build:NAME` or `test:NAME` is not
    defined for query (Bazel says so and stops): query runs without it,
    once noted; `bazel test` still gets it. Any other option query does
    not know is an error that names --bazel_test_arg."""

    def __init__(self, args):
        self.args = list(args)
        self.dropped = []

    def run(self, bazel, query_args, cwd):
        while True:
            result = _bazel(bazel, ["query"] + self.args + query_args, cwd)
            if result.returncode == 0:
                return result
            undefined = _UNDEFINED_CONFIG.search(result.stderr or "")
            flag = f"--config={undefined.group(1)}" if undefined else None
            if flag is None or flag not in self.args:
                return result
            self.args = [a for a in self.args if a != flag]
            self.dropped.append(flag)
            print(f"regenerate: note: {flag}: no rc line defines it for "
                  "bazel query (build:/test: lines only); bazel query runs "
                  "without it, bazel test with it", file=sys.stderr)


def _query_error(result):
    text = (result.stderr or "").strip()
    unknown = _UNRECOGNIZED.search(text)
    if unknown:
        return (f"bazel query does not take {unknown.group(1)} (from "
                "--bazel_arg or an rc file's --config lines): give options "
                "only bazel test takes with --bazel_test_arg "
                "(--bazel_test_arg=--config=NAME for a config of "
                "build:/test: options)")
    return f"bazel query failed:\n{text}"


def find_dump_targets(bazel, patterns, cwd, bazel_args, keep_going=False):
    """bazel_args: a QueryArgs, or a list of arguments query takes."""
    query = bazel_args if isinstance(bazel_args, QueryArgs) \
        else QueryArgs(bazel_args)
    expr = " + ".join(f'attr("tags", "\\b{DUMP_TAG}\\b", {p})'
                      for p in patterns)
    result = query.run(bazel, [expr, "--output=xml"]
                       + (["--keep_going"] if keep_going else []), cwd)
    # 3: partial result (--keep_going, a package that does not load).
    if result.returncode not in ((0, 3) if keep_going else (0,)) or \
            not result.stdout.strip():
        raise RegenerateError(_query_error(result))
    return _parse_query_xml(result.stdout)


def _parse_query_xml(text):
    targets = {}
    for rule in ET.fromstring(text).iter("rule"):
        # Only tests are dump targets (Bazel names every test rule *_test):
        # the macros' own analysis tests wrap a rule that only records.
        if not rule.get("class", "").endswith("_test"):
            continue
        name = rule.get("name")
        tags = []
        for lst in rule.iter("list"):
            if lst.get("name") == "tags":
                tags = [s.get("value") for s in lst.iter("string")]
        caches = [t[len(CACHE_TAG):] for t in tags if t.startswith(CACHE_TAG)]
        targets[name] = caches[0] if caches else None
    return targets


def find_target_devices(bazel, targets, cwd, bazel_args):
    """{dump target: the device its gpu_type names} for the targets that
    have one (tag autotune_device=...)."""
    query = bazel_args if isinstance(bazel_args, QueryArgs) \
        else QueryArgs(bazel_args)
    expr = f'attr("tags", "{DEVICE_TAG_PREFIX}", set({" ".join(targets)}))'
    result = query.run(bazel, [expr, "--output=xml"], cwd)
    if result.returncode != 0:
        raise RegenerateError(_query_error(result))
    if not result.stdout.strip():
        return {}
    devices = {}
    for rule in ET.fromstring(result.stdout).iter("rule"):
        for lst in rule.iter("list"):
            if lst.get("name") == "tags":
                for s in lst.iter("string"):
                    value = s.get("value") or ""
                    if value.startswith(DEVICE_TAG_PREFIX):
                        devices[rule.get("name")] = \
                            value[len(DEVICE_TAG_PREFIX):]
    return devices


def local_device_key(env=None):
    """The device key of this machine, as the dump targets' runtime will
    compute it (in a child process: no GPU context held while they run)."""
    env = dict(os.environ if env is None else env)
    env.pop("AUTOTUNE_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                  if p])
    proc = subprocess.run(
        [sys.executable, "-c", "import autotune\n"
         "from autotune.measure import backends\n"
         "print(backends.select_backend('auto').device_key())"],
        capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RegenerateError(f"cannot tell this machine's device: {tail}")
    return proc.stdout.strip().splitlines()[-1]


def split_by_device(targets, devices, local):
    """(targets to run here, {target: device} left to other machines): a
    dump target whose gpu_type's device the local device key does not
    contain is left (it would fail at once on this device)."""
    here, left = {}, {}
    for target, cache in targets.items():
        device = devices.get(target)
        if device and device.lower() not in local.lower():
            left[target] = device
        else:
            here[target] = cache
    return here, left


def split_target_pattern(pattern):
    """(the package's `:all` pattern, the names that match) for a pattern
    naming one target: the target itself or, for a gpu_autotuned_test,
    its dump target NAME_autotune_dump. None for any other pattern
    (`...`, `:all`, `:*`, a package alone)."""
    head, colon, name = pattern.rpartition(":")
    if not colon or not name or "..." in pattern or "/" in name or \
            name in ("all", "*", "all-targets"):
        return None
    return f"{head}:all", {name, name + DUMP_SUFFIX}


def find_pattern_targets(bazel, patterns, cwd, bazel_args):
    """Dump targets within patterns (see split_target_pattern)."""
    wide = [p for p in patterns if split_target_pattern(p) is None]
    selected = find_dump_targets(bazel, wide, cwd, bazel_args) if wide \
        else {}
    for pattern in patterns:
        split = split_target_pattern(pattern)
        if split is None:
            continue
        package, names = split
        for target, cache in find_dump_targets(bazel, [package], cwd,
                                               bazel_args).items():
            if target.rpartition(":")[2] in names:
                selected[target] = cache
    return selected


def select_targets(bazel, patterns, cwd, bazel_args):
    """Dump targets within patterns, plus those sharing a cache with them.
    bazel_args: the --bazel_arg values (see QueryArgs)."""
    bazel_args = bazel_args if isinstance(bazel_args, QueryArgs) \
        else QueryArgs(bazel_args)
    selected = find_pattern_targets(bazel, patterns, cwd, bazel_args)
    if patterns == ["//..."]:
        return selected
    caches = {c for c in selected.values() if c}
    if caches:
        everything = find_dump_targets(bazel, ["//..."], cwd, bazel_args,
                                       keep_going=True)
        for target, cache in everything.items():
            if cache in caches and target not in selected:
                print(f"regenerate: also running {target}: it writes to "
                      f"{cache} too", file=sys.stderr)
                selected[target] = cache
    return selected


def testlogs_dir(cwd, target, shard=None):
    """bazel-testlogs folder of a test target (or of one of its shards)."""
    package, _, name = target.lstrip("@").partition("//")[2].partition(":")
    logs = os.path.join(cwd, "bazel-testlogs", package, name)
    return os.path.join(logs, shard) if shard is not None else logs


def test_outputs(cwd, target, shard=None, logs=None):
    """{name: bytes} of a test's undeclared outputs: plain files in
    test.outputs/ (--nozip_undeclared_test_outputs, which regenerate passes
    on Bazel 5.2 and later), or zipped into test.outputs/outputs.zip (every
    Bazel's default, 8 and 9 included; 4.2.3 has no other way)."""
    logs = logs or testlogs_dir(cwd, target, shard)
    outputs = os.path.join(logs, "test.outputs")
    found = {}
    archive = os.path.join(outputs, "outputs.zip")
    if os.path.exists(archive):
        with zipfile.ZipFile(archive) as z:
            found.update({n: z.read(n) for n in z.namelist()})
    if os.path.isdir(outputs):
        for n in os.listdir(outputs):
            path = os.path.join(outputs, n)
            if os.path.isfile(path) and n != "outputs.zip":
                with open(path, "rb") as f:
                    found[n] = f.read()
    return found


def _file_uri_path(uri):
    parsed = urllib.parse.urlparse(uri)
    return urllib.parse.unquote(parsed.path) if parsed.scheme == "file" \
        else None


def slot_args(bazel_args, env=None, workspace=None):
    """Bazel arguments that run each dump target under the gpu_slot
    wrapper: one dump target per device at a time, on every device. None
    when the caller gave its own --run_under. The wrapper is named by its
    label (gpu_slot_label), so Bazel builds it and ships it with the test,
    also to a remote executor. The slot files' directory is made writable
    in the sandbox and passed to the tests, with the slot count overrides
    of the environment (a directory under /tmp is shared by sandboxed
    tests from Bazel 7.4 on, which creates the writable paths inside the
    sandbox's own /tmp; 7.0 to 7.3 do not: docs/bazel.md)."""
    env = os.environ if env is None else env
    if any(a.startswith("--run_under") for a in bazel_args):
        return []
    lock_dir = lock_files.checked_lock_dir(env, RegenerateError)
    args = [f"--run_under={gpu_slot_label(env, workspace)}",
            f"--test_env={lock_files.LOCK_DIR_ENV}={lock_dir}",
            f"--sandbox_writable_path={lock_dir}"]
    for name in (lock_files.SLOT_DEVICES_ENV, lock_files.SLOT_LOADS_ENV):
        if env.get(name):
            args.append(f"--test_env={name}={env[name]}")
    return args


def triton_cache_args(env=None):
    """A GPU runner's persistent Triton cache, handed to the dump targets
    as the lock folder is: TRITON_CACHE_DIR of regenerate's environment
    (an absolute path) made writable in their sandbox. Without it each
    dump target compiles into a private folder under its TEST_TMPDIR
    (autotune/binaries/triton_cache.py)."""
    env = os.environ if env is None else env
    folder = env.get("TRITON_CACHE_DIR")
    if not folder:
        return []
    if not os.path.isabs(folder):
        raise RegenerateError(
            f"TRITON_CACHE_DIR={folder}: a relative path, which each dump "
            "target would resolve in its own runfiles tree; give an "
            "absolute one")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise RegenerateError(f"TRITON_CACHE_DIR={folder}: cannot create "
                              f"it ({e.strerror or e})") from None
    return [f"--test_env=TRITON_CACHE_DIR={folder}",
            f"--sandbox_writable_path={folder}"]


def gpu_slot_label(env=None, workspace=None):
    """The label of tools:gpu_slot as the workspace being regenerated
    names it: //tools:gpu_slot in rules_autotune itself; else
    @rules_autotune//tools:gpu_slot, or, under `bazel run`, the
    repository's canonical name (its runfiles directory: `@@name` when it
    is a Bzlmod name, rules_autotune+ or rules_autotune~)."""
    env = os.environ if env is None else env
    workspace = workspace or env.get("BUILD_WORKSPACE_DIRECTORY")
    own = os.path.join(ROOT, "tools", "gpu_slot.py")
    if workspace and os.path.realpath(own) == os.path.realpath(
            os.path.join(workspace, "tools", "gpu_slot.py")):
        return "//tools:gpu_slot"
    name = "rules_autotune"
    if env.get("RUNFILES_DIR") or ".runfiles" + os.sep in ROOT:
        name = os.path.basename(ROOT)
    prefix = "@@" if "+" in name or "~" in name else "@"
    return f"{prefix}{name}//tools:gpu_slot"


def bazel_release(bazel, cwd):
    """(major, minor) of the running Bazel, or None when it does not say
    (Debian's bazel-bootstrap reports no_version)."""
    result = _bazel(bazel, ["info", "release"], cwd)
    match = re.search(r"(\d+)\.(\d+)", result.stdout or "")
    if result.returncode != 0 or not match:
        return None
    return int(match.group(1)), int(match.group(2))


def output_args(release):
    """Arguments that make the dumps readable where regenerate looks.

    Undeclared outputs as plain files where Bazel can (5.2 and later): from
    7.2 a host without `zip` loses them otherwise. The test outputs are
    downloaded even when an rc file sets --remote_download_minimal."""
    args = ["--remote_download_outputs=all"]
    if release is not None and release >= (5, 2):
        args.append("--nozip_undeclared_test_outputs")
    return args


def run_dump_targets(bazel, targets, cwd, bazel_args, retune=False):
    """Runs the targets; returns {target: (passed?, testlogs folder or
    None)}. passed is None for a target Bazel built but did not run (the
    test filters, --test_tag_filters and its kin, left it out). The folder
    comes from the build events (so it is right however the convenience
    symlinks are set up)."""
    bazel_args = (list(bazel_args)
                  + slot_args(bazel_args, workspace=find_workspace(cwd))
                  + triton_cache_args()
                  + output_args(bazel_release(bazel, cwd)))
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.json")
        result = _bazel(
            bazel, ["test"] + bazel_args + [
                "--test_sharding_strategy=disabled", "--keep_going",
                "--cache_test_results=no", f"--build_event_json_file={events}"]
            + ([f"--test_env={RETUNE_ENV_VAR}=1"] if retune else [])
            + sorted(targets), cwd, capture=False)
        status, logs, built = {}, {}, set()
        if os.path.exists(events):
            with open(events) as f:
                for line in f:
                    event = json.loads(line)
                    ids = event.get("id", {})
                    if "targetCompleted" in ids and event.get(
                            "completed", {}).get("success"):
                        built.add(ids["targetCompleted"]["label"])
                    elif "testSummary" in ids:
                        status[ids["testSummary"]["label"]] = event.get(
                            "testSummary", {}).get("overallStatus") == "PASSED"
                    elif "testResult" in ids:
                        for out in event.get("testResult", {}).get(
                                "testActionOutput", []):
                            path = _file_uri_path(out.get("uri", ""))
                            if out.get("name") == "test.log" and path:
                                logs[ids["testResult"]["label"]] = \
                                    os.path.dirname(path)
    if result.returncode not in (0, 3, 4) and not status:
        raise RegenerateError(f"bazel test failed to run (exit "
                              f"{result.returncode})")

    def lookup(table, t):
        return table.get(t, table.get(_canonical(t)))

    def passed(t):
        if lookup(status, t) is None and (t in built or
                                          _canonical(t) in built):
            return None  # built, not run: left out by the test filters
        return bool(lookup(status, t))
    return {t: (passed(t), lookup(logs, t)) for t in targets}


def _canonical(label):
    return label[1:] if label.startswith("@//") else "@" + label


def collect_dump(target, cwd, logs=None):
    """(entries, device) of one target's dump; device (from its report) is
    None when the report is missing."""
    logs = logs or testlogs_dir(cwd, target)
    outputs = test_outputs(cwd, target, logs=logs)
    data = outputs.get(DUMP_FILE)
    if data is None:
        raise RegenerateError(
            f"{target}: passed but wrote no {DUMP_FILE} (looked in "
            f"{os.path.join(logs, 'test.outputs')})")
    entries = codec.decode(data, DUMP_FILE)
    device = None
    if REPORT_FILE in outputs:
        try:
            device = json.loads(outputs[REPORT_FILE]).get("device")
        except ValueError:
            pass
    return entries, device


def calling_output_base(workspace, env=None, path=None):
    """[--output_base=DIR] of the `bazel run` that started regenerate, or
    [] (run as a script, or for another workspace). Under `bazel run` this
    file is in DIR/execroot/...: without the option, the nested bazel
    commands would start a second server on the default output base
    (and build everything again there) whenever the user gave
    --output_base. Bazel takes the option naming its own output base
    without a restart."""
    env = os.environ if env is None else env
    path = os.path.abspath(path or __file__)
    called_from = env.get("BUILD_WORKSPACE_DIRECTORY")
    if not called_from or os.path.realpath(called_from) != \
            os.path.realpath(workspace):
        return []
    head, found, _ = path.partition(os.sep + "execroot" + os.sep)
    if not found or not os.path.isdir(os.path.join(head, "execroot")):
        return []
    return [f"--output_base={head}"]


# Startup options Bazel's client turns into other server arguments (JVM
# flags, the client's own behaviour): the server's command line cannot
# give them back as the user wrote them.
_CLIENT_ONLY_STARTUP = {"host_jvm_args", "host_jvm_profile", "host_jvm_debug",
                        "batch", "bazelrc", "server_javabase",
                        "client_debug", "home_rc", "system_rc",
                        "workspace_rc", "ignore_all_rc_files"}


def _unescape_option_source(text):
    # Bazel's client escapes `_`, `=` and `:` in --option_sources.
    return re.sub(r"_([UEC])", lambda m: {"U": "_", "E": "=", "C": ":"}[
        m.group(1)], text)


def server_startup_options(output_base):
    """(startup options, names it cannot give back) of the command line
    that started the Bazel server of output_base, read from its
    server/cmdline: the options given on the command line (those of an rc
    file the nested commands read again by themselves), with their values
    as the server got them. None when the file is not there."""
    try:
        with open(os.path.join(output_base, "server", "cmdline"), "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "-jar" in argv:  # the JVM's own arguments come before the jar
        argv = argv[argv.index("-jar") + 2:]
    sources = next((a.partition("=")[2] for a in argv
                    if a.startswith("--option_sources=")), "")
    fields = sources.split(":") if sources else []
    from_command_line = [_unescape_option_source(name) for name, source
                         in zip(fields[0::2], fields[1::2]) if not source]
    options, unreadable = [], []
    for name in from_command_line:
        given = [a for a in argv if a in (f"--{name}", f"--no{name}")
                 or a.startswith(f"--{name}=")]
        if given and name not in _CLIENT_ONLY_STARTUP:
            options.extend(given)
        else:
            unreadable.append(name)
    return options, unreadable


def calling_startup_options(workspace, env=None, path=None):
    """The startup options of the `bazel run` that started regenerate, for
    every nested bazel command, so that they talk to the same server: a
    nested command whose startup options differ (`bazel
    --output_user_root=X run ...` without it) restarts the server, and
    the user's next command restarts it again. Read from the server's
    command line (server_startup_options); when that cannot be read, its
    --output_base alone (calling_output_base). Returns (options, a
    one-line note naming what to pass by hand, or None)."""
    base = calling_output_base(workspace, env, path)
    if not base:
        return [], None
    output_base = base[0].partition("=")[2]
    found = server_startup_options(output_base)
    if found is None:
        return base, None
    options, unreadable = found
    if not any(o.startswith("--output_base=") for o in options):
        options = base + options
    note = None
    if unreadable:
        note = ("regenerate: note: the calling bazel's startup option(s) "
                + ", ".join(f"--{n}" for n in unreadable) + " cannot be "
                "read back from its server; pass each with "
                "--bazel_startup_arg=... (after `--`), or the nested bazel "
                "commands restart the server")
    return options, note
