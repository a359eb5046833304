"""Tuning drivers: the glue between a search strategy, which only sees an
objective, and the measuring layer, which runs candidates."""
from autotune.measure import tuner
from autotune.records import Candidate
from autotune.search.evolutionary import EvolutionarySearch, Measurement


def tune_with_search(evaluator, space, budget=None, seed=0, seeds=(),
                     time_budget_s=None, pool=None, progress=None,
                     clock=None):
    """Tunes one fusion with the evolutionary search; the evaluator is the
    tuner's CandidateEvaluator, and a parallel.CandidatePool, when given,
    measures each batch in its workers; progress.measured(candidate,
    timing), when given, hears of every measurement; clock, when given,
    counts the seconds of time_budget_s. Returns a tuner.TuneResult."""
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
    evaluator.finish()
    candidates = [Candidate(m.config, m.time or 0.0, m.failure, m.detail)
                  for m in result.measurements]
    if result.best is None:
        raise tuner.no_config_ran(candidates)
    best = next(c for c in candidates if c.config == result.best.config)
    spread = result.best.timing.spread if result.best.timing else 0.0
    return tuner.TuneResult(candidates, best, spread, result.seconds,
                            "evolutionary")
