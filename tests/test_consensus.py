"""Judging configs against each other where no reference= says what is
right (autotune/measure/consensus.py), with an evaluator whose configs
write plain numbers: who is a witness, when a review is needed, the
majority each tensor gets, scratch space, and what a review costs."""
from autotune.measure import consensus
from autotune.records import Candidate, Config

WRONG = consensus.WRONG


class Evaluator:
    """Each config writes the {tensor: value} it is given; a config in
    `fails` raises when run again."""

    def __init__(self, writes, reference=None, fails=()):
        self.writes, self.fails = writes, set(fails)
        self.reference_config = reference
        self.runs = []

    def outputs_of(self, config):
        self.runs.append(config)
        if config in self.fails:
            raise RuntimeError("illegal memory access")
        return dict(self.writes[config])

    def difference(self, name, want, got):
        return None if want == got else f"{name}: {got} != {want}"

    def failure_of(self, config, exc):
        return Candidate(config, 0.0, "RUNTIME_ERROR", str(exc))


def ok(config, us=1.0):
    return Candidate(config, us)


def wrong(config):
    return Candidate(config, 0.0, WRONG, "out differs from the first config")


def timed(config):
    return Candidate(config, 7.0), f"timing of {config.kwargs}"


A, B, C, D = (Config({"BLOCK": b}) for b in (16, 32, 64, 128))


def run_review(evaluator, candidates):
    timings = {c.config: f"first {c.config.kwargs}" for c in candidates
               if c.ok}
    return consensus.review(evaluator, candidates, timings, timed)


def test_configs_differing_only_in_launch_options_are_one_witness():
    assert consensus.witness_of(Config({"BLOCK": 16}, num_warps=1)) == \
        consensus.witness_of(Config({"BLOCK": 16}, num_warps=8))
    assert consensus.witness_of(A) != consensus.witness_of(B)


def test_a_review_is_needed_only_when_the_first_group_is_no_majority():
    assert not consensus.needs_review([ok(A), ok(B), ok(C)])
    assert not consensus.needs_review([ok(A), ok(B), wrong(C)])
    assert consensus.needs_review([ok(A), wrong(B), wrong(C)])
    assert consensus.needs_review([ok(A), ok(B), wrong(C), wrong(D)])
    # A config that failed to run is no witness.
    failed = Candidate(D, 0.0, "COMPILE_ERROR", "too many registers")
    assert not consensus.needs_review([ok(A), ok(B), wrong(C), failed])


def test_configs_that_share_meta_parameters_vote_once():
    A1, A2, A3 = (Config({"BLOCK": 16}, num_warps=w) for w in (1, 2, 4))
    # Three configs agree with the first, but they are one program.
    assert consensus.needs_review([ok(A1), ok(A2), ok(A3), wrong(B),
                                   wrong(C)])
    # Where every config sets them alike, each config is a witness.
    assert not consensus.needs_review([ok(A1), ok(A2), wrong(A3)])


def test_the_first_config_is_outvoted_by_the_majority():
    evaluator = Evaluator({A: {"out": 1}, B: {"out": 2}, C: {"out": 2}},
                          reference=A)
    review = run_review(evaluator, [ok(A), wrong(B), wrong(C)])
    first, second, third = review.candidates
    assert first.failure == WRONG
    assert first.failure_detail == "out: 1 != 2; 2 of 3 configs agree on it"
    assert (second, third) == (timed(B)[0], timed(C)[0])
    assert review.timings == {B: "timing of {'BLOCK': 32}",
                              C: "timing of {'BLOCK': 64}"}
    assert review.reference_outvoted and review.scratch == ()


def test_a_tensor_no_majority_agrees_on_is_scratch_and_keeps_every_config():
    evaluator = Evaluator({A: {"out": 5, "partials": 1},
                           B: {"out": 5, "partials": 2},
                           C: {"out": 5, "partials": 3}}, reference=A)
    review = run_review(evaluator, [ok(A), wrong(B), wrong(C)])
    assert review.scratch == ("partials",)
    assert [c.ok for c in review.candidates] == [True, True, True]
    assert set(review.timings) == {A, B, C}
    assert not review.reference_outvoted


def test_beside_scratch_a_real_output_still_drops_the_config_wrong_on_it():
    evaluator = Evaluator({A: {"out": 5, "partials": 1},
                           B: {"out": 5, "partials": 2},
                           C: {"out": 6, "partials": 3},
                           D: {"out": 5, "partials": 4}})
    review = run_review(evaluator, [ok(A), wrong(B), wrong(C), wrong(D)])
    assert review.scratch == ("partials",)
    assert [c.failure for c in review.candidates] == [
        "NONE", "NONE", WRONG, "NONE"]
    assert review.candidates[2].failure_detail == (
        "out: 6 != 5; 3 of 4 configs agree on it")
    assert C not in review.timings


def test_half_of_the_witnesses_is_no_majority():
    evaluator = Evaluator({A: {"out": 1}, B: {"out": 1}, C: {"out": 2},
                           D: {"out": 3}})
    review = run_review(evaluator, [ok(A), ok(B), wrong(C), wrong(D)])
    assert review.scratch == ("out",)
    assert [c.ok for c in review.candidates] == [True] * 4


def test_meta_parameter_witnesses_are_named_in_the_verdict():
    A1, A2 = Config({"BLOCK": 16}, num_warps=1), Config({"BLOCK": 16},
                                                        num_warps=4)
    evaluator = Evaluator({A1: {"out": 1}, A2: {"out": 1}, B: {"out": 2},
                           C: {"out": 2}})
    review = run_review(evaluator, [ok(A1), ok(A2), wrong(B), wrong(C)])
    assert review.candidates[1].failure_detail == (
        "out: 1 != 2; 2 of 3 configs (equal meta-parameters counted once) "
        "agree on it")


def test_a_tensor_only_some_configs_write_differs_for_the_others():
    evaluator = Evaluator({A: {"out": 1}, B: {"out": 1, "extra": 9},
                           C: {"out": 1, "extra": 9}})
    review = run_review(evaluator, [ok(A), wrong(B), wrong(C)])
    assert review.candidates[0].failure_detail == (
        "extra: written by some configs, left as it was by others; "
        "2 of 3 configs agree on it")
    assert [c.ok for c in review.candidates[1:]] == [True, True]


def test_a_config_that_fails_when_run_again_is_failed_and_has_no_vote():
    evaluator = Evaluator({A: {"out": 1}, B: {"out": 2}, C: {"out": 2},
                           D: {"out": 1}}, fails={D})
    review = run_review(evaluator, [ok(A), wrong(B), wrong(C), ok(D)])
    assert review.candidates[3] == Candidate(D, 0.0, "RUNTIME_ERROR",
                                             "illegal memory access")
    assert D not in review.timings
    # Three witnesses are left; two of them agree.
    assert review.candidates[0].failure_detail.endswith(
        "2 of 3 configs agree on it")
    # It is not run a third time.
    assert evaluator.runs == [A, B, C, D, A, B, C]


def test_a_review_runs_each_witness_and_then_each_config_once():
    configs = [Config({"BLOCK": 16}, num_warps=w) for w in (1, 2)] + [B, C]
    evaluator = Evaluator({c: {"out": 1 if c in (B, C) else 0}
                           for c in configs})
    run_review(evaluator, [ok(configs[0]), ok(configs[1]), wrong(B),
                           wrong(C)])
    # Three witnesses, then four configs.
    assert evaluator.runs == [configs[0], B, C] + configs
