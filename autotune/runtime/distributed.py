"""Ranks of one torch.distributed job tune together: one config per fusion.

Ranks that tuned on their own would repeat the work world-size times and
could pick different configs for one fusion (noise decides near-ties),
changing numerics between ranks. When a default process group is
initialized (--autotune_distributed=auto, the default) or required
(=on), a miss is tuned by all ranks at once:

1. the ranks meet: each says which fusion it is tuning (with its incumbent
   and seeds); if they differ -- another shape, another kernel, a rank that
   hit its cache while another missed -- every rank stops with one
   DistributedTuningError naming the ranks and their fusions;
2. the candidates are split round-robin; each rank measures its share on
   its own device;
3. the measurements are exchanged, and every rank runs the same selection
   rule on the same numbers. A head-to-head retiming (a duel) is timed by
   every rank and the median of the ranks' times is what each sees, so the
   duels agree too. Every rank therefore picks the same winner.

Only rank 0 writes the per-fusion directory, the remote cache and the dump
(autotune.runtime.session). A hit communicates nothing.

The exchanges go through the process group's key-value store
(TCPStore/FileStore, whatever backend the group uses), polled against a
deadline (--autotune_distributed_timeout_s): a rank that does not arrive
-- dead, hung, or elsewhere -- is named in the error instead of hanging
the job.
"""
import collections
import hashlib
import pickle
import statistics
import time

from autotune import log as logs
from autotune.errors import DistributedTuningError
from autotune.measure import backends, device_lock, tuner

log = logs.get("distributed")

# Exchanges done by this process, by kind (the tests count them: a hit
# must do none).
EXCHANGES = collections.Counter()

_KEY_PREFIX = "rules_autotune"




def _dist():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() else None


class Job:
    """This rank's view of the job: its rank, the world size and the store
    the exchanges go through."""

    _sequences = {}  # id(store) -> exchanges made through it so far

    def __init__(self, store, rank, world_size, timeout_s):
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._posted = None
        self._last = None

    @classmethod
    def current(cls, options):
        """The job, or None when this process tunes alone."""
        mode = options.autotune_distributed
        if mode == "off":
            return None
        dist = _dist()
        if dist is None or not dist.is_initialized():
            if mode == "on":
                raise DistributedTuningError(
                    "--autotune_distributed=on: no torch.distributed default "
                    "process group is initialized in this process (call "
                    "torch.distributed.init_process_group before the first "
                    "tuned kernel, or use --autotune_distributed=auto)")
            return None
        world = dist.get_world_size()
        if world == 1:
            return None
        store = dist.distributed_c10d._get_default_store()
        return cls(store, dist.get_rank(), world,
                   options.autotune_distributed_timeout_s)

    def _next_sequence(self):
        key = id(self.store)
        n = self._sequences.get(key, 0)
        self._sequences[key] = n + 1
        return n

    def exchange(self, kind, what, value):
        """Every rank's value, by rank. kind and what (a short text: the
        fusion, the phase) must be the same on every rank; a rank that
        differs or does not arrive in time is an error naming it."""
        EXCHANGES[kind] += 1
        seq = self._next_sequence()
        prefix = f"{_KEY_PREFIX}/{seq}"
        mine = f"{prefix}/{self.rank}"
        try:
            self.store.set(mine, pickle.dumps((kind, what, value)))
            got = {self.rank: (kind, what, value)}
            deadline = time.monotonic() + self.timeout_s
            pause = 0.001
            while len(got) < self.world_size:
                for r in range(self.world_size):
                    if r not in got and self.store.check([f"{prefix}/{r}"]):
                        got[r] = pickle.loads(self.store.get(f"{prefix}/{r}"))
                if len(got) == self.world_size:
                    break
                if time.monotonic() > deadline:
                    missing = sorted(set(range(self.world_size)) - set(got))
                    raise DistributedTuningError(
                        f"autotune: rank(s) {_ranks(missing)} of this "
                        f"torch.distributed job did not reach {kind} of "
                        f"{what} within {self.timeout_s:g} s "
                        "(--autotune_distributed_timeout_s); they may have "
                        "died, hit their cache where this rank missed, or be "
                        "tuning another fusion. Ranks "
                        f"{_ranks(sorted(got))} were here.")
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            self._last = prefix
            self.store.set(f"{prefix}/read/{self.rank}", b"1")
            # Every rank has posted this exchange, so all have read the
            # previous one: its key can go.
            if self._posted is not None:
                self.store.delete_key(self._posted)
            self._posted = mine
        except DistributedTuningError:
            raise
        except Exception as e:  # the store itself: its host (rank 0) died
            raise DistributedTuningError(
                f"autotune: rank {self.rank}: the torch.distributed store "
                f"failed during {kind} of {what} ({type(e).__name__}: {e}); "
                "rank 0, which hosts it, may have died") from None
        differ = {r: (k, w) for r, (k, w, _) in got.items()
                  if (k, w) != (kind, what)}
        if differ:
            lines = "; ".join(f"rank {r}: {got[r][0]} of {got[r][1]}"
                              for r in sorted(got))
            raise self.failure(
                "autotune: the ranks of this torch.distributed job are not "
                "tuning the same fusion (every rank must meet the same "
                "misses in the same order: the same shapes and caches): "
                f"{lines}")
        return [got[r][2] for r in range(self.world_size)]


    def failure(self, message):
        """The error to raise after an exchange that every rank completed
        and that shows a problem. Rank 0 hosts a TCPStore, which dies with
        it: it first waits (a little) until every rank has read the
        exchange, so each can raise the same error instead of losing the
        store."""
        if self.rank == 0 and self._last is not None:
            deadline = time.monotonic() + min(self.timeout_s, 10.0)
            keys = [f"{self._last}/read/{r}" for r in range(self.world_size)]
            try:
                while not self.store.check(keys) and \
                        time.monotonic() < deadline:
                    time.sleep(0.01)
            except Exception:
                pass
        return DistributedTuningError(message)


def _ranks(ranks):
    return ", ".join(map(str, ranks))


def _fusion_text(key):
    return f"{key.kernel} [{key.signature}]"


def _digest(configs):
    text = repr([c.sort_key for c in configs]).encode()
    return hashlib.sha256(text).hexdigest()[:12]


def share(sess, key, evaluator, incumbent=None, seeds=()):
    """A SharedEvaluator for this miss when the process is a rank of a
    torch.distributed job, else None. Meets the other ranks first."""
    job = Job.current(sess.options)
    if job is None:
        return None
    sess.distributed_job = (job.rank, job.world_size)
    identity = device_lock.device_identity(sess.backend)
    what = _fusion_text(key)
    plan = (incumbent.short() if incumbent is not None else None,
            [s.short() for s in seeds])
    views = job.exchange("the start", what, (plan, identity))
    plans = {r: v[0] for r, v in enumerate(views)}
    if len(set(map(repr, plans.values()))) > 1:
        raise job.failure(
            f"autotune: the ranks of this torch.distributed job start "
            f"tuning {what} from different caches (incumbent, seeds): "
            + "; ".join(f"rank {r}: {p}" for r, p in plans.items())
            + "; give every rank the same cache files")
    # Ranks that share a device (all of them on the interpreter): the
    # lowest takes its lock, for all of them; the others would wait for it
    # while it waits for them.
    first = min(r for r, v in enumerate(views) if v[1] == identity)
    turn = getattr(sess, "_device_turn", None)
    if first != job.rank and turn is not None:
        turn.leave_to_other_rank()
    return SharedEvaluator(job, evaluator, what)


def _wire(answer):
    candidate, timing = answer
    return candidate, (timing.samples if timing is not None else None)


def _unwire(answer):
    candidate, samples = answer
    return candidate, (backends.Timing(samples) if samples else None)


class SharedEvaluator:
    """Stands where the tuner's CandidateEvaluator and a CandidatePool
    stand (the tuner and the search call it as either): measures each batch
    of candidates split over the ranks and answers with everyone's
    measurements."""

    def __init__(self, job, evaluator, what):
        self.job = job
        self.inner = evaluator
        self.what = what
        self.answers = {}
        self._started = time.monotonic()
        self._agreed_seconds = 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def agreed_seconds(self):
        """Seconds since this miss began, as of the last exchange: the
        slowest rank's count, the same on every rank, so a time budget
        ends the search after the same measurement everywhere (each
        rank's own clock would not: one could stop while another asks
        for more)."""
        return self._agreed_seconds

    def _exchange(self, kind, value):
        """Every rank's value, by rank, with the ranks' seconds since
        the miss began."""
        views = self.job.exchange(kind, self.what, (
            value, time.monotonic() - self._started))
        self._agreed_seconds = max(seconds for _, seconds in views)
        return [v for v, _ in views]

    def _guarded(self, config):
        try:
            return ("ok", _wire(self.inner(config)))
        except Exception as e:  # reported to every rank, not left to hang
            return ("error", f"{config.short()}: {type(e).__name__}: {e}"[:300])

    def _check(self, results, phase):
        failed = {r: detail for r, (status, detail) in enumerate(results)
                  if status == "error"}
        if failed:
            raise self.job.failure(
                f"autotune: rank(s) {_ranks(sorted(failed))} failed "
                f"{phase} of {self.what}: "
                + "; ".join(f"rank {r}: {d}" for r, d in sorted(failed.items())))

    def _measure(self, configs):
        todo = [c for c in dict.fromkeys(configs) if c not in self.answers]
        if not todo:
            return
        # With no reference=, the first candidate that runs is the
        # reference: every rank runs the candidates in order until one
        # does, so all compare against the same outputs; rank 0's
        # measurement is the one kept.
        while todo and self.inner.expected is None:
            config = todo.pop(0)
            results = self._exchange("the reference run",
                                     self._guarded(config))
            self._check(results, "the reference run")
            oks = {r: d[0].ok for r, (_, d) in enumerate(results)}
            if len(set(oks.values())) > 1:
                raise self.job.failure(
                    f"autotune: ranks disagree whether {config.short()} of "
                    f"{self.what} runs correctly: " + "; ".join(
                        f"rank {r}: {'ok' if ok else 'failed'}"
                        for r, ok in sorted(oks.items())))
            self.answers[config] = _unwire(results[0][1])
        if not todo:
            return
        rank, world = self.job.rank, self.job.world_size
        mine = [self._guarded(c) for c in todo[rank::world]]
        status = ("error", next(d for s, d in mine if s == "error")) \
            if any(s == "error" for s, _ in mine) else \
            ("ok", [d for _, d in mine])
        results = self._exchange(
            f"measuring {len(todo)} candidates ({_digest(todo)})", status)
        self._check(results, "its share of the candidates")
        for r, (_, answers) in enumerate(results):
            for config, answer in zip(todo[r::world], answers):
                self.answers[config] = _unwire(answer)

    # -- as the evaluator -------------------------------------------------
    def precheck(self, configs):
        self.inner.precheck(configs)
        self._measure(configs)

    def __call__(self, config):
        if config not in self.answers:
            self._measure([config])
        return self.answers[config]

    def retime(self, config):
        """Timed by every rank at once; each sees the median of the ranks'
        times, so every rank's duel ends the same way."""
        try:
            status = ("ok", self.inner.retime(config).median_us)
        except Exception as e:
            status = ("error", f"{type(e).__name__}: {e}"[:300])
        results = self._exchange(f"retiming {config.short()}", status)
        failed = [r for r, (s, _) in enumerate(results) if s == "error"]
        if failed:
            # Raised on every rank alike: the duel counts it as a loss.
            raise tuner.TuningError(
                f"retiming {config.short()} failed on rank(s) "
                f"{_ranks(failed)}")
        return backends.Timing([statistics.median(t for _, t in results)])

    def finish(self):
        self.inner.finish()

    # -- as the pool ------------------------------------------------------
    def measure_many(self, configs):
        self._measure(configs)
        return [self.answers[c] for c in configs]

    def replay(self, evaluator):
        return self

    def close(self):
        pass
