"""What a session tells at its end: the summary line, the JSON report
(autotune_report.json, the schema of autotune.report.summary for its
fusions) and the report page a dump target writes next to its dump. They
read a RunRecord, the session's record of exactly what they need
(autotune.runtime.session:Session.run_record), not the session."""
import dataclasses
import os
from typing import Mapping, Optional, Sequence

from autotune import codec
from autotune import log as logs
from autotune.errors import AutotuneError
from autotune.binaries import triton_cache
from autotune.report import page, summary
from autotune.runtime import distributed

log = logs.get("runtime")

# The report page a dump target writes next to its dump.
REPORT_PAGE_FILE = "autotune_report.html"


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a session's end tells of, read from the session."""
    device_key: str
    stats: object                   # the session's Stats
    memory: Mapping                 # the results this run used, by key
    remote: object                  # the remote tier, or None
    load_reports: Sequence          # what each loaded file gave
    miss_keys: Sequence             # the keys that missed, in order
    miss_notes: Mapping             # key -> why a tier could not answer
    job: Optional[tuple] = None     # (rank, world size) of a job, else None
    exchanges_before: int = 0       # the job's exchanges when it started


def summary_line(run):
    """The one line a session logs at its end: fusions by outcome, why
    lookups missed, incumbents, benchmarks and seconds, version drift."""
    s = run.stats
    line = (f"autotune: {len(s.fusions)} fusions on {run.device_key}: "
            f"{s.hits} hit, "
            + (f"{s.remote_hits} remote hit, " if run.remote
               else "")
            + f"{s.tuned} tuned, {s.misses} missed"
            + (" (" + ", ".join(f"{n} {reason}" for reason, n in
                                sorted(s.miss_reasons.items())) + ")"
               if s.miss_reasons else "")
            + (f" ({s.nearest} served by nearest shape)" if s.nearest
               else "")
            + (f"; incumbents: {s.incumbents_kept} kept, "
               f"{s.incumbents_replaced} replaced"
               if s.incumbents_kept or s.incumbents_replaced else "")
            + (f"; {s.seeded} seeded from the nearest entries, "
               f"{s.seed_saved_benchmarks} benchmarks saved" if s.seeded
               else "")
            + f"; {s.candidate_benchmarks} candidate benchmarks, "
            f"{s.tuning_seconds:.2f} s tuning, "
            f"{s.saved_seconds:.2f} s saved by hits")
    for (what, then, now), n in sorted(s.version_drift.items()):
        line += (f"; {n} entries tuned with {what} {then}, running {now}:"
                 " regenerate --retune refreshes them")
    if s.unmeasured_configs:
        line += ("; " + unmeasured_text(s.unmeasured_configs,
                                        s.unmeasured_fusions)
                 + "; an update measures them")
    compiled = triton_cache.counts_report()
    if compiled is not None:
        line += "; " + triton_cache.counts_text(compiled)
    return line


def unmeasured_text(configs, fusions):
    """How many offered configs hits never measured, said per fusion: one
    config added to a list two fusions use counts twice."""
    return (f"{configs} offered config(s) never measured, counted per "
            f"fusion: {fusions} fusion(s) (a config added to a list counts "
            "once for each fusion it serves)")


def fusion_records(run):
    """Every fusion this run met, with its candidates (the schema of
    autotune.report.summary, shared with the pytest plugin's report)."""
    return [summary.fusion_record(k, run.memory.get(k), **v)
            for k, v in sorted(run.stats.fusions.items())]


def report(run):
    """The JSON report (autotune_report.json) of a session."""
    fusions = fusion_records(run)
    remote = run.remote
    return {"device": run.device_key, **run.stats.as_dict(),
            "loaded": run.load_reports,
            "remote": remote.report() if remote else None,
            "distributed": distributed_report(run),
            "compiled_kernels": triton_cache.counts_report(),
            "missing": [{"kernel": k.kernel, "signature": k.signature,
                         "device": k.device,
                         "reason": run.stats.fusions.get(k, {}).get(
                             "miss_reason"),
                         **({"note": run.miss_notes[k]}
                            if k in run.miss_notes else {})}
                        for k in run.miss_keys],
            "fusions": fusions}


def distributed_report(run):
    """The report's view of the job: this rank, the world size and the
    exchanges this session made (a run of hits makes none); None when
    the process tunes alone."""
    job = run.job
    if job is None:
        return None
    return {"rank": job[0], "world_size": job[1],
            "exchanges": sum(distributed.EXCHANGES.values())
            - run.exchanges_before}


def write_report_page(dump, entries):
    """The report page of a dump target's dump, next to it (page_path);
    never fails the run: the page is a view of the dump."""
    path = page_path(dump)
    if path is None:
        return
    try:
        page.require_matplotlib()
    except AutotuneError:
        log.info(f"autotune: no report page next to {dump}: "
                 f"{page.INSTALL_HINT}")
        return
    try:
        compiled = triton_cache.counts_report()
        text = page.build_page(
            [(os.path.basename(dump), entries)],
            run_notes=[f"This run's {triton_cache.counts_text(compiled)}"]
            if compiled is not None else ())
        codec.atomic_write(path, text.encode())
    except Exception as e:  # the page is a view of the dump: never
        # let drawing it fail a run whose dump is written
        log.warning(f"autotune: warning: no report page next to {dump}: "
                    f"{type(e).__name__}: {e}")
        return
    log.info(f"autotune: report page {testlogs_path(path)}")


def testlogs_path(path, env=None):
    """How to find a file of TEST_UNDECLARED_OUTPUTS_DIR after the test:
    under `bazel test` (TEST_TARGET set) the sandbox path is gone once the
    test ends, and Bazel keeps the directory under bazel-testlogs (zipped
    into outputs.zip before Bazel 8)."""
    env = os.environ if env is None else env
    target = env.get("TEST_TARGET", "")
    repo, slashes, rest = target.partition("//")
    package, colon, name = rest.partition(":")
    if not slashes or not colon or not name:
        return path
    repo = repo.lstrip("@")
    parts = (["external", repo] if repo else []) + \
        ([package] if package else []) + [name]
    outputs = "bazel-testlogs/" + "/".join(parts) + "/test.outputs"
    return (f"{outputs}/{os.path.basename(path)} once the test is done (in "
            f"{outputs}/outputs.zip before Bazel 8; written to {path})")


def page_path(dump):
    """Where a dump target's report page goes: next to its dump, in
    TEST_UNDECLARED_OUTPUTS_DIR (None elsewhere: a dump outside a test's
    outputs is someone's own file, and so is the directory it is in)."""
    outdir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outdir or os.path.dirname(os.path.abspath(dump)) != \
            os.path.abspath(outdir):
        return None
    return os.path.join(outdir, REPORT_PAGE_FILE)
