"""The three targets XLA documents for persisted autotuning, on one small
softmax fusion. What each target checks depends on its AUTOTUNE_FLAGS:
loading: the fusion was a hit and nothing was benchmarked; dumping: the
results file exists in the test outputs and holds the fusion."""
import os

import autotune  # noqa: F401  (first: picks the interpreter without a GPU)

import torch
from absl.testing import absltest

from autotune import codec
from autotune.kernels import softmax


class XlaStyleTest(absltest.TestCase):

    def test_softmax_fusion(self):
        x = torch.randn(4, 48, device=autotune.device())
        torch.testing.assert_close(softmax.softmax(x), softmax.reference(x))
        session = autotune.session()
        options = session.options
        if options.load_autotune_results_from:
            self.assertEqual(session.stats.candidate_benchmarks, 0)
            self.assertGreaterEqual(session.stats.hits, 1)
        if options.dump_autotune_results_to:
            session.finish()
            dumped = codec.load_results(options.dump_autotune_results_to)
            self.assertEqual([e.key.kernel for e in dumped],
                             ["softmax_kernel"])
            self.assertTrue(os.environ["TEST_UNDECLARED_OUTPUTS_DIR"]
                            in options.dump_autotune_results_to)


if __name__ == "__main__":
    absltest.main()
