"""Judging candidates against each other where no reference= says what
is right.

Without a user reference (and without outputs=), the first config that
runs stands in for one (tuner.CandidateEvaluator), and each later config
is compared with what it wrote. A config that differs is not dropped on
that word alone: the kernel may write scratch space (per-block partial
sums a host then adds up) whose contents depend on the config, or the
first config may be the wrong one. review() settles it once every config
ran:

- Witnesses: configs that set the kernel's meta-parameters alike run the
  same program (they differ only in launch options: num_warps,
  num_stages, ...), so they count as one witness; where every config sets
  them alike, each config is a witness.
- A tensor has a consensus when more than half of the witnesses wrote the
  same values into it (within the tolerance the first comparison used);
  a config that wrote anything else there is a WRONG_RESULT, whatever the
  first config wrote.
- A tensor without a consensus is taken for scratch space: it is not
  compared, and the tuning names it in one note; every config that ran
  is kept, as Triton's autotune keeps them.

Cost: where the first config's group already holds a majority of the
witnesses (every config agreed with it, or a minority is wrong), nothing
is launched again and the verdicts are the first comparisons'. Otherwise
each witness runs once more to find each tensor's majority value
(Boyer-Moore: one value kept per tensor, one comparison per run), then
every config that ran once more to compare with it: about two launches
and two comparisons per config, no timing and no comparison of every
pair. The configs found right are then timed, as the first pass would
have.
"""
from typing import NamedTuple

from autotune.records import Candidate

WRONG = "WRONG_RESULT"


class Review(NamedTuple):
    """What review() decided.

    candidates, timings: the first pass's, with the verdicts applied.
    scratch: names of the tensors no majority agrees on (not compared).
    reference_outvoted: the first config itself differs from the
    consensus (it is now a WRONG_RESULT).
    """
    candidates: list
    timings: dict
    scratch: tuple
    reference_outvoted: bool


def witness_of(config):
    """Configs with equal meta-parameters run the same program: one
    witness."""
    return repr(tuple(config.kwargs.items()))


def needs_review(candidates):
    """True when the first config's group is not a majority of the
    witnesses (so some config it calls wrong may be right)."""
    ran = [c.config for c in candidates if c.ok or c.failure == WRONG]
    if not any(c.failure == WRONG for c in candidates):
        return False
    witness, _ = _witnesses(ran)
    agreeing = {witness(c.config) for c in candidates if c.ok}
    everyone = {witness(config) for config in ran}
    return 2 * len(agreeing) <= len(everyone)


def _witnesses(configs):
    """(config -> witness key, what a witness is in words): by
    meta-parameters, or the config itself where all of them set the
    meta-parameters alike."""
    settings = {witness_of(c) for c in configs}
    if len(settings) == len(set(configs)):
        return witness_of, "configs"
    if len(settings) > 1:
        return witness_of, "configs (equal meta-parameters counted once)"
    return (lambda config: config), "configs"


class _Majority:
    """Boyer-Moore's majority vote over one tensor's values: after every
    witness's value is seen, `value` is the only one that can hold a
    majority (whether it does is counted in the second pass)."""

    def __init__(self, value, count):
        self.value, self.count = value, count

    def see(self, value, same):
        if self.count == 0:
            self.value, self.count = value, 1
        elif same(self.value, value):
            self.count += 1
        else:
            self.count -= 1


def review(evaluator, candidates, timings, time_candidate):
    """Judges the configs that ran against what most of them agree on.

    evaluator: the tuner.CandidateEvaluator that measured them (its
    outputs_of(config) runs a config once and returns what it wrote;
    difference(name, want, got) says how two values differ, or None).
    candidates, timings: the first pass's Candidate list and {config:
    Timing}. time_candidate(config) -> (Candidate, Timing or None) times a
    config found right that the first pass did not time. Returns a
    Review."""
    ran = [c.config for c in candidates if c.ok or c.failure == WRONG]
    witness, counted = _witnesses(ran)
    first_of = {}
    for config in ran:
        first_of.setdefault(witness(config), config)
    representatives = list(first_of.values())

    # Pass 1: each tensor's majority candidate over the witnesses. A
    # tensor first written by a witness was left as it was (None) by the
    # ones seen before it.
    majorities = {}
    failed = {}
    seen = 0
    for config in representatives:
        written = _outputs(evaluator, config, failed)
        if written is None:
            continue
        for name in written.keys() - majorities.keys():
            majorities[name] = _Majority(None, seen)
        seen += 1
        for name, majority in majorities.items():
            majority.see(written.get(name), lambda want, got, name=name:
                         _difference(evaluator, name, want, got) is None)
    # Pass 2: every config that ran against those values; the witnesses'
    # own runs are the votes.
    votes = dict.fromkeys(majorities, 0)
    differs = {}  # config -> {name: how it differs}
    is_representative = set(representatives)
    for config in ran:
        if config in failed:
            continue
        written = _outputs(evaluator, config, failed)
        if written is None:
            continue
        differs[config] = {}
        for name, majority in majorities.items():
            how = _difference(evaluator, name, majority.value,
                              written.get(name))
            if how is None:
                if config in is_representative:
                    votes[name] += 1
            else:
                differs[config][name] = how
    # A witness whose run failed now has no vote.
    total = sum(config not in failed for config in representatives)
    agreed = {name for name, n in votes.items() if 2 * n > total}
    scratch = tuple(sorted(set(majorities) - agreed))
    out = []
    timings = dict(timings)
    reference = getattr(evaluator, "reference_config", None)
    outvoted = False
    for candidate in candidates:
        config = candidate.config
        if config in failed:
            timings.pop(config, None)
            out.append(failed[config])
            continue
        if config not in differs:
            out.append(candidate)
            continue
        wrong = {n: how for n, how in differs[config].items() if n in agreed}
        if wrong:
            name = sorted(wrong)[0]
            timings.pop(config, None)
            outvoted = outvoted or config == reference
            out.append(Candidate(config, 0.0, WRONG, (
                f"{wrong[name]}; {votes[name]} of {total} {counted} "
                "agree on it")[:200]))
        elif candidate.ok:
            out.append(candidate)
        else:
            found, timing = time_candidate(config)
            if timing is not None:
                timings[config] = timing
            else:
                timings.pop(config, None)
            out.append(found)
    return Review(out, timings, scratch, outvoted)


def _outputs(evaluator, config, failed):
    """What `config` writes when run once more; None (recorded in
    `failed`) when that run fails."""
    try:
        return evaluator.outputs_of(config)
    except Exception as e:  # noqa: BLE001 -- it ran before; now it fails
        failed[config] = evaluator.failure_of(config, e)
        return None


def _difference(evaluator, name, want, got):
    """How `got` differs from `want` (None: the tensor was left as it
    was), or None when they agree."""
    if want is None or got is None:
        if want is None and got is None:
            return None
        return f"{name}: written by some configs, left as it was by others"
    return evaluator.difference(name, want, got)
