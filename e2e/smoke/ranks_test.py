"""py_test: a torch.distributed job of 2 ranks (gloo on 127.0.0.1) whose
ranks run the workspace's kernel at two sizes.

Run as the test, this launches the ranks (this file again with --rank,
and RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set as torchrun would)
and waits for them. Each rank is a process of its own with its own autotune session:
the dump target's ranks tune each miss together and rank 0 writes the
dump; the load target's ranks hit the cache. Each rank writes its report
(autotune_report.json for rank 0, autotune_report.rank1.json), and this
launcher checks that they launched the same config for every fusion.

The launcher itself never imports autotune: its session would write a
report of its own over rank 0's.
"""
import datetime
import json
import os
import socket
import subprocess
import sys
import time

WORLD_SIZE = 2
SIZES = (512, 1500)
# Well under the test's timeout (size medium: 300 s), so a hung job is
# reported here, naming the ranks, rather than killed by Bazel.
JOB_TIMEOUT_S = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch():
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD_SIZE))
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__),
                               "--rank", str(r)], env=dict(env, RANK=str(r)))
             for r in range(WORLD_SIZE)]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        for proc in ranks:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        hung = [r for r, p in enumerate(ranks) if p.poll() is None]
        for proc in ranks:
            proc.kill()
        sys.exit(f"ranks_test: rank(s) {hung} still running after "
                 f"{JOB_TIMEOUT_S} s")
    failed = {r: p.returncode for r, p in enumerate(ranks) if p.returncode}
    if failed:
        sys.exit(f"ranks_test: rank(s) failed (rank: exit status): {failed}")
    check_reports()


def check_reports():
    """Every rank launched the same config for every fusion (read from the
    reports the ranks wrote)."""
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outputs:
        return
    names = ["autotune_report.json"] + [
        f"autotune_report.rank{r}.json" for r in range(1, WORLD_SIZE)]
    best = {}
    for rank, name in enumerate(names):
        path = os.path.join(outputs, name)
        if not os.path.exists(path):
            sys.exit(f"ranks_test: rank {rank} wrote no report ({name})")
        with open(path) as f:
            report = json.load(f)
        best[rank] = {(r["kernel"], r["signature"]): r["best"]
                      for r in report["fusions"]}
    if len(best[0]) != len(SIZES) or any(b != best[0] for b in best.values()):
        sys.exit(f"ranks_test: the ranks' configs differ: {best}")
    print(f"ranks_test: {WORLD_SIZE} ranks, same config for "
          f"{len(best[0])} fusions")


def run_rank(rank):
    import autotune  # first: picks Triton's interpreter when there is no GPU

    import torch
    import torch.distributed as dist

    from mykernels.scale_shift import scale_shift

    dist.init_process_group("gloo", init_method="env://", rank=rank,
                            world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=120))
    for n in SIZES:
        x = torch.arange(n, dtype=torch.float32)
        torch.testing.assert_close(scale_shift(x, 2.0, -3.0), x * 2.0 - 3.0)
    print(f"rank {rank}: {autotune.session().summary_line()}")
    # The process group stays up until exit: the session writes this
    # rank's report at exit and names it after the rank it reads there.


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        run_rank(int(sys.argv[2]))
    else:
        launch()
