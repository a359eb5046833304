"""Ranks of a torch.distributed job (gloo on 127.0.0.1, real processes)
tune together: one winner per fusion, the candidates split, no
communication on a hit, and an error instead of a hang."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "dist_worker.py")
N_CONFIGS = 8  # dist_worker.CONFIGS


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path, world, mode="ok", timeout_s=60.0, wait_s=300):
    port = free_port()
    env = dict(os.environ, TRITON_INTERPRET="1",
               AUTOTUNE_LOCK_DIR=str(tmp_path / "locks"))
    procs = [subprocess.Popen(
        [sys.executable, WORKER, str(r), str(world), str(port),
         str(tmp_path), mode, str(timeout_s)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)]
    results = {}
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} hung")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results[r] = json.loads(lines[-1]) if lines else \
            {"died": p.returncode, "stderr": err[-2000:]}
    return results


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_ranks_agree_split_the_work_and_hits_do_not_talk(tmp_path, world):
    results = run_job(tmp_path, world)
    for r, res in results.items():
        assert "winners" in res, (r, res)
    winners = [res["winners"] for res in results.values()]
    assert all(w == winners[0] for w in winners), winners
    # Two fusions, each split over the ranks: about 1/world of the
    # candidates each (round-robin, so within one per fusion).
    for res in results.values():
        share = res["benchmarks"] / (2 * N_CONFIGS)
        assert abs(share - 1 / world) <= 1 / N_CONFIGS + 1e-9, res
    assert sum(res["benchmarks"] for res in results.values()) == 2 * N_CONFIGS
    for res in results.values():
        assert res["exchanges_tune"] >= 2 * 2  # start + measuring, per miss
        assert res["exchanges_hit"] == 0 and res["hits"] == 2 and \
            res["hit_tuned"] == 0, res
    # Rank 0 wrote the per-fusion directory; one report per rank.
    assert results[0]["dirfiles"] == 2
    names = sorted(os.listdir(tmp_path))
    assert "report.json" in names and \
        all(f"report.rank{r}.json" in names for r in range(1, world))
    # Each report says which rank wrote it and what its session exchanged.
    for r in range(world):
        name = "report.json" if r == 0 else f"report.rank{r}.json"
        job = json.loads((tmp_path / name).read_text())["distributed"]
        assert job == {"rank": r, "world_size": world,
                       "exchanges": results[r]["exchanges_tune"]}, job


@pytest.mark.slow
def test_a_killed_rank_ends_the_others_within_the_timeout(tmp_path):
    start = time.monotonic()
    results = run_job(tmp_path, 2, "kill", timeout_s=8)
    assert "died" in results[1]
    error = results[0].get("error", "")
    assert "rank(s) 1" in error and "within 8 s" in error, results[0]
    assert "axpb_kernel [n=40" in error
    assert 8 <= results[0]["seconds"] < 8 + 10
    assert time.monotonic() - start < 120


@pytest.mark.slow
def test_a_rank_failing_its_share_stops_every_rank(tmp_path):
    results = run_job(tmp_path, 2, "fail", timeout_s=30)
    for r in (0, 1):
        error = results[r].get("error", "")
        assert "rank(s) 1 failed" in error and "broken" in error, results[r]


@pytest.mark.slow
@pytest.mark.parametrize("mode, named", [
    # Rank 1 tunes another size than rank 0.
    ("diverge", ["rank 0:", "rank 1:", "n=40", "n=48"]),
    # Rank 0 hits n=40 in its cache and goes on to n=72; rank 1 misses
    # n=40: they meet with different fusions.
    ("hitmiss", ["rank 0: the start of axpb_kernel [n=72",
                 "rank 1: the start of axpb_kernel [n=40"]),
])
def test_ranks_meeting_with_different_fusions_stop_with_one_error(
        tmp_path, mode, named):
    results = run_job(tmp_path, 2, mode, timeout_s=30)
    for r in (0, 1):
        error = results[r].get("error", "")
        assert "not tuning the same fusion" in error, results[r]
        for words in named:
            assert words in error, error


@pytest.mark.slow
def test_a_time_budget_ends_the_search_at_the_same_point_on_every_rank(
        tmp_path):
    """time_budget_s counts the seconds the ranks agree on at each
    exchange: rank 1's slower generations would otherwise make it stop
    while rank 0 asks for more (or the other way round), and the job end
    in the timeout's error."""
    results = run_job(tmp_path, 2, mode="timebudget", timeout_s=20.0)
    for r in (0, 1):
        assert "error" not in results[r], results[r]
        assert "died" not in results[r], results[r]
    assert results[0]["winners"] == results[1]["winners"]
    # The budget, not the evaluation count, ended it: fewer than the
    # space's 72 configs were measured in all.
    total = results[0]["benchmarks"] + results[1]["benchmarks"]
    assert total < 2 * 72, total


@pytest.mark.slow
def test_a_pickled_value_in_the_store_is_never_unpickled(tmp_path):
    """Rank 1 writes, under the key rank 0 reads, a pickled object whose
    unpickling would create a file: rank 0 stops with one line naming
    rank 1, and the file never appears."""
    results = run_job(tmp_path, 2, "pickle", timeout_s=20)
    assert results[1].get("posted") == "pickle", results[1]
    error = results[0].get("error", "")
    assert "rank 1 of this torch.distributed job posted a malformed value" \
        in error and "the start of axpb_kernel [n=40" in error, results[0]
    assert "\n" not in error
    assert not (tmp_path / "CANARY").exists()


@pytest.mark.slow
def test_ranks_with_different_kernel_code_stop_naming_both_fingerprints(
        tmp_path):
    """Rank 1's axpb_kernel computes the same values with another body:
    its configs are not known to be right for rank 0's kernel, so no
    winner is agreed on and nothing is persisted."""
    results = run_job(tmp_path, 2, "othercode", timeout_s=30)
    fingerprints = {r: results[r].get("fingerprint") for r in (0, 1)}
    assert None not in fingerprints.values() and \
        fingerprints[0] != fingerprints[1], results
    for r in (0, 1):
        error = results[r].get("error", "")
        assert "run different code for axpb_kernel [n=40" in error, results[r]
        assert f"rank 0 has kernel fingerprint {fingerprints[0]}" in error
        assert f"rank 1 has kernel fingerprint {fingerprints[1]}" in error
    assert os.listdir(tmp_path / "cache") == []


# -- what rank 0 reads from a real store: checked, never trusted -----------

def _tcp_store():
    import datetime
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=5))


def _setup():
    from autotune import Config
    from autotune.records import CacheKey
    key = CacheKey("cpu/test", "axpb_kernel", "0123456789abcdef", "n=40")
    configs = [Config({"BLOCK": b, "BUG": 0}) for b in (16, 32, 64, 128)]
    return key, configs


class _Measured:
    """This rank's own measurements: BLOCK microseconds each (the
    measuring itself is not what these tests are about)."""
    expected = "set"  # a reference exists: no reference run

    def __call__(self, config):
        from autotune.measure import backends
        from autotune.records import Candidate
        t = float(config.kwargs["BLOCK"])
        return Candidate(config, t), backends.Timing([t, t])

    def precheck(self, configs):
        pass


def _rank1_answers(key, configs, times):
    from autotune.measure import backends
    from autotune.records import Candidate
    from autotune.runtime import distributed
    return [distributed._wire((Candidate(c, t), backends.Timing([t])), key)
            for c, t in zip(configs[1::2], times)]


def _measure_with_rank1(store, raw_of):
    """Rank 0 of a 2-rank job on `store` measures its share of four
    configs; rank 1's value (raw_of(kind, what, honest value) -> bytes)
    is already in the store. Returns rank 0's answers."""
    from autotune.runtime import distributed
    key, configs = _setup()
    job = distributed.Job(store, 0, 2, timeout_s=5)
    shared = distributed.SharedEvaluator(job, _Measured(), "axpb_kernel "
                                         "[n=40]", key)
    seq = distributed.Job._sequences.get(id(store), 0)
    kind = f"measuring 4 candidates ({distributed._digest(configs)})"
    honest = [["ok", _rank1_answers(key, configs, [5.0, 7.0])], 0.25]
    store.set(f"{distributed._KEY_PREFIX}/{seq}/1",
              raw_of(kind, "axpb_kernel [n=40]", honest))
    store.set(f"{distributed._KEY_PREFIX}/{seq}/read/1", b"1")
    return configs, shared.measure_many(configs)


def test_a_well_formed_value_from_the_store_is_used():
    from autotune.runtime import distributed
    store = _tcp_store()
    configs, answers = _measure_with_rank1(store, distributed.encode)
    times = [candidate.run_time_us for candidate, _ in answers]
    assert times == [16.0, 5.0, 64.0, 7.0]
    assert [candidate.config for candidate, _ in answers] == configs


def _json(value):
    return json.dumps(value).encode()


def _replace(index, field, new):
    """Rank 1's honest value with one field of its index-th candidate
    replaced."""
    def raw(kind, what, value):
        value[0][1][index][field] = new
        return _json({"kind": kind, "what": what, "value": value})
    return raw


def _pickled(canary):
    import pickle

    class Canary:
        def __reduce__(self):
            return (open, (str(canary), "w"))
    return lambda kind, what, value: pickle.dumps(Canary())


MALFORMED = {
    "not utf-8": lambda k, w, v: b"\xff\xfe{}",
    "not json": lambda k, w, v: b"{'kind': 1}",
    "nested past the recursion limit": lambda k, w, v: b"[" * 200_000,
    "not an object": lambda k, w, v: _json([k, w, v]),
    "an extra field": lambda k, w, v: _json(
        {"kind": k, "what": w, "value": v, "code": "x"}),
    "nan run time": lambda k, w, v: json.dumps(
        {"kind": k, "what": w, "value": [["ok", [
            dict(a, run_time_us=float("nan")) for a in v[0][1]]], 0.1]},
        allow_nan=True).encode(),
    "infinite seconds": lambda k, w, v: _json(
        {"kind": k, "what": w, "value": [v[0], 1e999]}),
    "negative run time": _replace(0, "run_time_us", -1.0),
    "a boolean run time": _replace(0, "run_time_us", True),
    # Claims to be faster than what it measured: never a winner.
    "a run time that is not its samples' median": _replace(
        0, "run_time_us", 0.001),
    "a negative sample": _replace(0, "samples", [-5.0]),
    "a config it was not given": _replace(
        0, "config", ["BLOCK=16 BUG=0", 4, 3, 1]),
    "an unknown failure kind": _replace(0, "failure", "FASTEST"),
    "another fusion's signature": _replace(0, "signature", "n=48"),
    "a huge failure detail": _replace(0, "failure_detail", "x" * 10**6),
    "one measurement missing": lambda k, w, v: distributed_encode(
        k, w, [["ok", v[0][1][:1]], 0.1]),
    "neither ok nor error": lambda k, w, v: distributed_encode(
        k, w, [["fine", v[0][1]], 0.1]),
    "an escape in the status": lambda k, w, v: distributed_encode(
        k, w, [["\x1b]0;pwned\x07", v[0][1]], 0.1]),
}


def distributed_encode(kind, what, value):
    from autotune.runtime import distributed
    return distributed.encode(kind, what, value)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_value_is_one_line_naming_the_rank(case):
    from autotune.errors import DistributedTuningError
    store = _tcp_store()
    with pytest.raises(DistributedTuningError) as raised:
        _measure_with_rank1(store, MALFORMED[case])
    message = str(raised.value)
    assert "rank 1 of this torch.distributed job posted a malformed value " \
        "for measuring 4 candidates" in message, message
    assert "\n" not in message and "\x1b" not in message, message
    assert len(message) < 1000


def test_a_pickled_value_is_malformed_and_never_unpickled(tmp_path):
    from autotune.errors import DistributedTuningError
    canary = tmp_path / "CANARY"
    with pytest.raises(DistributedTuningError, match="rank 1 .* malformed"):
        _measure_with_rank1(_tcp_store(), _pickled(canary))
    assert not canary.exists()


def test_a_candidate_measured_for_other_code_names_both_fingerprints():
    from autotune.errors import DistributedTuningError
    store = _tcp_store()
    with pytest.raises(DistributedTuningError) as raised:
        _measure_with_rank1(store, _replace(1, "fingerprint",
                                            "fedcba9876543210"))
    message = str(raised.value)
    assert "rank 0 has kernel fingerprint 0123456789abcdef" in message
    assert "rank 1 has kernel fingerprint fedcba9876543210" in message


def test_an_error_a_rank_reports_is_printed_escaped():
    from autotune.errors import DistributedTuningError
    store = _tcp_store()
    with pytest.raises(DistributedTuningError) as raised:
        _measure_with_rank1(store, lambda k, w, v: distributed_encode(
            k, w, [["error", "broken \x1b[2J\x1b]0;title\x07"], 0.1]))
    message = str(raised.value)
    assert "rank(s) 1 failed" in message and "\x1b" not in message
    assert "broken \\x1b[2J\\x1b]0;title\\x07" in message


@pytest.mark.parametrize("start", [
    None, [], {"plan": [None, []], "device": "d"},
    {"plan": [None, []], "device": "d", "fingerprint": 7},
    {"plan": [1, []], "device": "d", "fingerprint": "f"},
    {"plan": [None, [None]], "device": "d", "fingerprint": "f"},
    {"plan": [None, []], "device": ["d"], "fingerprint": "f"},
])
def test_a_malformed_start_is_refused(start):
    from autotune.runtime import distributed
    with pytest.raises(distributed.MalformedExchangeError):
        distributed._start_of(start)
    assert distributed._start_of(
        {"plan": ["BLOCK=16", ["BLOCK=32"]], "device": "d",
         "fingerprint": "f"})


class _DictStore:
    """A 2-rank job's store held in a dict, as torch.distributed's stores
    answer: the key-value calls Job makes of one."""

    def __init__(self, data):
        self.data = data

    def set(self, key, value):
        self.data[key] = value

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]

    def delete_key(self, key):
        self.data.pop(key, None)

    def job(self, rank):
        """Rank `rank`'s Job on this store, which no exchange used yet."""
        from autotune.runtime import distributed
        distributed.Job._sequences.pop(id(self), None)
        return distributed.Job(self, rank, 2, timeout_s=5)


class _LeavingHost(_DictStore):
    """The store as rank 1 sees it when rank 0, its host, has posted its
    value and leaves (its process ends, the store with it) the moment
    rank 1 has read that value."""

    def __init__(self, prefix, value):
        super().__init__({f"{prefix}/0": value})
        self.gone = False
        self.after_gone = []

    def _alive(self, what):
        if self.gone:
            self.after_gone.append(what)
            raise RuntimeError("Connection reset by peer")

    def set(self, key, value):
        self._alive("set " + key)
        super().set(key, value)

    def check(self, keys):
        self._alive("check")
        return super().check(keys)

    def get(self, key):
        self._alive("get " + key)
        value = super().get(key)
        if key.endswith("/0"):
            self.gone = True
        return value

    def delete_key(self, key):
        self._alive("delete " + key)
        super().delete_key(key)


def test_a_rank_that_has_every_value_ends_its_exchange_when_the_host_leaves():
    from autotune.runtime import distributed
    prefix = f"{distributed._KEY_PREFIX}/0"
    store = _LeavingHost(prefix, distributed.encode("the end", "f", 0))
    job = store.job(1)
    # Rank 1's bookkeeping after the last exchange (its read mark, the
    # previous key's removal) finds no store: it had every value.
    job._posted = f"{distributed._KEY_PREFIX}/prev/1"
    assert job.exchange("the end", "f", 1) == [0, 1]
    assert store.after_gone  # the store was gone when it tried


class _SlowReader(_DictStore):
    """The store as rank 0 sees it: rank 1 posted its value and marks it
    read only some polls later (it is still reading)."""

    def __init__(self, prefix, value, polls=5):
        super().__init__({f"{prefix}/1": value})
        self.prefix = prefix
        self.polls = polls

    def check(self, keys):
        if f"{self.prefix}/read/1" in keys:
            self.polls -= 1
            if self.polls <= 0:
                self.data[f"{self.prefix}/read/1"] = b"1"
        return super().check(keys)


def test_the_store_host_waits_until_every_rank_has_read_the_exchange():
    # Rank 0 hosts the store, which ends with its process: it returns from
    # an exchange (and may leave) only when every rank has read it.
    from autotune.runtime import distributed
    prefix = f"{distributed._KEY_PREFIX}/0"
    store = _SlowReader(prefix, distributed.encode("the end", "f", 1))
    job = store.job(0)
    assert job.exchange("the end", "f", 0) == [0, 1]
    assert f"{prefix}/read/1" in store.data


def test_a_lost_context_on_another_rank_is_a_lost_context_here():
    """Rank 1 reports that its candidate corrupted the CUDA context: rank
    0 raises DeviceContextLostError naming rank 1 (tuning stops on every
    rank), not a plain failure counted as a lost round."""
    from autotune.errors import DeviceContextLostError
    from autotune.runtime import distributed
    store = _tcp_store()
    with pytest.raises(DeviceContextLostError) as raised:
        _measure_with_rank1(store, lambda k, w, v: distributed_encode(
            k, w, [["error", distributed.CONTEXT_LOST + "BLOCK=32: "
                    "corrupted the CUDA context"], 0.1]))
    message = str(raised.value)
    assert "rank(s) 1 lost the CUDA context" in message
    assert "corrupted the CUDA context" in message


def test_a_lost_context_here_travels_as_a_lost_context():
    from autotune.errors import DeviceContextLostError
    from autotune.runtime import distributed

    class Lost:
        expected = "set"

        def __call__(self, config):
            raise DeviceContextLostError("illegal memory access")
    key, configs = _setup()
    shared = distributed.SharedEvaluator(None, Lost(), "axpb_kernel", key)
    status, text = shared._guarded(configs[0])
    assert status == "error" and text.startswith(distributed.CONTEXT_LOST)
