"""The miss path: what happens between a cache miss and the entry that is
stored for it.

    entry = Tuning(session, key, launch, options).run(seeds)

A `Tuning` is one fusion's miss. It decides the candidates (the kernel's
configs or its space; the seeds of a seeded miss first; the cached config
of the fusion, the incumbent, kept unless beaten), where they are measured
(in this process, in a pool of worker processes, split over the ranks of a
torch.distributed job), compiles them ahead on a GPU, reports progress,
runs the exhaustive measurement or the evolutionary search, and records
the entry. It knows the kernel only through `Launch` (one call of the
kernel, with its hooks) and `TuningOptions` (the tuning keywords of the
decorator), so a fake launch and a fake backend drive it without Triton
(tests/test_tuning.py).

The decorator (autotune.runtime.autotuner) keeps what Triton's autotuner
has: the arguments, hooks, keys, pruning, and what a finished tuning
leaves on the kernel object (configs_timings, bench_time).
"""
import dataclasses
import os
import time
import warnings
from typing import Any, Callable, NamedTuple, Optional

from autotune import log as logs
from autotune import unwrap
from autotune.errors import AutotuneError, AutotuneWarning
from autotune.measure import selection, tuner
from autotune.records import Candidate, Entry
from autotune.runtime import distributed, parallel
from autotune.runtime import progress as progress_module
from autotune.search.evolutionary import EvolutionarySearch, Measurement

log = logs.get("tuning")


class Launch(NamedTuple):
    """One call of the kernel, as a miss measures it.

    run(config, after_kernel=None): one launch with `config` and the hooks
    around it; after_kernel(), when given, is called once the kernel ran
    and before a post-launch hook restores anything.
    named: the call's arguments by name (the tensors are restored between
    candidates and compared with the reference).
    make_setup() -> setup or None: called once, when the miss measures
    anything (a setup snapshots the arguments it restores); setup() is then
    called before every launch, outside the time.
    time_fn(run, setup) -> backends.Timing: how a candidate is timed (None:
    the backend's timing).
    kernel, grid, args, kwargs: the kernel object and the call, for what
    imports the kernel by its module-level name: worker processes rebuild
    the launch from them, and compiling ahead compiles that kernel.
    """
    run: Callable
    named: dict
    make_setup: Optional[Callable] = None
    time_fn: Optional[Callable] = None
    kernel: Any = None
    grid: Any = None
    args: tuple = ()
    kwargs: Optional[dict] = None


@dataclasses.dataclass
class TuningOptions:
    """The decorator's tuning keywords, as one miss uses them.

    configs: the candidate configs (pruned); None when `space` is given.
    reference: callable(**named) writing the expected outputs, or None
    (the configs are judged against each other:
    autotune.measure.consensus).
    warn_once(what, text): an AutotuneWarning once per kernel (the
    decorator's), or None for one per miss.
    clock: counts the seconds of time_budget_s (None: the search's own).
    """
    name: str
    configs: Optional[list] = None
    space: Any = None
    search: str = "exhaustive"
    budget: Optional[int] = None
    seed: int = 0
    time_budget_s: Optional[float] = None
    timeout_s: float = 60.0
    reference: Optional[Callable] = None
    outputs: Optional[list] = None
    rtol: Optional[float] = None
    atol: Optional[float] = None
    warn_once: Optional[Callable] = None
    clock: Optional[Callable] = None
    # The first offered config (an untuned launch's): always measured.
    default: Any = None
    # How candidates are timed, in words (Provenance.method).
    timing_method: str = ""


class Tuning:
    """One fusion's miss: session, cache key, launch and options in; the
    cache entry out (run). After run, `result` is the selection.TuneResult the
    entry came from (None when nothing was measured)."""

    def __init__(self, session, key, launch, options):
        self.session = session
        self.key = key
        self.launch = launch
        self.options = options
        self.result = None
        # (seeds, benchmarks they spared) of a seeded miss, counted once
        # its tuning succeeded.
        self._seeds_saved = None

    def _warn_once(self, what, text):
        # The kernel's name, its configs and failure details, escaped for a
        # terminal.
        text = logs.printable(text)
        if self.options.warn_once is not None:
            self.options.warn_once(what, text)
        else:
            warnings.warn(text, AutotuneWarning, stacklevel=2)

    # -- the miss --------------------------------------------------------
    def run(self, seeds=()):
        """The entry for this miss. `seeds`: configs to measure first (a
        seeded miss's neighbours)."""
        seeds = list(seeds)
        # Compiling is CPU work: the candidates are compiled ahead before
        # the device's turn is taken, so another tuner measuring on this
        # GPU does not wait on these compiles.
        ahead = self._exhaustive_list(seeds)
        if ahead is not None:
            self.compile_ahead(ahead)
        # One tuner per device: measuring waits for the device's lock.
        with self.session.device_turn(self.key):
            return self._run(seeds, compiled_ahead=ahead is not None)

    def _exhaustive_list(self, seeds):
        """The candidates an exhaustive or config-list tuning will measure
        (what _run measures), or None: a search, or a list pruned to one."""
        opts = self.options
        if opts.space is not None and opts.search != "exhaustive":
            return None
        configs = None
        if opts.space is None:
            configs = list(opts.configs)
            seeds = [s for s in seeds if s in configs]
            if len(set(configs)) == 1:
                return None
        return self.candidates(configs, seeds,
                               self.session.incumbent_config(self.key))

    def _run(self, seeds, compiled_ahead=False):
        sess, opts = self.session, self.options
        configs = None
        if opts.space is None:
            configs = list(opts.configs)
            seeds = [s for s in seeds if s in configs]
            if len(set(configs)) == 1:
                # Pruned to one: stored without benchmarking, as Triton
                # does, so a cached run launches the same config.
                result = selection.TuneResult([], None, 0.0, 0.0, "pruned")
                return Entry(self.key, configs[0], 0.0, (),
                             tuner.provenance_for(sess.backend, result))
        evaluator = self.evaluator()
        # The cached config of this fusion, if any: kept unless beaten.
        incumbent = sess.incumbent_config(self.key)
        # Ranks of a torch.distributed job split the candidates and agree
        # on one winner: the shared evaluator is the pool too.
        shared = distributed.share(sess, self.key, evaluator, incumbent,
                                   seeds)
        evaluator = shared or evaluator
        progress = None
        pool = shared or self._worker_pool(evaluator)
        try:
            if opts.space is None or opts.search == "exhaustive":
                todo = self.candidates(configs, seeds, incumbent)
                if seeds:
                    self._seeds_saved = (len(seeds), len(set(
                        self.candidates(configs, [], incumbent)))
                        - len(set(todo)))
                if not compiled_ahead:
                    self.compile_ahead(todo)
                progress = self._progress(len(set(todo)))
                result = tuner.run_candidates(
                    evaluator if pool is None else pool.replay(evaluator),
                    todo, "seeded" if seeds else "exhaustive",
                    incumbent=incumbent, progress=progress)
            else:
                result, progress = self._search(evaluator, pool, seeds,
                                                incumbent)
        except AutotuneError as e:
            if progress is not None:
                progress.failed(e)
            raise
        finally:
            if pool is not None:
                pool.close()
        progress.finish(result)
        # The report says why the winner won in the selection's own words
        # (a stored entry's candidates alone cannot tell an incumbent's
        # margin from the contest's tie).
        reason = selection.reason_of(result)
        sess.note_tuning(self.key, reason=reason.kind,
                         reason_text=reason.text())
        if self._seeds_saved is not None:
            # What the seeds spared, once the tuning succeeded: a seeded
            # list measures half the rest after them, a seeded search
            # half the budget.
            seeds, saved = self._seeds_saved
            sess.count_seeds(self.key, seeds, max(0, saved))
        self._report(evaluator, result)
        self.result = result
        return self._entry_of(result)

    # -- how a candidate is measured -------------------------------------
    def evaluator(self):
        """The CandidateEvaluator of this launch: how a config is run,
        restored between runs, checked and timed."""
        sess, opts, launch = self.session, self.options, self.launch
        named = launch.named
        tensors = {k: v for k, v in named.items()
                   if hasattr(v, "untyped_storage")}
        reference = None
        if opts.reference is not None:
            def reference(**_tensors):
                result = opts.reference(**named)  # may return (rtol, atol)
                if result is not None and not (
                        isinstance(result, tuple) and len(result) == 2) \
                        and not any(result is v for v in named.values()):
                    # (Returning the output it wrote, as y.copy_() does, is
                    # fine.)
                    self._warn_once("reference-return", (
                        f"autotune: {opts.name}: reference= returned a "
                        f"{type(result).__name__}, which is ignored (only an "
                        "(rtol, atol) pair is read): it must write the "
                        "expected values into the output tensors, in place"))
                return result
        checker = None
        if sess.options.autotune_compile_check:
            # Compiling for GPU targets: the measure layer's compile check,
            # imported only when the flag asks for it.
            from autotune.binaries import compile_check
            checker = compile_check.Checker(
                sess.options.autotune_compile_check,
                unwrap.jit_function(launch.kernel), named)
        return tuner.CandidateEvaluator(
            sess.backend, lambda config: launch.run(config), tensors,
            outputs=opts.outputs, reference=reference, rtol=opts.rtol,
            atol=opts.atol, timeout_s=opts.timeout_s,
            on_benchmark=sess.count_benchmark, name=opts.name,
            compile_checker=checker,
            on_compile_rejected=sess.count_compile_rejected,
            launch_checked=launch.run,
            setup=launch.make_setup() if launch.make_setup else None,
            time_fn=launch.time_fn)

    def _worker_pool(self, evaluator):
        """--autotune_workers: a pool measuring the candidates in worker
        processes (None: they are measured in this process)."""
        sess, launch = self.session, self.launch
        return parallel.CandidatePool.for_miss(
            evaluator, sess.options.autotune_workers, sess.backend,
            launch.kernel, launch.grid, launch.args, launch.kwargs,
            take_device=sess.take_device)

    def compile_ahead(self, configs):
        """--autotune_compile_jobs on the GPU backend: compile the
        candidates for the device's target in spawned processes into
        Triton's on-disk cache while nothing is timed, so that each first
        launch while measuring loads its binary instead of compiling it.
        Needs the kernel under a module-level name (the processes import
        it); otherwise candidates compile as they first run."""
        sess, name = self.session, self.options.name
        jobs = sess.options.autotune_compile_jobs or min(os.cpu_count() or 1,
                                                         8)
        configs = list(dict.fromkeys(configs))
        if sess.backend.name != "gpu" or jobs <= 1 or len(configs) <= 1:
            return
        where = parallel.module_name_of(self.launch.kernel)
        if where is None:
            log.info(f"autotune: {name} is not a module-level name: "
                     "its candidates compile in this process")
            return
        # Both only on the GPU backend: compile_check loads Triton's
        # compiler, torch the device's capability.
        from autotune.binaries import compile_check
        import torch
        major, minor = torch.cuda.get_device_capability(sess.backend.device)
        target = compile_check.Target(f"sm_{major}{minor}",
                                      major * 10 + minor)
        start = time.perf_counter()
        try:
            # The launch's own compile requests, compiled in a pool (none
            # when the JIT or the disk cache holds them, or too few remain).
            results = compile_check.compile_ahead_of_launch(
                where, self.launch.kernel.fn, self.launch.named, configs, jobs)
        except Exception as e:  # the measurement compiles what is missing
            detail = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            log.warning(logs.printable(
                f"autotune: {name}: compiling ahead failed ({detail}); "
                "candidates compile as they first run"))
            return
        if results is None:
            return  # no pool needed (the reason is logged)
        failed = sum(not r["ok"] for r in results)
        log.info(f"autotune: {name}: {len(results)} configs compiled "
                 f"ahead in {time.perf_counter() - start:.1f} s with {jobs} "
                 f"jobs ({failed} did not compile or exceed {target.name})")

    # -- what is measured, in which order -------------------------------
    def candidates(self, configs, seeds, incumbent):
        """What a config-list (or exhaustive) tuning measures, in order:
        seeds first; with seeds, a short list (half the rest, and the
        incumbent)."""
        if self.options.space is not None:
            configs = self.options.space.configs()
        rest = [c for c in configs if c not in seeds]
        if seeds:
            rest = rest[:max(1, len(rest) // 2)]
            if incumbent in configs and incumbent not in seeds \
                    and incumbent not in rest:
                rest.append(incumbent)
        return list(seeds) + rest

    def _search(self, evaluator, pool, seeds, incumbent):
        """An evolutionary search over the space; (result, progress)."""
        opts = self.options
        budget = opts.budget
        if seeds and budget:
            budget = max(len(seeds) + 1, budget // 2)
            self._seeds_saved = (len(seeds), opts.budget - budget)
        first = list(seeds)
        for config in (incumbent, opts.default):
            if config is not None and config not in first:
                first.append(config)
        progress = self._progress(
            len(opts.space), budget or max(16, min(len(opts.space), 64)))
        clock = opts.clock
        if isinstance(pool, distributed.SharedEvaluator):
            # Ranks stop after the same measurement: one clock for all.
            clock = pool.agreed_seconds
        result = tune_with_search(
            evaluator, opts.space, budget=budget, seed=opts.seed,
            seeds=first, pool=pool, time_budget_s=opts.time_budget_s,
            progress=progress, clock=clock)
        selected = selection.reselect(evaluator, result, incumbent)
        selected.consensus = getattr(result, "consensus", None)
        return selected, progress


    # -- what it says and records ---------------------------------------
    def _progress(self, candidates, budget=None):
        """The progress lines of this fusion's tuning, started."""
        progress = progress_module.TuningProgress(
            self.options.name, self.key.signature, candidates,
            verbosity=self.session.options.autotune_verbosity,
            budget=budget, search=self.options.search)
        progress.start()
        return progress

    def _report(self, evaluator, result):
        """Warnings about the reference a tuning had to guess."""
        opts = self.options
        if opts.reference is not None or len(result.candidates) < 2:
            return
        if evaluator.reference_config is not None:
            if isinstance(evaluator, tuner.CandidateEvaluator) and \
                    evaluator.judged_by_consensus():
                self._warn_once("reference", (
                    f"autotune: {opts.name} has no reference=: its configs "
                    "are checked against each other (one whose outputs "
                    "differ from what most of them wrote is dropped as a "
                    "wrong result)"))
            else:
                self._warn_once("reference", (
                    f"autotune: {opts.name} has no reference=: its first "
                    f"config that ran "
                    f"({evaluator.reference_config.short()}) is the "
                    "reference the other candidates are checked against"))
        review = getattr(result, "consensus", None)
        if review is not None and review.scratch:
            self._warn_once("scratch", (
                f"autotune: {opts.name}: its configs wrote different "
                f"values into {', '.join(review.scratch)} and no majority "
                "of them agrees: taken for scratch space whose contents "
                "depend on the config, not compared, and no config was "
                "dropped for it. Name the real outputs with outputs=[...] "
                "(and give reference=) to have them checked"))
        wrong = [c for c in result.candidates if c.failure == "WRONG_RESULT"]
        if wrong and opts.outputs is None:
            self._warn_once("wrong", (
                f"autotune: {opts.name}: {len(wrong)} config(s) dropped as "
                f"wrong results, e.g. {wrong[0].config.short()}: "
                f"{wrong[0].failure_detail}. If that tensor is scratch "
                "space whose contents may differ by config, name the real "
                "outputs with outputs=[...]"))

    def _entry_of(self, result):
        """The cache entry of a finished tuning. Its tuning_seconds leave out
        the wait for another process's device lock (the report keeps it as
        device_wait_s); its provenance records how it was measured and the
        first offered config's time."""
        sess = self.session
        provenance = tuner.provenance_for(sess.backend, result)
        tuning_s = max(0.0, result.seconds - sess.device_wait_s())
        default_us = next((c.run_time_us for c in result.candidates
                           if c.config == self.options.default and c.ok),
                          0.0)
        provenance = provenance._replace(
            tuning_seconds=round(tuning_s, 3),
            method=self.options.timing_method,
            default_run_time_us=default_us)
        return Entry(self.key, result.best.config, result.best.run_time_us,
                     sorted(result.candidates,
                            key=lambda c: c.config.sort_key),
                     provenance)


def tune_with_search(evaluator, space, budget=None, seed=0, seeds=(),
                     time_budget_s=None, pool=None, progress=None,
                     clock=None):
    """Tunes one fusion with the evolutionary search; the evaluator is the
    tuner's CandidateEvaluator, and a parallel.CandidatePool, when given,
    measures each batch in its workers; progress.measured(candidate,
    timing), when given, hears of every measurement; clock, when given,
    counts the seconds of time_budget_s. Returns a selection.TuneResult."""
    if budget is None:
        budget = max(16, min(len(space), 64))
    search = EvolutionarySearch(space, budget=budget, seed=seed, seeds=seeds,
                                time_budget_s=time_budget_s, clock=clock)

    def heard(answer):
        if progress is not None:
            progress.measured(*answer)
        return answer

    def measure(config):
        return Measurement.of_candidate(config, *heard(evaluator(config)))

    def measure_many(configs):
        return [Measurement.of_candidate(c, *heard(answer))
                for c, answer in zip(configs, pool.measure_many(configs))]
    if pool is None:
        result = search.run(measure)
    else:
        result = search.run(measure_many=measure_many)
    candidates = [Candidate(m.config, m.time or 0.0, m.failure, m.detail)
                  for m in result.measurements]
    timings = {m.config: m.timing for m in result.measurements
               if m.timing is not None}
    # Without reference= nor outputs=, the configs measured are judged
    # against each other, as an exhaustive tuning's are.
    candidates, timings, review = tuner.judge_by_consensus(
        evaluator, candidates, timings)
    evaluator.finish()
    ran = [c for c in candidates if c.ok]
    if not ran:
        raise tuner.no_config_ran(candidates)
    best = min(ran, key=lambda c: c.run_time_us) if review is not None \
        else next(c for c in candidates if c.config == result.best.config)
    timing = timings.get(best.config)
    spread = timing.spread if timing is not None else 0.0
    out = selection.TuneResult(candidates, best, spread, result.seconds,
                               "evolutionary")
    out.consensus = review
    return out
