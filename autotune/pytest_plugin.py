"""pytest plugin: the load / update / require-complete workflow of the Bazel
macros, for projects that test their Triton kernels with plain pytest.

    # pyproject.toml
    [tool.pytest.ini_options]
    autotune_cache = "testdata/kernels.textproto"

    pytest                      # load the checked-in cache (no tuning)
    pytest --autotune-update    # tune what the selected tests meet that is
                                # missing or stale, rewrite the cache,
                                # keeping other entries
    pytest --autotune-update=all  # re-measure every fusion they meet

Installed, pytest loads its entry point, the top-level module
pytest_autotune, by itself (`-p no:pytest_autotune` turns it off); from a
checkout, `-p pytest_autotune`. That module declares the options and
imports this one only when a session asks for autotuning.

With pytest-xdist each worker runs its own autotuning session; the
controller adds up the statistics and, in update mode, merges the workers'
results into one cache (a fusion two workers tuned to different winners is
resolved as a single run would resolve it, and reported).
"""
import json
import logging
import os
import shutil
import sys
import tempfile

import pytest

from autotune import codec, flags
from autotune.cache import merge
from autotune.cache import update as cache_update
from autotune import log as autotune_log
from autotune.binaries import triton_cache
from autotune import pytest_terminal
from autotune.pytest_terminal import relative
from autotune.pytest_result import STAT_FIELDS, PluginResult
from autotune.pytest_settings import INI_KEY, Settings, usage_error
from autotune.report import summary
from autotune.runtime import freshness
from autotune.runtime import session as runtime_session

WORKER_KEY = "autotune"
SHARED_DIR_KEY = "autotune_shared_fusion_dir"
# What the Bazel macro sets for every test and compile action
# (COMPILE_TRITON_ENV in rules/private/gpu_autotuned_test.bzl): Triton's
# keys hold which cache-invalidating variables are set, so both paths set
# the same ones, to the value Triton defaults to (Triton 3.9 warns on every
# compile while this one is unset). A value the user set is kept.
TRITON_ENV = {"TRITON_DEFAULT_FP_FUSION": "1"}


def configure(config, ini):
    """Called by the entry point (pytest_autotune) for a session that asks
    for autotuning: checks the settings and registers the session's
    plugin. (`autotune_backend = interpreter` took effect earlier, before
    the conftest files: see pytest_autotune.)

    ini: the entry point's ini key names and readers (pytest_autotune.INI).
    The entry point declares them and hands them over; this module does
    not import it, so the two cannot import each other."""
    config.stash[INI_KEY] = ini
    settings = Settings.from_config(config)
    if settings is None:
        return
    for name, value in TRITON_ENV.items():
        os.environ.setdefault(name, value)
    plugin = AutotunePlugin(config, settings)
    config.pluginmanager.register(plugin, "autotune-session")
    config.stash[_PLUGIN] = plugin


_PLUGIN = pytest.StashKey()
_ITEM_START = pytest.StashKey()
_MARKER_ERROR = pytest.StashKey()


def _stats_dict(sessions):
    totals = dict.fromkeys(STAT_FIELDS, 0)
    for sess in sessions:
        for name in STAT_FIELDS:
            totals[name] += getattr(sess.stats, name, 0)
    return totals


def _sorted_records(records):
    """One record per fusion (the first seen, by worker order), sorted as
    the Bazel report sorts them."""
    seen = {}
    for record in records:
        seen.setdefault((record["device"], record["kernel"],
                         record["fingerprint"], record["signature"]), record)
    return [seen[k] for k in sorted(seen)]


def _fusion_records(sessions):
    """The per-fusion list of the Bazel JSON report, with candidates, for
    every session of this process (one schema: Session.fusion_records)."""
    return _sorted_records(r for sess in sessions
                           for r in sess.fusion_records())


def _describe(key):
    return {"kernel": key.kernel, "signature": key.signature,
            "device": key.device}


def _decorated_fingerprints(name):
    """Fingerprints of the kernels decorated in this process under `name`
    (none when nothing loaded the decorator: no kernel was decorated)."""
    module = sys.modules.get("autotune.runtime.autotuner")
    return module.fingerprints_named(name) if module is not None else set()


def _other_fingerprint(key, cached_fingerprints, loaded_entries=()):
    """(status, reason) of a miss whose fusion the cache holds under other
    kernel fingerprints: those of another kernel decorated under the same
    name in this run, or of entries that record being tuned for another
    function (freshness.other_kernel), leave this one missing; any other
    is this kernel before an edit (stale)."""
    others = _decorated_fingerprints(key.kernel) - {key.fingerprint}
    function = freshness.function_for(key)
    elsewhere = {}  # fingerprint -> the function its entry was tuned for
    for e in loaded_entries:
        if e.key.fingerprint in cached_fingerprints and \
                e.key.fusion == key.fusion:
            other = freshness.other_kernel(e, function)
            if other is not None:
                elsewhere[e.key.fingerprint] = other
    edited = [f for f in cached_fingerprints
              if f not in others and f not in elsewhere]
    if not edited:
        tuned_for = sorted(set(elsewhere.values()))
        what = f"tuned for {', '.join(tuned_for)}" if tuned_for else \
            "a different function decorated in this run"
        mine = f"{function}, " if function and tuned_for else ""
        return "missing", (
            f"the cache has it only for another kernel named {key.kernel} "
            f"(fingerprint {', '.join(cached_fingerprints)}, {what}); this "
            f"one, {mine}fingerprint {key.fingerprint}, was never tuned")
    return "stale", (f"the cache has it for kernel fingerprint "
                     f"{', '.join(edited)}, this kernel is "
                     f"{key.fingerprint}: its source changed since it was "
                     "tuned")


def classify_miss(key, loaded_entries):
    """Stale (the cache has this fusion for another version of the kernel)
    or missing (it has no entry for it), with a one-line reason."""
    other_fingerprints = sorted({
        e.key.fingerprint for e in loaded_entries
        if e.key.kernel == key.kernel and e.key.signature == key.signature
        and e.key.device == key.device and e.key.fingerprint !=
        key.fingerprint})
    if other_fingerprints:
        return _other_fingerprint(key, other_fingerprints, loaded_entries)
    same_kernel = [e for e in loaded_entries if e.key.kernel == key.kernel]
    if not same_kernel:
        return "missing", f"the cache has no entry for kernel {key.kernel}"
    on_device = [e for e in same_kernel if e.key.device == key.device]
    if not on_device:
        return "missing", (f"the cache has {key.kernel} only for other "
                           "devices")
    return "missing", (f"the cache has {len(on_device)} other fusion(s) of "
                       f"{key.kernel} on this device, not this one")


class AutotunePlugin:
    """One per pytest process that uses a cache: on an xdist controller it
    only checks, merges and reports; elsewhere it runs the autotuning
    sessions the tests use."""

    def __init__(self, config, settings):
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        # pytest-xdist's own test for running distributed.
        self.is_controller = (not self.is_worker and
                              getattr(config.option, "dist", "no") != "no"
                              and not config.option.collectonly)
        self.sessions = []          # every runtime session this process ran
        self.main = None            # the session tests use by default
        self.misses = []            # [{kernel, signature, device, status..}]
        self._reported_misses = set()
        self.worker_outputs = []    # [(worker id, payload)] on a controller
        self.old_entries = None
        self.narrowed = _narrowing(config)  # why this is not a full run
        self.result = None          # what the end of the session did
        self.changes = None         # an update's CacheChanges
        self.shared_dir = None      # update with xdist: the workers' cache
        self._fusions = []          # per-fusion records for the report
        self._bypassing = []        # triton.autotune kernels not routed
        if settings.update and not self.is_worker:
            self.old_entries = self._read_old_cache()

    def _read_old_cache(self):
        if not os.path.exists(self.settings.cache):
            return []
        try:
            entries = codec.load_results(self.settings.cache)
            # A malformed best config stops the run here, as in load mode,
            # not inside the test that meets its fusion.
            codec.decode_heads(entries)
            return entries
        except codec.CacheFileError as e:
            raise usage_error(f"{e}; nothing was tuned or written (fix or delete "
                         "the file)")

    # -- sessions ----------------------------------------------------------
    def base_options(self):
        """AUTOTUNE_FLAGS (a per-fusion directory, a remote cache, ...) with
        what the plugin decides: which file is loaded, require-complete, the
        backend."""
        import dataclasses
        s = self.settings
        env = flags.from_environment()
        options = {f.name: getattr(env, f.name)
                   for f in dataclasses.fields(env)}
        if s.backend != "auto":
            options["autotune_backend"] = s.backend
        if s.version_match:
            options["autotune_version_match"] = s.version_match
        if s.update:
            # The cache is the incumbents file: its hits are used as they
            # are and only misses tune, or, with --autotune-update=all,
            # every fusion is re-measured with its config as incumbent.
            options["load_autotune_results_from"] = []
            options["require_complete_autotune_results"] = False
            options["autotune_incumbents_from"] = [s.cache]
            options["autotune_retune"] = s.retune
            shared = getattr(self.config, "workerinput", {}).get(
                SHARED_DIR_KEY)
            if shared and not options["per_fusion_autotune_cache_dir"]:
                options["per_fusion_autotune_cache_dir"] = shared
                options["autotune_cache_mode"] = "update"
        else:
            options["load_autotune_results_from"] = [s.cache] + [
                p for p in env.load_autotune_results_from if p != s.cache]
            options["require_complete_autotune_results"] = (
                s.require_complete or env.require_complete_autotune_results)
        return options

    def start_session(self, options):
        """A runtime session with these options, made the current one."""
        unknown = set(options) - set(flags.flag_names())
        if unknown:
            raise runtime_session.AutotuneError(
                f"unknown option(s) {', '.join(sorted(unknown))}; known: "
                f"{', '.join(flags.flag_names())}")
        values = dict(options)
        if isinstance(values.get("load_autotune_results_from"), str):
            values["load_autotune_results_from"] = [
                values["load_autotune_results_from"]]
        opts = flags.resolve_options(flags.Options(**values))
        # The plugin writes the cache and the report itself; the runtime's
        # exit hook must not print or write for this session.
        opts.dump_autotune_results_to = None
        opts.autotune_report_to = None
        sess = runtime_session.Session(opts)
        # An update writes the cache: every differently specialised launch
        # of a winner is recorded as a compile request.
        sess.records_compile_requests = bool(self.settings.update)
        sess.finished = True
        self.sessions.append(sess)
        _install(sess)
        return sess

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        if self.is_controller:
            if not self.settings.update:
                self._validate_cache()
            else:
                # The workers share a per-fusion directory: a fusion one
                # worker tuned is a hit for the others, not tuned twice.
                self.shared_dir = tempfile.mkdtemp(prefix="autotune-xdist-")
            return
        try:
            self.main = self.start_session(self.base_options())
        except runtime_session.AutotuneError as e:
            raise usage_error(str(e).replace("autotune: ", "", 1)) from None

    def _validate_cache(self):
        try:
            codec.load_results(self.settings.cache)
        except codec.CacheFileError as e:
            raise usage_error(f"cannot load autotune results: {e}") from None

    def pytest_report_header(self, config):
        s = self.settings
        mode = ("update, every fusion re-measured" if s.retune else
                "update, missing and stale fusions") if s.update else (
            "load, require complete" if s.require_complete else "load")
        return f"autotune: {mode} {relative(s.cache, config)}"

    # -- selection -----------------------------------------------------------
    def pytest_deselected(self, items):
        # On xdist workers: they collect, the controller does not.
        self.narrowed.append(f"{len(items)} test(s) deselected")


    # -- tests ---------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.is_controller:
            return (yield)
        marker = item.get_closest_marker("autotune")
        previous = self.main
        sess = self.main
        if marker is not None:
            try:
                sess = self._marker_session(marker)
            except Exception as e:  # reported by this test's setup
                item.stash[_MARKER_ERROR] = (
                    f"@pytest.mark.autotune: {str(e) or type(e).__name__}")
                marker = None
        item.stash[_ITEM_START] = (sess, len(sess.miss_keys),
                                   {n: getattr(sess.stats, n)
                                    for n in STAT_FIELDS})
        try:
            return (yield)
        finally:
            if marker is not None:
                _install(previous)

    def _marker_session(self, marker):
        if marker.args:
            raise runtime_session.AutotuneError(
                "takes keyword options only (autotune.configure() names, "
                "for example autotune_miss_policy='nearest')")
        options = dict(self.base_options(), **marker.kwargs)
        if self.settings.update:
            # An update run tunes everything; it never fails on a miss.
            options.pop("require_complete_autotune_results", None)
        return self.start_session(options)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        error = item.stash.get(_MARKER_ERROR, None)
        if error is not None:
            pytest.fail(error, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        start = item.stash.get(_ITEM_START, None)
        if start is None:
            return report
        sess, first, _ = start
        new = [k for k in sess.miss_keys[first:]
               if k not in self._reported_misses]
        if not new or self.settings.update:  # an update run misses by design
            return report
        lines = []
        loaded = list(sess.cache.loaded.values())
        # The runtime's miss error says which misses are stale, where it
        # raised one; other misses are judged by the same rule here.
        raised = getattr(call.excinfo, "value", None)
        stale = getattr(raised, "stale", None) or {}
        # A cached entry of this very key the runtime would not use (a
        # config no longer offered, another version under strict matching).
        refusals = sess.miss_refusals
        for key in new:
            self._reported_misses.add(key)
            if key in refusals:
                status, reason = "stale", refusals[key]
            elif key in stale:
                status, reason = _other_fingerprint(key, [stale[key]],
                                                    loaded)
            else:
                status, reason = classify_miss(key, loaded)
            self.misses.append({**_describe(key), "status": status,
                                "reason": reason, "test": item.nodeid})
            lines.append(f"{status}: {key.kernel} [{key.signature}] on "
                         f"{key.device}: {reason}")
        if sess.options.require_complete_autotune_results:
            cache = relative(self.settings.cache, self.config)
            report.outcome = "failed"
            report.longrepr = (
                f"autotune: require-complete: {len(new)} fusion(s) not in "
                f"{cache}:\n  " + "\n  ".join(lines) +
                "\nRun `pytest --autotune-update` and commit the cache.")
        return report

    # -- progress while the tests run --------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session):
        handler = None
        if not self.is_worker and not self.is_controller:
            handler = pytest_terminal.TerminalProgress.for_config(
                self.config)
        logger = logging.getLogger(autotune_log.ROOT)
        if handler is not None:
            logger.addHandler(handler)
        try:
            return (yield)
        finally:
            if handler is not None:
                logger.removeHandler(handler)

    # -- end of the session ----------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        if self.shared_dir is not None:
            node.workerinput[SHARED_DIR_KEY] = self.shared_dir

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        payload = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if payload is not None:
            self.worker_outputs.append(
                (node.workerinput.get("workerid", "worker"), payload))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.is_worker:
            self.config.workeroutput[WORKER_KEY] = self._worker_payload()
            _install(None)
            return
        stats, misses, runs = self._gather()
        self.result = PluginResult(
            mode="update" if self.settings.update else "load",
            retune=self.settings.retune, cache=self.settings.cache, **stats,
            fusions=self._fusions,
            missing=[m for m in misses if m["status"] == "missing"],
            stale=[m for m in misses if m["status"] == "stale"],
            bypassing=self._bypassing, compiled_kernels=self._compiled)
        if self.settings.update:
            self._finish_update(session, exitstatus, runs)
        if self.settings.report:
            try:
                codec.atomic_write(self.settings.report, json.dumps(
                    self.result.as_dict(), indent=2, sort_keys=True
                ).encode() + b"\n")
            except codec.CacheFileError as e:
                self.result.add_error(str(e))
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if self.shared_dir is not None:
            shutil.rmtree(self.shared_dir, ignore_errors=True)
        _install(None)

    def _worker_payload(self):
        entries = self._entries_of_this_process()
        return {"stats": _stats_dict(self.sessions),
                "devices": sorted({s.device_key for s in self.sessions}),
                "fusions": _fusion_records(self.sessions),
                "misses": self.misses, "narrowed": self.narrowed,
                "bypassing": bypassing_kernels(str(self.config.rootpath)),
                "compiled_kernels": triton_cache.counts_report(),
                "entries": codec.encode(
                    entries, "worker.textproto").decode() if entries else ""}

    def _entries_of_this_process(self):
        out, _ = self._merge(
            [("this run", s.dump_entries()) for s in self.sessions])
        return out

    def _gather(self):
        """Statistics, misses and tuned entries of the whole run, from this
        process or, on a controller, from every worker."""
        if not self.is_controller:
            self._compiled = triton_cache.counts_report()
            self._bypassing = bypassing_kernels(str(self.config.rootpath))
            self._fusions = _fusion_records(self.sessions)
            return (_stats_dict(self.sessions), self.misses,
                    [("this run", s.dump_entries()) for s in self.sessions])
        stats = dict.fromkeys(STAT_FIELDS, 0)
        misses, runs = [], []
        bypassing = set()
        fusions = []
        for worker, payload in sorted(self.worker_outputs):
            bypassing.update(payload.get("bypassing", ()))
            fusions.extend(payload.get("fusions", ()))
            for name in STAT_FIELDS:
                stats[name] += payload["stats"].get(name, 0)
            misses.extend(payload["misses"])
            self.narrowed.extend(n for n in payload["narrowed"]
                                 if n not in self.narrowed)
            if payload["entries"]:
                runs.append((worker, codec.decode(
                    payload["entries"].encode(), f"{worker}.textproto")))
        self._bypassing = sorted(bypassing)
        self._fusions = _sorted_records(fusions)
        self._compiled = triton_cache.merged_counts(
            [p.get("compiled_kernels") for _, p in self.worker_outputs])
        return stats, misses, runs

    def _merge(self, runs):
        """The workers' entries as one run: a fusion two workers tuned to
        different winners is decided by the selection rule's margins, the
        old cache's entry as the incumbent (cache/merge.py)."""
        entries, conflicts = merge.merge(runs, "measured",
                                         self.old_entries or [])
        return entries, [c.as_dict() for c in conflicts]

    def _finish_update(self, session, exitstatus, runs):
        cache = self.settings.cache
        prune = self.settings.prune and not self.narrowed
        # Pruning drops what no test used on the devices this run ran on;
        # another device's entries are that device's to prune.
        devices = {s.device_key for s in self.sessions} | {
            device for _, payload in self.worker_outputs
            for device in payload.get("devices", ())} | {
            e.key.device for _, entries in runs for e in entries}
        old = self.old_entries or []
        updated = cache_update.update(old, runs,
                                      prune_devices=devices if prune else ())
        result = self.result
        result.conflicts = [c.as_dict() for c in updated.conflicts]
        if exitstatus != 0 or session.testsfailed:
            result.written = False
            result.not_written_because = (
                f"{session.testsfailed} test(s) failed" if session.testsfailed
                else f"pytest exit status {int(exitstatus)}")
            return
        if self.settings.prune and self.narrowed:
            result.prune_refused = "not a full run: " + "; ".join(
                self.narrowed)
        if not prune and not self.narrowed:
            # Kept on the devices this run ran on, though no test used
            # them (a shape no test calls any more): said, with the flag
            # that drops them.
            result.unused = [
                _describe(e.key) for e in sorted(updated.kept,
                                                 key=lambda e: e.key)
                if e.key.device in devices]
        new = updated.entries
        # By fusion, as regenerate and `autotune_cache diff` say it: an
        # edited kernel's fusions are re-tuned, and a changed winner is
        # compared with the old one measured in this run when it was.
        self.changes = summary.CacheChanges(
            old, new, not_offered=summary.not_offered_fusions(self._fusions))
        result.changes = self.changes
        result.entries = len(new)
        try:
            # Leaves a file that already holds these bytes alone (an
            # unchanged cache keeps its inode and time stamps); an entry
            # whose winner stayed may still have gained measured configs.
            written = codec.dump_results(new, cache)
        except (codec.CacheFileError, OSError) as e:
            result.written = False
            result.not_written_because = str(e)
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        result.written = bool(written)
        if not written:
            result.not_written_because = "no change"

    def pytest_terminal_summary(self, terminalreporter):
        pytest_terminal.write_summary(terminalreporter, self.result,
                                      self.config)


def bypassing_kernels(root):
    """Kernels that Triton's own triton.autotune decorated, in the
    project's modules (those under `root`, installed packages left out),
    while the drop-in is not installed: they tune at every run, unseen by
    the cache. Names as module.attribute, sorted."""
    from autotune.runtime import triton_patch
    if triton_patch.triton_autotuner_class() is None or \
            triton_patch.installed():
        return []
    root = os.path.join(os.path.realpath(root), "")
    found = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        # The cheap tests first: this walks every loaded module.
        if not path or "site-packages" in path or "dist-packages" in path \
                or not os.path.realpath(path).startswith(root):
            continue
        for attr, value in list(vars(module).items()):
            if triton_patch.is_triton_autotuner(value):
                found.add(f"{name}.{attr}")
    return sorted(found)


def _narrowing(config):
    """What on the command line selects part of the tests."""
    opt = config.option
    out = []
    if getattr(opt, "keyword", ""):
        out.append(f"-k {opt.keyword}")
    if getattr(opt, "markexpr", ""):
        out.append(f"-m {opt.markexpr}")
    if any("::" in arg for arg in config.args):
        out.append("test ids given")
    if getattr(opt, "lf", False) or getattr(opt, "stepwise", False):
        out.append("--lf / --sw")
    return out


def _install(sess):
    """Makes `sess` the process's current autotuning session."""
    runtime_session.set_current(sess)


class StatsView:
    """The statistics of the autotuning session a test runs in: attributes
    are session totals; since_test_start() gives what this test added."""

    def __init__(self, start=None, values=None):
        self._start = start
        self._values = values  # a snapshot: fixed numbers, not live ones

    def _session(self):
        return runtime_session.session()

    def __getattr__(self, name):
        if name in STAT_FIELDS:
            if self._values is not None:
                return self._values[name]
            return getattr(self._session().stats, name)
        raise AttributeError(name)

    def __getitem__(self, name):
        # Item access as well: since_test_start() used to return a dict.
        if name not in STAT_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __repr__(self):
        return "StatsView(" + ", ".join(
            f"{n}={getattr(self, n)!r}" for n in STAT_FIELDS) + ")"

    def as_dict(self):
        return {n: getattr(self, n) for n in STAT_FIELDS}

    def since_test_start(self):
        """What this test added, as the same kind of object (attributes;
        as_dict() for a dict)."""
        before = self._start or dict.fromkeys(STAT_FIELDS, 0)
        return StatsView(values={n: getattr(self, n) - before[n]
                                 for n in STAT_FIELDS})


def stats_view(request):
    """What the autotune_stats fixture (pytest_autotune) returns."""
    start = request.node.stash.get(_ITEM_START, None)
    if start is not None:
        return StatsView(start[2])
    stats = runtime_session.session().stats
    return StatsView({n: getattr(stats, n) for n in STAT_FIELDS})
