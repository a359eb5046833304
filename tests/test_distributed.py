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
def test_a_diverging_rank_ends_the_job_with_one_error(tmp_path):
    results = run_job(tmp_path, 2, "diverge", timeout_s=30)
    for r in (0, 1):
        error = results[r].get("error", "")
        assert "not tuning the same fusion" in error, results[r]
        assert "rank 0:" in error and "rank 1:" in error
        assert "n=40" in error and "n=48" in error, error


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
def test_ranks_with_different_caches_stop_instead_of_hanging(tmp_path):
    # Rank 0 hits n=40 in its cache and goes on to n=72; rank 1 misses
    # n=40: they meet with different fusions.
    results = run_job(tmp_path, 2, "hitmiss", timeout_s=30)
    for r in (0, 1):
        error = results[r].get("error", "")
        assert "not tuning the same fusion" in error, results[r]
        assert "rank 0: the start of axpb_kernel [n=72" in error, error
        assert "rank 1: the start of axpb_kernel [n=40" in error, error


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
