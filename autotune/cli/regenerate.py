"""Regenerates checked-in autotune caches in one command.

    bazel run @rules_autotune//tools:regenerate [-- PATTERN ... [--bazel_arg=ARG]
                                                [--bazel_test_arg=ARG]]
    python3 RULES_AUTOTUNE/tools/regenerate.py [PATTERN ...]   (from anywhere
                                                          in the workspace)

1. Finds the dump targets (tag `autotune_dump`, made by gpu_autotuned_test)
   with `bazel query`, within PATTERN (default //...), plus every other dump
   target that writes to one of their caches (a cache several targets share
   is only rewritten from all of their dumps). Query gets the --bazel_arg
   values, less a --config that no rc line defines for query (a team's
   `build:rbe` and `test:gpuci` lines): that one goes to `bazel test`
   only, with a note. --bazel_test_arg values go to `bazel test` only
   (--test_tag_filters, --remote_executor, ...). A PATTERN naming one target
   may name the gpu_autotuned_test itself (`:kernels_test`): it stands for
   its dump target (`:kernels_test_autotune_dump`).
2. Runs them with `bazel test --test_sharding_strategy=disabled`: a dump
   must see every fusion, so it never runs sharded. By default a dump tunes
   only the fusions missing or stale in its cache: a fusion whose entry
   matches is a hit, dumped as it is and never measured. With --retune
   (passed to the targets as --test_env=AUTOTUNE_RETUNE=1) every fusion
   is re-measured, the checked-in configs as incumbents: for a new GPU,
   driver or Triton version. Each runs under
   tools/gpu_slot.py (--run_under; not when --bazel_arg or
   --bazel_test_arg gives one): one dump target per device at a time, on
   every device. A dump target the test filters leave out
   (--test_tag_filters=gpu-h100 for one pool's dumps) is built, not run,
   and skipped: its cache is left as it is, or, when other targets that
   write to it ran, updated from their dumps without removing entries.
   Under `bazel run`, the nested bazel commands get the startup options
   the `bazel` that started regenerate was given on its command line
   (--output_user_root, --output_base, ...: read from its server's
   command line), so they talk to the same server and nothing restarts
   it; one it cannot read back (--host_jvm_args) is named in a note, to
   be given with --bazel_startup_arg, which adds startup options.
3. Merges the dumps of each cache (tag `autotune_cache=PATH`) into the file,
   by the rule every update of a cache file follows
   (autotune/cache/update.py), pruned on the dumps' devices:
   - an entry whose key and best config did not change is kept exactly as
     it was (its times, candidates and timestamp too), so an unchanged tree
     leaves the file byte-identical;
   - entries of devices the dumps did not run on are kept;
   - entries of the dumps' device that no dump produced any more (a kernel
     that changed, a shape no test uses) are removed;
   - two targets that dump different best configs for one fusion are a
     conflict, printed with both target names and decided by the one merge
     rule (autotune/cache/merge.py, policy "measured"): the config already
     checked in stays unless the other is faster by the selection rule's
     incumbent margin; with neither checked in, the smaller config stays
     unless the other is faster by its margin.
   The file is written atomically (codec.atomic_write: a new file gets the
   user's umask, an existing one keeps its mode, a symbolic link is
   written through, and a file whose bytes would not change is left
   alone); missing directories are created.
   While the dumps run, a cache that does not exist yet is an empty file,
   so that a dump target naming it by a label in another package can be
   analysed; it is removed again if its dumps fail.

A dump target that fails leaves its cache untouched (and every cache it
shares with others); the command names it and exits 1. Exit 2: bad usage,
or bazel itself could not run.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
import zipfile

from autotune.errors import RegenerateError, ToolError
from autotune import codec
from autotune.codec import CacheFileError
from autotune.cache import update as cache_update
from autotune.cli.cache_tool import WORKSPACE_MARKERS, find_workspace
from autotune.flags import RETUNE_ENV_VAR
from autotune.host import lock_files
from autotune.report import page, summary

from autotune.contract import (DEVICE_TAG_PREFIX,
                               CACHE_TAG_PREFIX as CACHE_TAG,
                               DUMP_FILE, DUMP_SUFFIX, DUMP_TAG,
                               REGENERATE_COMMAND as COMMAND, REPORT_FILE)

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


class Merged:
    """The result of merging dumps into a cache file's entries."""

    def __init__(self, entries, removed, conflicts):
        self.entries = entries
        self.removed = removed        # [Entry] no dump produced any more
        self.conflicts = conflicts    # [str], one line each


def merge_dumps(old_entries, dumps, prune=True):
    """old_entries: the checked-in entries ([] when there is no file).
    dumps: [(target, entries, device or None)]. The file is updated by the
    one rule (autotune/cache/update.py), pruned on the dumps' devices (not
    when prune is False: a target that writes to the file did not run):
    see the module docstring."""
    devices = set()
    for _, entries, device in dumps:
        if device:
            devices.add(device)
        devices.update(e.key.device for e in entries)
    if not prune:
        devices = set()
    updated = cache_update.update(
        old_entries, [(target, entries) for target, entries, _ in dumps],
        prune_devices=devices)
    return Merged(updated.entries, updated.removed,
                  [c.line() for c in updated.conflicts])


def regenerate_cache(cache, dumps, workspace, not_run=()):
    """Merges dumps into one cache file and prints what changed. not_run:
    targets that write to it too but did not run (the test filters left
    them out): no entry is removed then."""
    path = os.path.join(workspace, cache)
    old = []
    if os.path.exists(path):
        try:
            old = codec.load_results(path)
        except CacheFileError as e:
            print(f"regenerate: note: replacing unreadable {e}")
    merged = merge_dumps(old, dumps, prune=not not_run)
    for line in merged.conflicts:
        print("regenerate: " + line)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    written = codec.dump_results(merged.entries, path)
    # By fusion: an edited kernel's fusions are re-tuned, not added and
    # removed; a changed winner is compared with the old one measured in
    # this run when it was.
    changes = summary.CacheChanges(old, merged.entries)
    sources = ", ".join(t for t, _, _ in dumps)
    print(f"regenerate: {cache}: {len(merged.entries)} entries; "
          f"{changes.headline()}"
          + ("" if written else "; file unchanged")
          + (f" (from {sources})" if len(dumps) > 1 else ""))
    for line in changes.lines(limit=20):
        print("  " + line)
    # Entries of an edited kernel's old fingerprint were replaced (counted
    # as re-tuned or changed): only fusions gone altogether are removed.
    gone = {changes.old[f].key for f in changes.removed}
    removed = [e for e in merged.removed if e.key in gone]
    if removed:
        print(f"  ({len(removed)} removed: no dump produced them on "
              "this device any more)")
    if not_run:
        print(f"  (no entry removed: {', '.join(sorted(not_run))}, which "
              "writes to it too, did not run)")
    return old, merged.entries


REPORT_PAGE_NAME = "autotune_regenerate_report.html"


def report_page_path(workspace=None):
    """Where the run's report page goes: next to the dump targets' outputs
    in the workspace's bazel-testlogs, else one file per workspace in the
    system temp directory; either way the latest run's page replaces the
    one before (a run leaves no new file behind)."""
    logs = os.path.join(workspace, "bazel-testlogs") if workspace else None
    if logs and os.path.isdir(logs):
        return os.path.join(logs, REPORT_PAGE_NAME)
    tag = hashlib.sha256(os.path.abspath(workspace or os.getcwd()).encode()
                         ).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(),
                        f"autotune_regenerate_{os.getuid()}_{tag}.html")


def write_report_page(pages, workspace=None):
    """One report page for the whole run: every regenerated cache, compared
    with what the files held before. pages: [(cache, old, new)]. Returns
    its path (report_page_path), or None (no matplotlib: a one-line note
    instead)."""
    try:
        page.require_matplotlib()
    except ToolError:
        print(f"regenerate: no report page: {page.INSTALL_HINT}")
        return None
    text = page.build_page([(cache, new) for cache, _, new in pages],
                           base=[e for _, old, _ in pages for e in old],
                           base_name="the caches before this run",
                           title="Regenerated autotune caches: " + ", ".join(
                               cache for cache, _, _ in pages))
    path = report_page_path(workspace)
    codec.atomic_write(path, text.encode())
    print(f"regenerate: report page {path}")
    return path


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


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 all caches regenerated; 1 a dump target "
               "failed (its cache untouched); 2 bad usage or bazel error.")
    parser.add_argument("patterns", nargs="*", default=["//..."])
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    parser.add_argument("--workspace",
                        help="workspace root (default: the workspace "
                        "`bazel run` was called in, or the one containing "
                        "the current directory)")
    parser.add_argument("--bazel_arg", action="append", default=[],
                        help="extra argument for bazel query and test "
                        "(a --config that no rc line defines for query "
                        "goes to bazel test only)")
    parser.add_argument("--bazel_test_arg", action="append", default=[],
                        help="extra argument for bazel test only "
                        "(--test_tag_filters=gpu-h100, --config=NAME of "
                        "build:/test: lines, --remote_executor=...)")
    parser.add_argument("--bazel_startup_arg", action="append", default=[],
                        help="startup option for every bazel command "
                        "(before the command); under `bazel run` those "
                        "of the calling bazel's command line are passed "
                        "already")
    parser.add_argument("--gpu_type", metavar="DEVICE",
                        help="say which dump targets need a machine whose "
                        "device key contains DEVICE (a gpu_type's device, "
                        "e.g. A100), and run nothing")
    parser.add_argument("--retune", action="store_true",
                        help="re-measure every fusion, the checked-in "
                        "configs as incumbents (a new GPU, driver or Triton "
                        "version); default: tune only fusions missing or "
                        "stale in the cache")
    argv = _options_after_dashes(parser, sys.argv[1:] if argv is None
                                 else list(argv))
    args = parser.parse_args(argv)
    # Under `bazel run`, the current directory is the runfiles tree; Bazel
    # says where it was called from.
    here = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    workspace = args.workspace or os.environ.get(
        "BUILD_WORKSPACE_DIRECTORY") or find_workspace(here)
    if not workspace:
        print(f"regenerate: error: {here} is not inside a Bazel workspace "
              f"(no {', '.join(WORKSPACE_MARKERS)} above it); run `{COMMAND}`"
              " from your workspace, or pass --workspace", file=sys.stderr)
        return 2
    workspace = os.path.abspath(workspace)
    # Relative patterns (`...`, `:t`) mean what they mean where the user
    # stands; paths are resolved against the workspace root.
    cwd = here if os.path.abspath(here).startswith(
        workspace + os.sep) else workspace
    calling, note = calling_startup_options(workspace)
    if note and not args.bazel_startup_arg:
        print(note, file=sys.stderr)
    bazel = [args.bazel] + calling + args.bazel_startup_arg
    placeholders = []
    try:
        query_args = QueryArgs(args.bazel_arg)  # notes said once
        targets = select_targets(bazel, args.patterns, cwd, query_args)
        if not targets:
            print("regenerate: no dump targets (tag autotune_dump) in "
                  + " ".join(args.patterns) + ": name gpu_autotuned_test "
                  "targets, their packages, or a pattern such as //...",
                  file=sys.stderr)
            return 2
        devices = find_target_devices(bazel, targets, cwd, query_args) \
            if targets else {}
        if args.gpu_type:
            return _print_gpu_type_plan(targets, devices, args.gpu_type)
        if devices:
            local = local_device_key()
            targets, left = split_by_device(targets, devices, local)
            if left:
                print("regenerate: left to machines with another GPU ("
                      f"this one is {local}): " + ", ".join(
                          f"{t} (needs a {d})" for t, d in sorted(
                              left.items())) + "; run regenerate there; "
                      "each merges its entries into the same cache file",
                      file=sys.stderr)
            if not targets:
                print("regenerate: no dump target runs on this machine",
                      file=sys.stderr)
                return 0
        print(f"regenerate: running {len(targets)} dump target(s) unsharded; "
              + ("--retune: re-measuring every fusion, checked-in configs as "
                 "incumbents" if args.retune else
                 "tuning only fusions missing or stale in the cache "
                 "(--retune re-measures every one)"), file=sys.stderr)
        placeholders.extend(create_placeholders(targets, workspace))
        results = run_dump_targets(bazel, targets, cwd,
                                   args.bazel_arg + args.bazel_test_arg,
                                   retune=args.retune)
    except RegenerateError as e:
        remove_placeholders(placeholders)
        print(f"regenerate: error: {e}", file=sys.stderr)
        return 2
    except BaseException:
        remove_placeholders(placeholders)
        raise
    regenerated = set()
    try:
        return write_results(targets, results, workspace, regenerated)
    finally:
        remove_placeholders([p for p in placeholders
                             if p not in regenerated])


def _print_gpu_type_plan(targets, devices, device):
    """--gpu_type DEVICE: the dump targets that need such a machine."""
    needed = sorted(t for t, d in devices.items()
                    if d.lower() == device.lower())
    if not needed:
        known = sorted(set(devices.values()))
        print(f"regenerate: no dump target needs a {device} (gpu_type "
              f"devices here: {', '.join(known) or 'none'})",
              file=sys.stderr)
        return 2
    caches = sorted({targets[t] for t in needed if targets.get(t)})
    print(f"regenerate: on a machine with a {device}, regenerate runs "
          f"{len(needed)} dump target(s): {', '.join(needed)}; they write "
          f"{', '.join(caches) or 'no cache'} (other devices' entries "
          "kept)", file=sys.stderr)
    return 0


def _options_after_dashes(parser, argv):
    """`regenerate.py -- --retune`, the `--` copied from the `bazel run`
    form (where bazel takes it away): regenerate's own options after it
    are read as options, with a note, instead of as target patterns for
    bazel query; what else follows it stays a pattern."""
    if "--" not in argv:
        return argv
    cut = argv.index("--")
    before, after = argv[:cut], argv[cut + 1:]
    options, patterns = [], []
    rest = iter(after)
    for arg in rest:
        action = parser._option_string_actions.get(arg.split("=", 1)[0])
        if action is None or not arg.startswith("--"):
            patterns.append(arg)
            continue
        options.append(arg)
        if action.nargs != 0 and "=" not in arg:  # --workspace DIR
            value = next(rest, None)
            if value is not None:
                options.append(value)
    if options:
        print("regenerate: note: " + " ".join(options) + " after `--` read "
              "as regenerate's option(s); `--` belongs to the `bazel run "
              "@rules_autotune//tools:regenerate -- ...` form only",
              file=sys.stderr)
    return before + options + (["--"] + patterns if patterns else [])


def create_placeholders(targets, workspace):
    """Creates an empty results file for each cache that does not exist
    yet, so that a dump target naming it by a label in another package
    (whose glob finds it now) can be analysed; returns their paths. Each is
    replaced by the merged dumps, or removed again."""
    created = []
    for cache in sorted({c for c in targets.values() if c}):
        path = os.path.join(workspace, cache)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            codec.dump_results([], path)
            created.append(path)
    return created


def remove_placeholders(placeholders):
    """Removes placeholders whose cache was not regenerated."""
    for path in placeholders:
        try:
            os.unlink(path)
        except OSError:
            pass


def write_results(targets, results, workspace, regenerated):
    """Merges each cache's dumps into it; adds the paths written to
    regenerated. Returns the exit code."""
    failed = []
    by_cache = {}
    not_run = {}  # cache -> targets the test filters left out
    pages = []
    for target in sorted(targets):
        cache = targets[target]
        passed, logs = results[target]
        logs = logs or testlogs_dir(workspace, target)
        if passed is None:
            print(f"regenerate: skipped {target}: built, not run (the test "
                  "filters left it out)")
            not_run.setdefault(cache, set()).add(target)
            continue
        if not passed:
            failed.append(target)
            print(f"regenerate: FAILED {target}: "
                  f"{cache or 'its cache'} left untouched (see "
                  f"{os.path.join(logs, 'test.log')})")
            if cache is not None:
                by_cache[cache] = None
            continue
        if cache is None:
            print(f"regenerate: {target} has no autotune_cache; skipped")
            continue
        if cache in by_cache and by_cache[cache] is None:
            continue  # another target of this cache failed
        try:
            entries, device = collect_dump(target, workspace, logs)
        except (RegenerateError, CacheFileError) as e:
            failed.append(target)
            print(f"regenerate: FAILED {target}: {e}; {cache} left untouched")
            by_cache[cache] = None
            continue
        by_cache.setdefault(cache, []).append((target, entries, device))
    for cache, dumps in sorted(by_cache.items(), key=lambda kv: str(kv[0])):
        if cache is None:
            continue
        if dumps is None:
            print(f"regenerate: {cache} left untouched: a dump target that "
                  "writes to it failed")
            continue
        try:
            old, new = regenerate_cache(cache, dumps, workspace,
                                        not_run.get(cache, ()))
            pages.append((cache, old, new))
            regenerated.add(os.path.join(workspace, cache))
        except (CacheFileError, OSError) as e:
            failed.append(cache)
            print(f"regenerate: FAILED writing {cache}: {e}")
    for cache in sorted(c for c in not_run if c and c not in by_cache):
        print(f"regenerate: {cache} left untouched: none of the dump "
              "targets that write to it ran")
    if pages:
        write_report_page(pages, workspace)
    if not_run and sum(len(t) for t in not_run.values()) == len(targets):
        print(f"regenerate: error: the test filters left out every dump "
              f"target ({len(targets)}); nothing was regenerated",
              file=sys.stderr)
        return 2
    if failed:
        print(f"regenerate: {len(failed)} failure(s): " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
