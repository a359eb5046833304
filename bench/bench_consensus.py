"""What judging configs against each other costs (no reference=, no
outputs=): one fusion's tuning of --configs configs of a CPU "kernel"
(torch arithmetic on --elements floats: y = 2x, and one partial sum per
BLOCK elements into a scratch buffer), timed by the interpreter backend.

    python bench/bench_consensus.py [--configs 32] [--elements 262144]

Cases:
- agree: every config writes the same y and no scratch (nothing to
  review: the first pass's comparisons only);
- minority wrong: a quarter of the configs write 3x (the first config's
  group is a majority: no review);
- scratch: the partial sums differ by BLOCK (the review runs: each config
  about twice more, untimed, one comparison per tensor each).

Each config sets a meta-parameter of its own (every config is a witness:
the review's worst case). Prints, per case, the tuning's seconds, the
launches, the comparisons of two outputs, and the review's own share of
the tuning (its runs and comparisons; not the timing of the configs it
found right, which the first pass would have done); and the comparisons a
check of every pair would need (n(n-1)/2). Target: no comparison of every
pair (about 4 per config where the review runs), and about two untimed
launches per config; the share depends on how many repetitions a timing
takes (the interpreter's few here; a GPU timing's hundreds make it small).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from autotune.measure import backends, consensus, tuner  # noqa: E402
from autotune.records import Config  # noqa: E402


class Kernel:
    def __init__(self, elements, wrong=(), scratch=False):
        self.x = torch.rand(elements)
        self.y = torch.zeros(elements)
        self.partials = torch.zeros(elements // 16)
        self.wrong, self.scratch = set(wrong), scratch
        self.launches = 0

    def run(self, config):
        self.launches += 1
        factor = 3.0 if config in self.wrong else 2.0
        torch.mul(self.x, factor, out=self.y)
        if self.scratch:
            block = config.kwargs["BLOCK"]
            sums = self.y.reshape(-1, block).sum(dim=1)
            self.partials[:sums.numel()] = sums


def measure(kernel, configs):
    evaluator = tuner.CandidateEvaluator(
        backends.InterpreterBackend(repetitions=3), kernel.run,
        {"x": kernel.x, "y": kernel.y, "partials": kernel.partials})
    compared = [0]
    plain = evaluator.difference

    def counted(name, want, got):
        compared[0] += 1
        return plain(name, want, got)
    evaluator.difference = counted
    reviewing = [0.0]
    review = consensus.review

    def timed_review(evaluator_, candidates, timings, time_candidate):
        # The review's own cost: its runs and comparisons, not the timing
        # of the configs it found right (the first pass would have timed
        # them, as Triton times every config).
        timing = [0.0]

        def timed_candidate(config):
            begun = time.perf_counter()
            try:
                return time_candidate(config)
            finally:
                timing[0] += time.perf_counter() - begun
        start = time.perf_counter()
        try:
            return review(evaluator_, candidates, timings, timed_candidate)
        finally:
            reviewing[0] += time.perf_counter() - start - timing[0]
    consensus.review = timed_review
    try:
        start = time.perf_counter()
        result = tuner.run_candidates(evaluator, configs)
        seconds = time.perf_counter() - start
    finally:
        consensus.review = review
    wrong = sum(c.failure == "WRONG_RESULT" for c in result.candidates)
    return seconds, kernel.launches, compared[0], reviewing[0], wrong


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, default=32)
    parser.add_argument("--elements", type=int, default=1 << 18)
    args = parser.parse_args()
    blocks = [16 * 2 ** (i % 6) for i in range(args.configs)]
    configs = [Config({"BLOCK": b, "V": i}, num_warps=4)
               for i, b in enumerate(blocks)]
    n = len(configs)
    print(f"{n} configs, {args.elements} floats per output; a check of "
          f"every pair would compare {n * (n - 1) // 2} times")
    cases = (("agree", Kernel(args.elements)),
             ("minority wrong", Kernel(args.elements,
                                       wrong=configs[1::4])),
             ("scratch", Kernel(args.elements, scratch=True)))
    for name, kernel in cases:
        seconds, launches, compared, reviewing, wrong = measure(kernel,
                                                                configs)
        print(f"{name:15s} {seconds:6.2f} s tuning, {launches:4d} launches, "
              f"{compared:4d} comparisons, review {reviewing:5.2f} s "
              f"({100 * reviewing / seconds:4.1f}% of the tuning), "
              f"{wrong} dropped")


if __name__ == "__main__":
    main()
