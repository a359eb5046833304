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

What goes through the store is plain JSON (configs by their cached text,
times, failure kinds), never pickle: anything that reaches the store's port
can write a key, so every value read is untrusted input, checked field by
field before it is used. A value that is not what this version of the
exchange sends stops every rank with one error naming the rank it came
from; it never runs code and never picks a winner. Each measured candidate
carries the kernel fingerprint and fusion signature it was measured for,
so ranks whose kernels of one name differ in their code stop with an
error naming both fingerprints instead of agreeing on a config that is
right for one of them only.
"""
import collections
import hashlib
import json
import math
import statistics
import time

from autotune import log as logs
from autotune.errors import (DeviceContextLostError, DistributedTuningError,
                             MalformedExchangeError)
from autotune.host import device_lock
from autotune.measure import backends, tuner
from autotune.records import FAILURE_KINDS, Candidate

log = logs.get("distributed")

# Exchanges done by this process, by kind (the tests count them: a hit
# must do none).
EXCHANGES = collections.Counter()

_KEY_PREFIX = "rules_autotune"

# Bounds on what a rank's value may hold: far above anything a real
# exchange sends, far below what would exhaust memory or time.
MAX_VALUE_BYTES = 64 << 20
MAX_TEXT = 4096
MAX_NAME = 1 << 16  # a fusion's text: kernel name and signature
MAX_SAMPLES = 100_000


def _reject_constant(name):
    raise MalformedExchangeError(f"{name} is not a number JSON allows")


def encode(kind, what, value):
    """The bytes one rank posts: JSON, no NaN or infinity."""
    return json.dumps({"kind": kind, "what": what, "value": value},
                      allow_nan=False, separators=(",", ":")).encode()


def decode(raw):
    """(kind, what, value) of bytes read from the store; MalformedExchangeError when
    they are not an exchange's JSON object."""
    if not isinstance(raw, (bytes, bytearray)):
        raise MalformedExchangeError(f"a {type(raw).__name__}, not bytes")
    if len(raw) > MAX_VALUE_BYTES:
        raise MalformedExchangeError(f"{len(raw)} bytes, over {MAX_VALUE_BYTES}")
    try:
        data = json.loads(bytes(raw).decode("utf-8"),
                          parse_constant=_reject_constant)
    except MalformedExchangeError:
        raise
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError too
        raise MalformedExchangeError(f"not JSON ({type(e).__name__})") from None
    if not isinstance(data, dict) or set(data) != {"kind", "what", "value"}:
        raise MalformedExchangeError("not an object of kind, what and value")
    return (_text(data["kind"], "kind"),
            _text(data["what"], "what", MAX_NAME), data["value"])


def _text(value, name, limit=MAX_TEXT):
    if not isinstance(value, str):
        raise MalformedExchangeError(f"{name} is a {_type(value)}, not text")
    if len(value) > limit:
        raise MalformedExchangeError(f"{name} is {len(value)} characters, over {limit}")
    return value


def _number(value, name):
    """A finite number >= 0 (bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedExchangeError(f"{name} is a {_type(value)}, not a number")
    if not math.isfinite(value) or value < 0:
        raise MalformedExchangeError(f"{name} is {value!r}, not a finite number >= 0")
    return float(value)


def _list(value, name, length=None, limit=MAX_SAMPLES):
    if not isinstance(value, list):
        raise MalformedExchangeError(f"{name} is a {_type(value)}, not a list")
    if length is not None and len(value) != length:
        raise MalformedExchangeError(f"{name} has {len(value)} items, not {length}")
    if len(value) > limit:
        raise MalformedExchangeError(f"{name} has {len(value)} items, over {limit}")
    return value


def _type(value):
    return {dict: "object", list: "list", str: "text", bool: "boolean",
            type(None): "null"}.get(type(value), "number")


# An error a rank reports that is a lost CUDA context: every rank raises
# DeviceContextLostError (tuning stops), not a failed candidate or round.
CONTEXT_LOST = "context lost: "


def _raise_if_context_lost(failed, phase):
    """failed: {rank: reported error text}."""
    lost = {r: d for r, d in failed.items()
            if isinstance(d, str) and d.startswith(CONTEXT_LOST)}
    if lost:
        raise DeviceContextLostError(
            f"autotune: rank(s) {_ranks(sorted(lost))} lost the CUDA "
            f"context while {phase}; every rank stops tuning: "
            + "; ".join(f"rank {r}: {logs.printable(d[len(CONTEXT_LOST):])}"
                        for r, d in sorted(lost.items())))


def _status(value, name):
    """("ok", payload) or ("error", text) of a [status, payload] pair."""
    pair = _list(value, name, 2)
    if pair[0] == "error":
        return "error", _text(pair[1], f"{name}'s error")
    if pair[0] != "ok":
        raise MalformedExchangeError(f"{name} is neither ok nor error")
    return "ok", pair[1]


def _config_id(config):
    """How a config travels: its cached text and launch options, enough to
    check that a rank measured the config it was given."""
    return [config.params_text, config.num_warps, config.num_stages,
            config.num_ctas]


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
            posted = encode(kind, what, value)
            self.store.set(mine, posted)
            got = {self.rank: posted}
            deadline = time.monotonic() + self.timeout_s
            pause = 0.001
            while len(got) < self.world_size:
                for r in range(self.world_size):
                    if r not in got and self.store.check([f"{prefix}/{r}"]):
                        got[r] = self.store.get(f"{prefix}/{r}")
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
        except DistributedTuningError:
            raise
        except Exception as e:  # the store itself: its host (rank 0) died
            raise DistributedTuningError(
                f"autotune: rank {self.rank}: the torch.distributed store "
                f"failed during {kind} of {what} ({type(e).__name__}: {e}); "
                "rank 0, which hosts it, may have died") from None
        self._finish_exchange(prefix, mine)
        # Read by every rank before any raises: each stops with the same
        # error (rank 0 first waits for the others to have read).
        decoded = {}
        for r in sorted(got):
            try:
                decoded[r] = decode(got[r])
            except MalformedExchangeError as e:
                raise self.malformed(r, kind, what, e) from None
        got = decoded
        differ = {r: (k, w) for r, (k, w, _) in got.items()
                  if (k, w) != (kind, what)}
        if differ:
            lines = "; ".join(
                f"rank {r}: {logs.printable(got[r][0][:200])} of "
                f"{logs.printable(got[r][1][:200])}" for r in sorted(got))
            raise self.failure(
                "autotune: the ranks of this torch.distributed job are not "
                "tuning the same fusion (every rank must meet the same "
                "misses in the same order: the same shapes and caches): "
                f"{lines}")
        return [got[r][2] for r in range(self.world_size)]

    def _finish_exchange(self, prefix, mine):
        """After this rank holds every value of the exchange at `prefix`:
        the previous exchange's key goes (every rank has posted this one,
        so all have read that), and this rank marks the exchange read.
        Rank 0 hosts a TCPStore, which ends with its process: it returns
        (and may leave, after a job's last exchange) only once every rank
        has read the exchange, or after the timeout. The others' store
        calls here are bookkeeping: the values are in hand, so a store
        whose host has left after every rank read is no error."""
        try:
            if self._posted is not None:
                self.store.delete_key(self._posted)
            self.store.set(f"{prefix}/read/{self.rank}", b"1")
            if self.rank == 0:
                self._wait_read(prefix, self.timeout_s)
        except Exception as e:  # noqa: BLE001 -- see the docstring
            if self.rank == 0:
                raise DistributedTuningError(
                    f"autotune: rank 0: the torch.distributed store it "
                    f"hosts failed ({type(e).__name__}: {e})") from None
            log.debug(f"autotune: rank {self.rank}: the store is gone after "
                      f"the exchange ({type(e).__name__}: {e})")
        self._posted = mine

    def _wait_read(self, prefix, limit_s):
        """Waits (at most limit_s) until every rank marked the exchange at
        `prefix` read."""
        keys = [f"{prefix}/read/{r}" for r in range(self.world_size)]
        deadline = time.monotonic() + limit_s
        pause = 0.001
        while not self.store.check(keys) and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def malformed(self, rank, kind, what, error):
        """The error for a value of `rank` that is not what a rank of this
        version sends (MalformedExchangeError): nothing it holds is used."""
        return self.failure(
            f"autotune: rank {rank} of this torch.distributed job posted a "
            f"malformed value for {kind} of {what} "
            f"({logs.printable(str(error)[:300])}); nothing in it is used. "
            "Every rank must run the same rules_autotune, and nothing else "
            "may write the job's store")

    def failure(self, message):
        """The error to raise after an exchange that every rank completed
        and that shows a problem. Rank 0 hosts a TCPStore, which dies with
        it: it first waits (a little) until every rank has read the
        exchange, so each can raise the same error instead of losing the
        store."""
        if self.rank == 0 and self._last is not None:
            try:
                self._wait_read(self._last, min(self.timeout_s, 10.0))
            except Exception:  # noqa: BLE001 -- the error below stands
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
    plan = [incumbent.short() if incumbent is not None else None,
            [s.short() for s in seeds]]
    views = job.exchange("the start", what, {
        "plan": plan, "device": identity, "fingerprint": key.fingerprint})
    starts = {}
    for r, view in enumerate(views):
        try:
            starts[r] = _start_of(view)
        except MalformedExchangeError as e:
            raise job.malformed(r, "the start", what, e) from None
    fingerprints = {r: start["fingerprint"] for r, start in starts.items()}
    if len(set(fingerprints.values())) > 1:
        raise job.failure(_different_code(key, fingerprints))
    plans = {r: start["plan"] for r, start in starts.items()}
    if len(set(map(repr, plans.values()))) > 1:
        raise job.failure(
            f"autotune: the ranks of this torch.distributed job start "
            f"tuning {what} from different caches (incumbent, seeds): "
            + "; ".join(f"rank {r}: {logs.printable(repr(tuple(p)))[:300]}"
                        for r, p in plans.items())
            + "; give every rank the same cache files")
    # Ranks that share a device (all of them on the interpreter): the
    # lowest takes its lock, for all of them; the others would wait for it
    # while it waits for them.
    first = min(r for r, start in starts.items()
                if start["device"] == identity)
    turn = getattr(sess, "_device_turn", None)
    if first != job.rank and turn is not None:
        turn.leave_to_other_rank()
    return SharedEvaluator(job, evaluator, what, key)


def _start_of(value):
    """A rank's start value, checked: {plan, device, fingerprint}."""
    if not isinstance(value, dict) or \
            set(value) != {"plan", "device", "fingerprint"}:
        raise MalformedExchangeError("the start is not an object of plan, device and "
                        "fingerprint")
    incumbent, seeds = _list(value["plan"], "the plan", 2)
    if incumbent is not None:
        _text(incumbent, "the incumbent")
    for seed in _list(seeds, "the seeds"):
        _text(seed, "a seed")
    _text(value["device"], "the device")
    _text(value["fingerprint"], "the fingerprint", 256)
    return value


def _different_code(key, fingerprints):
    """The error for ranks whose kernel of one name hashes differently."""
    return (f"autotune: the ranks of this torch.distributed job run "
            f"different code for {_fusion_text(key)}: "
            + "; ".join(f"rank {r} has kernel fingerprint "
                        f"{logs.printable(fp[:64])}"
                        for r, fp in sorted(fingerprints.items()))
            + " (the kernel's source, or a jit function it calls, differs "
            "between ranks); a config measured for one is not known to be "
            "right for the other: give every rank the same kernel source")


def _wire(answer, key):
    """A measured candidate as it travels: plain data, with the kernel
    fingerprint and fusion signature it was measured for."""
    candidate, timing = answer
    return {"config": _config_id(candidate.config),
            "run_time_us": candidate.run_time_us,
            "failure": candidate.failure,
            "failure_detail": candidate.failure_detail[:MAX_TEXT],
            "samples": timing.samples if timing is not None else None,
            "fingerprint": key.fingerprint, "signature": key.signature}


_WIRE_FIELDS = {"config", "run_time_us", "failure", "failure_detail",
                "samples", "fingerprint", "signature"}


def _unwire(value, config, key):
    """(Candidate, Timing or None) of a rank's wire value for `config`,
    checked: it is the config it was given, measured for this kernel and
    fusion, with times that are numbers. MalformedExchangeError, or _OtherCode when it
    was measured for another kernel's code."""
    if not isinstance(value, dict) or set(value) != _WIRE_FIELDS:
        raise MalformedExchangeError("a candidate is not an object of "
                        + ", ".join(sorted(_WIRE_FIELDS)))
    fingerprint = _text(value["fingerprint"], "a fingerprint", 256)
    signature = _text(value["signature"], "a signature", MAX_NAME)
    if signature != key.signature:
        raise MalformedExchangeError(f"a candidate measured for the fusion "
                        f"[{signature[:200]}], not [{key.signature}]")
    if fingerprint != key.fingerprint:
        raise _OtherCode(fingerprint)
    if value["config"] != _config_id(config):
        raise MalformedExchangeError(f"a candidate that is not the config it was given, "
                        f"{config.short()}")
    failure = value["failure"]
    if failure not in FAILURE_KINDS:
        raise MalformedExchangeError("a failure kind that is none of "
                        + ", ".join(FAILURE_KINDS))
    detail = _text(value["failure_detail"], "a failure detail")
    run_time_us = _number(value["run_time_us"], "a run time")
    samples = value["samples"]
    timing = None
    if samples is not None:
        samples = [_number(t, "a timing sample")
                   for t in _list(samples, "the timing samples")]
    if failure == "NONE":
        if not samples:
            raise MalformedExchangeError(f"{config.short()} ran with no timing samples")
        timing = backends.Timing(samples)
        if timing.median_us != run_time_us:
            raise MalformedExchangeError(f"{config.short()}'s run time {run_time_us!r} "
                            "is not the median of its samples")
    elif run_time_us != 0.0:
        raise MalformedExchangeError(f"{config.short()} failed but has a run time")
    return Candidate(config, run_time_us, failure, detail), timing


class _OtherCode(MalformedExchangeError):
    """A candidate measured for a kernel with another fingerprint."""

    def __init__(self, fingerprint):
        super().__init__(fingerprint)
        self.fingerprint = fingerprint


class SharedEvaluator:
    """Stands where the tuner's CandidateEvaluator and a CandidatePool
    stand (the tuner and the search call it as either): measures each batch
    of candidates split over the ranks and answers with everyone's
    measurements."""

    def __init__(self, job, evaluator, what, key):
        self.job = job
        self.inner = evaluator
        self.what = what
        self.key = key
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

    def _exchange(self, kind, value, read):
        """Every rank's value, by rank, each checked by read(rank, value)
        (MalformedExchangeError: an error naming the rank), with the ranks' seconds
        since the miss began."""
        views = self.job.exchange(kind, self.what, [
            value, time.monotonic() - self._started])
        values, seconds = [], []
        for r, view in enumerate(views):
            try:
                value, elapsed = _list(view, "the value", 2)
                seconds.append(_number(elapsed, "the seconds"))
                values.append(read(r, value))
            except _OtherCode as e:
                raise self.job.failure(_different_code(
                    self.key, {self.job.rank: self.key.fingerprint,
                               r: e.fingerprint})) from None
            except MalformedExchangeError as e:
                raise self.job.malformed(r, kind, self.what, e) from None
        self._agreed_seconds = max(seconds)
        return values

    def _guarded(self, config):
        try:
            return ["ok", _wire(self.inner(config), self.key)]
        except DeviceContextLostError as e:
            # Every rank stops as the rank that lost its context does.
            return ["error", (CONTEXT_LOST + f"{config.short()}: {e}")[:600]]
        except Exception as e:  # reported to every rank, not left to hang
            return ["error",
                    f"{config.short()}: {type(e).__name__}: {e}"[:300]]

    def _read_answers(self, configs):
        """read() of an exchange of measured candidates: ("ok",
        [(Candidate, Timing)] for `configs` of each rank) or ("error",
        text)."""
        def read(rank, value):
            status, payload = _status(value, "a rank's measurements")
            if status == "error":
                return status, payload
            mine = configs(rank)
            answers = _list(payload, "the measurements", len(mine))
            return status, [_unwire(a, c, self.key)
                            for a, c in zip(answers, mine)]
        return read

    def _check(self, results, phase):
        failed = {r: detail for r, (status, detail) in enumerate(results)
                  if status == "error"}
        _raise_if_context_lost(failed, f"{phase} of {self.what}")
        if failed:
            raise self.job.failure(
                f"autotune: rank(s) {_ranks(sorted(failed))} failed "
                f"{phase} of {self.what}: "
                + "; ".join(f"rank {r}: {logs.printable(d)}"
                            for r, d in sorted(failed.items())))

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
            status, payload = self._guarded(config)
            results = self._exchange(
                "the reference run",
                [status, [payload] if status == "ok" else payload],
                self._read_answers(lambda rank: [config]))
            self._check(results, "the reference run")
            oks = {r: d[0][0].ok for r, (_, d) in enumerate(results)}
            if len(set(oks.values())) > 1:
                raise self.job.failure(
                    f"autotune: ranks disagree whether {config.short()} of "
                    f"{self.what} runs correctly: " + "; ".join(
                        f"rank {r}: {'ok' if ok else 'failed'}"
                        for r, ok in sorted(oks.items())))
            self.answers[config] = results[0][1][0]
        if not todo:
            return
        rank, world = self.job.rank, self.job.world_size
        mine = [self._guarded(c) for c in todo[rank::world]]
        status = ["error", next(d for s, d in mine if s == "error")] \
            if any(s == "error" for s, _ in mine) else \
            ["ok", [d for _, d in mine]]
        results = self._exchange(
            f"measuring {len(todo)} candidates ({_digest(todo)})", status,
            self._read_answers(lambda r: todo[r::world]))
        self._check(results, "its share of the candidates")
        for r, (_, answers) in enumerate(results):
            for config, answer in zip(todo[r::world], answers):
                self.answers[config] = answer

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
            status = ["ok", self.inner.retime(config).median_us]
        except DeviceContextLostError as e:
            status = ["error", (CONTEXT_LOST + str(e))[:600]]
        except Exception as e:
            status = ["error", f"{type(e).__name__}: {e}"[:300]]

        def read(rank, value):
            status, payload = _status(value, "a retiming")
            return status, (payload if status == "error" else
                            _number(payload, "a retimed run time"))
        results = self._exchange(f"retiming {config.short()}", status, read)
        _raise_if_context_lost(
            {r: d for r, (s, d) in enumerate(results) if s == "error"},
            f"retiming {config.short()} of {self.what}")
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
