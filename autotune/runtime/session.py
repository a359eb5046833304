"""The autotuning session: one per process, shared by every tuned kernel.

The decorator (autotune.runtime.autotuner) computes a call's fusion key and asks the
session, which looks the key up (memory -> loaded results files ->
per-fusion directory); on a hit launches with the cached config without any
benchmarking; on a miss tunes, stores and launches. One Session per process
holds the caches and the statistics and writes the dump and the report at
exit.
"""
import atexit
import collections
import contextlib
import dataclasses
import json
import os
import sys
import threading

from autotune import log as logs
from autotune import codec, flags
from autotune.host import device_lock, stamp
from autotune.measure import backends
from autotune.runtime import distributed, freshness, run_report
from autotune.runtime import dump as dump_file
from autotune.runtime.freshness import version_drift
from autotune.cache.tiers import (CacheConflictError, PerFusionDirectory,
                                    ResultsCache)
from autotune.cache import neighbours as reuse
from autotune.cache import update as cache_update
from autotune.contract import REGENERATE_COMMAND, REPORT_FILE
from autotune.errors import (AutotuneCacheMissError, AutotuneError,
                             CacheFileError, WrongDeviceError)

log = logs.get("runtime")

def _workspace_relative(path):
    """A runfiles path as the user knows it: relative to the workspace."""
    root = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                        os.environ.get("TEST_WORKSPACE", ""))
    if os.environ.get("TEST_SRCDIR") and path.startswith(root + os.sep):
        return path[len(root) + 1:]
    return path


class Stats:
    def __init__(self):
        self.hits = 0
        self.remote_hits = 0
        self.misses = 0
        self.tuned = 0
        self.incumbents_kept = 0
        self.incumbents_replaced = 0
        self.nearest = 0
        self.candidate_benchmarks = 0
        self.compile_rejected = 0  # configs dropped by the compile check
        self.tuning_seconds = 0.0
        self.saved_seconds = 0.0
        self.fusions = {}  # CacheKey -> {"status":, "source":}
        self.miss_reasons = collections.Counter()  # MISS_REASONS -> count
        # (component, tuned with, running) -> hits tuned under another
        # major.minor (--autotune_version_match=loose)
        self.version_drift = collections.Counter()
        # Offered configs hits never measured, counted per fusion (a config
        # added to a list counts once for each fusion it serves), and the
        # fusions that offer any.
        self.unmeasured_configs = 0
        self.unmeasured_fusions = 0
        self.seeded = 0  # misses tuned from the nearest entries' winners
        self.seed_saved_benchmarks = 0  # what those seeds spared

    @property
    def drifted_entries(self):
        """Hits tuned under another Triton, torch or CUDA major.minor."""
        return sum(self.version_drift.values())

    def as_dict(self):
        return {"hits": self.hits, "remote_hits": self.remote_hits,
                "misses": self.misses,
                "tuned": self.tuned, "nearest": self.nearest,
                "incumbents_kept": self.incumbents_kept,
                "incumbents_replaced": self.incumbents_replaced,
                "candidate_benchmarks": self.candidate_benchmarks,
                "compile_rejected": self.compile_rejected,
                "tuning_seconds": round(self.tuning_seconds, 3),
                "saved_seconds": round(self.saved_seconds, 3),
                "miss_reasons": dict(sorted(self.miss_reasons.items())),
                "version_drift": [
                    {"component": what, "tuned_with": then, "running": now,
                     "entries": n} for (what, then, now), n in
                    sorted(self.version_drift.items())],
                "unmeasured_configs": self.unmeasured_configs,
                "unmeasured_fusions": self.unmeasured_fusions,
                "seeded": self.seeded,
                "seed_saved_benchmarks": self.seed_saved_benchmarks}


def _saved_by(entry):
    """Tuning time a hit saves: recorded at tuning time; for older entries,
    the sum of the measured candidate times is a lower bound."""
    prov = entry.provenance
    if prov.tuning_seconds:
        return prov.tuning_seconds
    return sum(c.run_time_us for c in entry.candidates) / 1e6


class Session:
    def __init__(self, options=None, backend=None):
        self.options = options or flags.Options()
        self.lock = threading.RLock()
        self.stats = Stats()
        self.miss_keys = []
        self.miss_notes = {}  # key -> why a tier could not answer
        # key -> why a cached entry of that key was not used (a config no
        # longer offered, another version under strict matching)
        self.miss_refusals = {}
        self._loaded_index = None  # built on the first miss (_index)
        self.finished = False
        # A forked child inherits the session; only this process finishes
        # it (summary line, dump, report).
        self.pid = os.getpid()
        self.load_reports = []
        # key -> the compile requests of its winner's launches this run
        # (autotune/runtime/launch_record.py), written with the entry.
        self.compile_requests = {}
        # The device turn of the fusion being tuned (device_turn), and
        # what each tuning reports of itself for the JSON report (its
        # device wait and interval, the seeds it started from).
        self._device_turn = None
        self.tuning_notes = {}
        # (rank, world size) of this process in a torch.distributed job
        # that tuned with it (autotune.runtime.distributed), else None.
        self.distributed_job = None
        # Exchanges between ranks made before this session (the report
        # counts this session's own).
        self.exchanges_before = sum(distributed.EXCHANGES.values())
        self._check_sharding()
        # A run that writes a cache (a dump; a pytest update sets it too)
        # records each differently specialised launch of a winner as a
        # compile request. Others record none: the first request of a
        # kernel costs about 50 ms (Triton's CUDA backend and binder),
        # start-up a load run has no use for.
        self.records_compile_requests = bool(
            self.options.dump_autotune_results_to)
        self.backend = backend or backends.select_backend(
            self.options.autotune_backend)
        self.device_key = self.backend.device_key()
        self.versions = self.backend.versions()
        self._check_expected_gpu()
        self._check_runner_stamp()
        per_fusion = None
        if self.options.per_fusion_autotune_cache_dir:
            per_fusion = PerFusionDirectory(
                self.options.per_fusion_autotune_cache_dir,
                self.options.autotune_cache_mode)
        remote = None
        if self.options.autotune_remote_cache:
            from autotune.cache import remote as cache_remote# imports redis: only if set
            try:
                remote = cache_remote.RemoteCache.from_options(self.options)
            except cache_remote.RemoteCacheError as e:
                raise AutotuneError(f"--autotune_remote_cache: {e}") from None
        self.cache = ResultsCache(self.device_key, per_fusion, remote)
        for path in self.options.load_autotune_results_from:
            self._load(path)
        # (kernel, signature, device) -> entries of the incumbents files.
        self.incumbents = {}
        for path in self.options.autotune_incumbents_from:
            self._load_incumbents(path)
        for flag, path in (
                ("dump_autotune_results_to",
                 self.options.dump_autotune_results_to),
                ("autotune_report_to", self.options.autotune_report_to)):
            _check_output_path(flag, path)
        dump = self.options.dump_autotune_results_to
        loaded = {os.path.realpath(p)
                  for p in self.options.load_autotune_results_from}
        if dump and codec.is_regular_file(dump) and \
                os.path.realpath(dump) not in loaded:
            # The dump merges into this file at exit: say now, not after
            # the tests ran, that it cannot be read.
            dump_file.read_existing(self.dump_source(), dump)

    def _check_sharding(self):
        try:
            total = int(os.environ.get("TEST_TOTAL_SHARDS", "1") or "1")
        except ValueError:
            raise AutotuneError(
                f"TEST_TOTAL_SHARDS={os.environ['TEST_TOTAL_SHARDS']!r} is not "
                "a number of shards") from None
        if self.options.autotune_fail_if_sharded and total > 1:
            target = os.environ.get("TEST_TARGET", "this dump target")
            raise AutotuneError(
                f"{target} dumps an autotune cache and must run unsharded, "
                f"but it runs as shard "
                f"{int(os.environ.get('TEST_SHARD_INDEX', '0')) + 1} of "
                f"{total}: each shard would see only part of the fusions. "
                f"Run `bazel test {target} --test_sharding_strategy=disabled`"
                f", or `{REGENERATE_COMMAND}`, which does.")

    def _check_runner_stamp(self):
        """A stamp that does not describe this runner is an error (it keys
        the test's cached result: autotune/host/stamp.py); a GPU test
        under Bazel without one is told, once, that an upgrade leaves its
        cached pass standing."""
        if stamp.check(self.backend):
            return
        if self.backend.name == "gpu" and os.environ.get("TEST_TARGET"):
            log.warning(
                f"autotune: note: {stamp.STAMP_ENV} is not set: Bazel's "
                "cached result of this test does not depend on the "
                "installed Triton, torch or driver (see "
                f"{stamp.DOCS})")

    def _check_expected_gpu(self):
        check_expected_gpu(self.options.autotune_expected_gpu,
                           self.device_key)

    def _load(self, path):
        if not os.path.exists(path):
            raise AutotuneError(
                f"autotune cache {_workspace_relative(path)} does not exist "
                f"yet: create it with `{REGENERATE_COMMAND}`, then commit it")
        try:
            loaded = self.cache.load_file(
                path, self.options.autotune_max_cache_bytes)
        except (CacheFileError, CacheConflictError) as e:
            raise AutotuneError(f"cannot load autotune results: {e}")
        usable = self.cache.usable_in(loaded)
        # Device keys from the file, escaped for a terminal.
        devices = logs.printable(", ".join(f"{d}: {n}" for d, n in
                                      sorted(loaded.by_device.items()))
                            or "none")
        line = (f"autotune: loaded {path}: {len(loaded.entries)} entries "
                f"({devices}); usable on {self.device_key}: ")
        other_triton = 0
        if self.options.autotune_version_match == "loose":
            mine = freshness.without_triton(self.device_key)
            other_triton = sum(
                n for d, n in loaded.by_device.items()
                if d != self.device_key and freshness.without_triton(d) == mine)
        # Entries of another Triton are hits too (loose matching): counted
        # among the usable ones, and said apart.
        line += str(usable + other_triton)
        if other_triton:
            line += (f" ({usable} tuned under this Triton, {other_triton} "
                     "under another: hits by --autotune_version_match="
                     "loose)")
        elif loaded.entries and not usable:
            line += " -- none for this device, every fusion will miss"
        self.load_reports.append({"path": path,
                                  "entries": len(loaded.entries),
                                  "by_device": dict(loaded.by_device),
                                  "usable": usable})
        log.info(line)

    def _load_incumbents(self, path):
        if not os.path.exists(path):
            # The first regenerate has no cache yet: tune without them.
            log.info(f"autotune: {path} does not exist yet (a first run): "
                     "every fusion is tuned from scratch")
            return
        if not self.options.autotune_retune and os.path.realpath(path) \
                not in {os.path.realpath(p) for p in
                        self.options.load_autotune_results_from}:
            # Incremental: a fusion whose entry matches is a hit, served
            # (and dumped) as it is, never measured; only misses tune, a
            # stale fusion with its old config as the incumbent.
            self._load(path)
        try:
            entries = codec.load_results(
                path, limit=self.options.autotune_max_cache_bytes)
        except CacheFileError as e:
            raise AutotuneError(f"cannot load autotune incumbents: {e}")
        for entry in entries:
            self.incumbents.setdefault(entry.key.fusion, []).append(
                entry)
        log.info(f"autotune: incumbents {path}: {len(entries)} entries ("
                 + ("every fusion re-measured: --autotune_retune)"
                    if self.options.autotune_retune else
                    "hits used as they are, misses tuned)"))

    def incumbent_for(self, key):
        """The incumbent entry of a fusion: same kernel, signature and
        device, any fingerprint or Triton version; the one with this exact
        key first."""
        entries = self.incumbents.get(key.fusion)
        if not entries:
            return None
        for entry in entries:
            if entry.key == key:
                return entry
        return entries[0]

    def incumbent_config(self, key):
        entry = self.incumbent_for(key)
        return entry.best if entry is not None else None

    # -- lookups ---------------------------------------------------------
    def resolve(self, key, tune_fn, neighbours_fn=None, offer=None):
        """Returns the Entry for `key`: from a cache, or by calling
        tune_fn(seeds, only) on a miss, following the miss policy.
        offer (autotune.runtime.offers.Offer): what the decoration offers
        now; a cached winner it does not offer is stale. only: None (the
        whole offer), or, in an update, the configs a hit never measured
        with its winner (the incumbent)."""
        with self.lock:
            found = self._verdict(key, offer, self.cache.lookup(key))
            if found.top_up:
                return self._top_up(key, found.entry,
                                    list(found.unmeasured), tune_fn, offer)
            if found.usable:
                self._count_hit(key, found.entry, found.source,
                                len(found.unmeasured))
                return found.entry
            self.stats.misses += 1
            self.miss_keys.append(key)
            reason = found.reason
            self.stats.miss_reasons[reason] += 1
            if found.how == freshness.REFUSED:
                self.miss_refusals[key] = found.words
            remote = self.cache.remote
            if remote is not None and remote.last_lookup_failed:
                self.miss_notes[key] = remote.unreachable_note()
            if self.options.require_complete_autotune_results:
                self.stats.fusions[key] = {"status": "missed", "source": None,
                                           "miss_reason": reason}
                raise AutotuneCacheMissError(self.miss_keys, self.miss_notes,
                                             self._index().stale(self.miss_keys),
                                             self.miss_refusals)
            policy = self.options.autotune_miss_policy
            # The default policy needs no neighbours: no scan of the cache.
            neighbours = neighbours_fn() if neighbours_fn and \
                policy != "tune" else []
            same_device = [n for n in neighbours
                           if n.key.device == key.device]
            if policy == "nearest" and same_device:
                return self._nearest(key, same_device[0])
            seeds = reuse.seed_configs(neighbours) if policy == "seeded" \
                else []
            # The entry refused (a stale winner) is replaced where a tier
            # holds it, and none this lookup would refuse is adopted.
            refused = found.entry if found.how == freshness.REFUSED \
                else None
            entry = self._count_tuned(key, tune_fn(seeds, None), reason)
            return self._keep(entry, refused, lambda held: self._verdict(
                held.key, offer, (held, None)).how == freshness.REFUSED)

    def _keep(self, entry, refused=None, refuses=None):
        """A freshly tuned entry into the caches this process writes.
        refused: the cached entry the lookup refused, replaced where a tier
        still holds it; refuses: a test of an entry a tier holds, one it
        refuses is never used (see ResultsCache.store)."""
        if self._rank() not in (None, 0):
            # Every rank tuned the same winner: rank 0 writes it.
            self.cache.remember(entry)
            return entry
        return self.cache.store(entry, refused, refuses)

    def _verdict(self, key, offer, found):
        """freshness.verdict of `found` ((entry, source) the caches
        answered for `key`) under this run's options."""
        return freshness.verdict(
            key, found, self._index, offer, self._updating,
            self.options.autotune_version_match == "strict", self.versions)

    def _drift(self, entry):
        return version_drift(freshness.tuned_versions(entry), self.versions)

    def _index(self):
        """The loaded results files' index, built on the first miss."""
        if self._loaded_index is None:
            self._loaded_index = freshness.LoadedIndex(self.cache.loaded,
                                                       self.cache.sources)
        return self._loaded_index

    def _updating(self, key):
        """Whether this run updates the cache that holds `key` (its file is
        the incumbents file, and not every fusion is re-measured)."""
        return not self.options.autotune_retune and \
            self.incumbent_for(key) is not None

    def _top_up(self, key, entry, unmeasured, tune_fn, offer=None):
        """An update of a hit whose decoration offers configs it never
        measured: those are measured with its winner as the incumbent (not
        the whole list again), beside what the entry's figures compare
        (top_up_configs), and their times join the entry's."""
        tuned = tune_fn([], top_up_configs(entry, unmeasured, offer))
        spent = tuned.provenance.tuning_seconds
        tuned = topped_up(entry, tuned)
        tuned = tuned.replace(candidates=sorted(
            tuned.candidates, key=lambda c: c.config.sort_key))
        self.stats.tuned += 1
        self.stats.tuning_seconds += spent
        self.stats.fusions[key] = {
            "status": "tuned", "source": None,
            "miss_reason": f"{len(unmeasured)} offered config(s) added",
            # The hit's winner was this measurement's incumbent.
            "incumbent": "kept" if tuned.best == entry.best else "replaced",
            "incumbent_config": entry.best.short(),
            **self.tuning_notes.pop(key, {})}
        return self._keep(tuned, entry)

    def _count_hit(self, key, entry, source, unmeasured=0):
        """Statistics of a hit; an entry from below memory is remembered."""
        if source == "memory":
            return
        if source == "remote":
            self.stats.remote_hits += 1
            self.stats.fusions[key] = {"status": "remote_hit",
                                       "source": self.cache.remote.display}
        else:
            self.stats.hits += 1
            self.stats.fusions[key] = {"status": "hit", "source": source}
        drift = self._drift(entry)
        if drift is not None:
            self.stats.version_drift[drift] += 1
            self.stats.fusions[key]["tuned_with"] = f"{drift[0]} {drift[1]}"
        if unmeasured:
            self.stats.unmeasured_configs += unmeasured
            self.stats.unmeasured_fusions += 1
            self.stats.fusions[key]["unmeasured_configs"] = unmeasured
        self.stats.saved_seconds += _saved_by(entry)
        self.cache.remember(entry, key)

    def _nearest(self, key, nearest):
        """The nearest policy: the nearest shape's entry, under this key."""
        entry = nearest.replace(
            key=key, candidates=(),
            provenance=nearest.provenance._replace(
                tuner="nearest", tuning_seconds=0.0))
        self.stats.nearest += 1
        self.stats.fusions[key] = {"status": "nearest",
                                   "source": nearest.key.signature}
        self.cache.remember(entry)
        return entry

    def _count_tuned(self, key, entry, reason):
        """Statistics of a tuned fusion; the incumbent's entry as it was when
        the tuning kept its config (so a dump is byte-identical)."""
        self.stats.tuned += 1
        self.stats.tuning_seconds += entry.provenance.tuning_seconds
        self.stats.fusions[key] = {"status": "tuned", "source": None,
                                   "miss_reason": reason,
                                   **self.tuning_notes.pop(key, {})}
        incumbent = self.incumbent_for(key)
        if incumbent is None:
            return entry
        kept = entry.best == incumbent.best
        self.stats.fusions[key].update(
            incumbent="kept" if kept else "replaced",
            incumbent_config=incumbent.best.short())
        if not kept:
            self.stats.incumbents_replaced += 1
            return entry
        self.stats.incumbents_kept += 1
        return incumbent if incumbent.key == key and \
            cache_update.undecodable(incumbent) is None else entry

    def _rank(self):
        """This process's rank when it is one of a torch.distributed job
        (autotune_distributed not off), else None."""
        job = self.job()
        return job[0] if job else None

    def job(self):
        """(rank, world size) when this process is one of a
        torch.distributed job (autotune_distributed not off), else None."""
        if self.distributed_job is not None:
            return self.distributed_job
        if self.options.autotune_distributed == "off":
            return None
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and \
                    dist.is_initialized() and dist.get_world_size() > 1:
                return dist.get_rank(), dist.get_world_size()
        except Exception:
            return None
        return None

    @contextlib.contextmanager
    def device_turn(self, key):
        """The span of one fusion's tuning: its first measurement takes
        the device's lock (autotune.host.device_lock), the end of the
        span releases it; a tuning that measures nothing takes nothing."""
        turn = device_lock.DeviceTurn(self.backend)
        self._device_turn = turn
        try:
            yield turn
        finally:
            self._device_turn = None
            turn.release()
            times = turn.report()
            if times:
                self.tuning_notes.setdefault(key, {}).update(times)

    def device_wait_s(self):
        """Seconds the fusion being tuned waited for its device lock: not
        tuning time (another process was measuring), so kept out of the
        entry's tuning_seconds; the report lists it as device_wait_s."""
        turn = self._device_turn
        return (turn.waited_s or 0.0) if turn is not None else 0.0

    def take_device(self):
        """Waits for this process's device lock during a fusion's tuning
        (before its first measurement here or in a worker)."""
        if self._device_turn is not None:
            self._device_turn.take()

    def count_benchmark(self):
        self.take_device()
        self.stats.candidate_benchmarks += 1

    def count_compile_rejected(self, n):
        self.stats.compile_rejected += n

    def note_tuning(self, key, **facts):
        """What a tuning of `key` tells the report of itself (its selection's
        reason, the seeds it started from: runtime/tuning.py)."""
        self.tuning_notes.setdefault(key, {}).update(facts)

    def count_seeds(self, key, seeds, saved):
        """A seeded miss: `seeds` configs measured first, `saved`
        benchmarks fewer than the same tuning without them."""
        self.stats.seeded += 1
        self.stats.seed_saved_benchmarks += saved
        self.note_tuning(key, seeds={"configs": seeds,
                                     "benchmarks_saved": saved})

    # -- exit ------------------------------------------------------------
    def note_compile_request(self, key, request):
        with self.lock:
            self.compile_requests.setdefault(key, {})[request] = None

    def dump_source(self):
        """What the dump reads of this session (runtime/dump.py)."""
        return dump_file.DumpSource(self.cache.memory, self.compile_requests,
                                    self.options.autotune_max_cache_bytes)

    def run_record(self):
        """What the end's line and reports read (runtime/run_report.py)."""
        return run_report.RunRecord(
            self.device_key, self.stats, self.cache.memory, self.cache.remote,
            self.load_reports, self.miss_keys, self.miss_notes, self.job(),
            self.exchanges_before)

    def dump_entries(self):
        return dump_file.dump_entries(self.dump_source())

    def summary_line(self):
        return run_report.summary_line(self.run_record())

    def fusion_records(self):
        return run_report.fusion_records(self.run_record())

    def report(self):
        return run_report.report(self.run_record())

    def finish(self):
        """Dumps the results file if asked and writes the report. Called at
        exit; safe to call earlier (later calls do nothing)."""
        with self.lock:
            if self.finished or self.pid != os.getpid():
                return
            self.finished = True
            dump = self.options.dump_autotune_results_to
            rank = self._rank()
            if dump and rank not in (None, 0):
                log.info(f"autotune: rank {rank}: the dump is rank 0's "
                         f"to write ({dump})")
                dump = None
            if dump:
                entries, kept = dump_file.merged_entries(
                    self.dump_source(), dump)
                codec.dump_results(entries, dump)
                log.info(f"autotune: dumped {len(entries)} entries to {dump} "
                         f"({len(entries) - kept} used by this run, {kept} "
                         "kept from the file)")
                run_report.write_report_page(dump, entries)
            log.info(self.summary_line())
            if self.cache.remote is not None:
                log.info(self.cache.remote.summary_line())
                self.cache.remote.close()
            report_path = self.options.autotune_report_to
            if not report_path and os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR"):
                report_path = os.path.join(
                    os.environ["TEST_UNDECLARED_OUTPUTS_DIR"],
                    REPORT_FILE)
            if report_path and rank not in (None, 0):
                # One report per rank, side by side.
                stem, ext = os.path.splitext(report_path)
                report_path = f"{stem}.rank{rank}{ext}"
            if report_path:
                codec.atomic_write(report_path, json.dumps(
                    self.report(), indent=2, sort_keys=True).encode() + b"\n")


def _check_output_path(flag, path):
    """A file written at exit: its problems are reported at start-up,
    not after the whole run."""
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise AutotuneError(f"--{flag}={path}: directory {directory} does "
                            "not exist")
    if os.path.isdir(path):
        raise AutotuneError(f"--{flag}={path}: is a directory; give a file "
                            "name")


# The gpu_types entry a gpu_autotuned_test target was made for (its key
# in gpu_types), when the macro says so: the wrong-device line names it.
GPU_TYPES_ENTRY_ENV = "AUTOTUNE_GPU_TYPES_ENTRY"


def wrong_device_line(target, want, device_key, entry=None):
    """The one line a Bazel test target on the wrong GPU fails with, in the
    words of the BUILD file (gpu_types entry or gpu_type), not of the flag
    the macro passes for it."""
    if entry:
        declared = f'gpu_types entry "{entry}" (device "{want}")'
        tag = f"gpu-{entry.lower()}"
    else:
        declared = f'gpu_types = gpu_type(device = "{want}")'
        tag = f"gpu-{want.lower()}"  # a type's default name
    return (f"autotune: {target} is for {declared}: this test may only run "
            f"on a {want}, and this run is on {device_key}; run each "
            f"machine's own type only (bazel test //... "
            f"--test_tag_filters={tag} on a {want}; CPU CI: its CPU "
            f"type's tag)")


def check_expected_gpu(want, device_key):
    """Refuses a device whose key does not contain `want`
    (--autotune_expected_gpu, which each gpu_types entry's device sets)."""
    if not want or want.lower() in device_key.lower():
        return
    target = os.environ.get("TEST_TARGET")
    if target:
        raise WrongDeviceError(wrong_device_line(
            target, want, device_key, os.environ.get(GPU_TYPES_ENTRY_ENV)))
    raise WrongDeviceError(
        f"--autotune_expected_gpu={want} (what gpu_types = gpu_type("
        f"device = \"{want}\") sets): this test may only run on a {want},"
        f" and this run is on {device_key}. Run it on a {want} (tagged "
        f"gpu-{want.lower()}, for --test_tag_filters), or drop its device "
        f"(the flag) to let it run on other devices")


def top_up_configs(entry, unmeasured, offer=None):
    """What an update measures of a hit whose decoration offers configs
    it never measured: those, and, so that the figures the entry shows
    compare times of one run, its winner (the incumbent), its stored
    runner-up (the winner's "measured N% slower" rival) and the first
    offered config (the baseline of "Nx the first offered config")."""
    ok = sorted((c for c in entry.candidates if c.ok and
                 c.config != entry.best),
                key=lambda c: (c.run_time_us, c.config.sort_key))
    first = offer.pruned[0] if offer is not None and offer.pruned else None
    configs = [entry.best] + list(unmeasured)
    for config in ([ok[0].config] if ok else []) + [first]:
        if config is not None and config not in configs:
            configs.append(config)
    return configs


def topped_up(entry, tuned):
    """The entry after a top-up: this run's winner, time and provenance,
    every config it measured with this run's time, the others' stored
    times kept; the baseline (default_run_time_us) kept when this run
    did not measure the first offered config."""
    measured = {c.config for c in tuned.candidates}
    provenance = tuned.provenance
    if not provenance.default_run_time_us:
        provenance = provenance._replace(
            default_run_time_us=entry.provenance.default_run_time_us)
    return tuned.replace(
        candidates=tuple(c for c in entry.candidates
                         if c.config not in measured)
        + tuple(tuned.candidates), provenance=provenance)


def _exit_on_wrong_device(error):
    """Under `bazel test`, a target on the wrong device fails whole with
    its one line and exit status 1, not with a traceback from inside the
    test that met the first kernel (a test framework would catch a
    SystemExit and print one)."""
    sys.stderr.write(str(error) + "\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)


_SESSION = None
_SESSION_LOCK = threading.Lock()


def session():
    """The process-wide session, created from AUTOTUNE_FLAGS on first use."""
    global _SESSION
    if _SESSION is None:
        with _SESSION_LOCK:
            if _SESSION is None:
                options = flags.from_environment()
                try:
                    _SESSION = Session(options)
                except WrongDeviceError as e:
                    if os.environ.get("TEST_TARGET"):
                        _exit_on_wrong_device(e)
                    raise
    return _SESSION


def set_current(new_session):
    """Makes `new_session` (or None) the process's current session, without
    finishing the one it replaces (the pytest plugin runs one session per
    test scope and finishes them itself)."""
    global _SESSION
    with _SESSION_LOCK:
        _SESSION = new_session


def configure(backend=None, **options):
    """Python API mirroring AUTOTUNE_FLAGS: keyword names are the flag names
    (per_fusion_autotune_cache_dir=..., load_autotune_results_from=[...]).
    Starts from AUTOTUNE_FLAGS; each keyword given replaces that flag's
    value, the others keep the environment's. Replaces the current session
    (finishing it first)."""
    global _SESSION
    unknown = set(options) - set(flags.flag_names())
    for name in sorted(unknown):
        if flags.removed_flag_message(name):
            raise AutotuneError(flags.removed_flag_message(name))
    if unknown:
        raise AutotuneError(f"unknown option(s): {', '.join(sorted(unknown))};"
                            f" known: {', '.join(flags.flag_names())}")
    for name in flags.LIST_FLAGS:
        value = options.get(name)
        if isinstance(value, str):
            options[name] = flags.split_list(value)
        elif value is not None:
            options[name] = [os.fspath(p) for p in value]
    opts = dataclasses.replace(flags.from_environment(), **options)
    flags.check_values(opts)
    opts = flags.resolve_options(opts)
    with _SESSION_LOCK:
        if _SESSION is not None:
            _SESSION.finish()
        _SESSION = Session(opts, backend=backend)
    return _SESSION


def _finish_at_exit():
    current = _SESSION
    if current is None:
        return
    try:
        current.finish()
    except Exception as e:  # exit path: report, and fail the process
        log.error(f"autotune: error at exit: {e}")
        # Only os._exit can set the exit status here, and it skips the
        # handlers still to run: run them first (this handler runs before
        # every other one, see _run_first_at_exit).
        atexit.unregister(_finish_at_exit)
        atexit._run_exitfuncs()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


def _run_first_at_exit():
    """Called at interpreter shutdown once threads are done with, just
    before the atexit handlers run (last registered first): registering
    _finish_at_exit again makes it the first, so that when it fails no
    other handler has run yet."""
    atexit.unregister(_finish_at_exit)
    atexit.register(_finish_at_exit)


atexit.register(_finish_at_exit)
try:  # private, but the hook concurrent.futures uses for the same purpose
    threading._register_atexit(_run_first_at_exit)
except (AttributeError, RuntimeError):
    pass


__all__ = ["configure", "session", "Session", "AutotuneError",
           "AutotuneCacheMissError"]


def device():
    """The torch device the current session's backend runs kernels on:
    tests, examples and benchmarks create their tensors there (CUDA
    tensors for the GPU backend, CPU tensors for the interpreter)."""
    return session().backend.device
