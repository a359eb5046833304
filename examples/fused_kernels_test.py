"""Example GPU test suite: fused Triton kernels tuned through rules_autotune.

Runs sharded in load mode (every fusion comes from the checked-in cache and
nothing is benchmarked, which each test asserts) and unsharded in dump mode
(tunes every fusion and dumps the cache). Without a GPU it runs on Triton's
interpreter.
"""
import autotune  # noqa: F401  (first: picks the interpreter without a GPU)

import torch
from absl.testing import absltest

from autotune.kernels import layernorm, matmul, softmax


class FusedKernelsTest(absltest.TestCase):

    def setUp(self):
        torch.manual_seed(0)
        # Tensors on the device the backend runs kernels on: CUDA for the
        # GPU backend, CPU for the interpreter.
        self.device = autotune.device()

    def randn(self, *shape):
        return torch.randn(*shape, device=self.device)

    def tearDown(self):
        session = autotune.session()
        if session.options.load_autotune_results_from:
            # Load mode: the cache must serve every fusion.
            self.assertEqual(session.stats.candidate_benchmarks, 0,
                             session.summary_line())

    def _matmul(self, m, n, k, activation):
        # What a GPU user tunes: bf16 inputs on a GPU (fp32 "ieee" dots are
        # FMA code there, slow to compile and spilling registers); fp32 on
        # the interpreter, whose checked-in fusions are fp32.
        dtype = torch.bfloat16 if torch.device(self.device).type == "cuda" \
            else torch.float32
        a, b, bias = (t.to(dtype) for t in (
            self.randn(m, k), self.randn(k, n), self.randn(n)))
        got = matmul.matmul_bias_act(a, b, bias, activation)
        rtol, atol = matmul.tolerance(a, b)  # tf32-aware
        torch.testing.assert_close(got, matmul.reference(a, b, bias,
                                                         activation),
                                   rtol=rtol, atol=atol)

    def test_matmul_relu(self):
        self._matmul(32, 32, 32, "relu")

    def test_matmul_leaky_relu_odd_shape(self):
        self._matmul(40, 24, 48, "leaky_relu")

    def test_softmax_wide_rows(self):
        x = self.randn(8, 96)
        torch.testing.assert_close(softmax.softmax(x), softmax.reference(x))

    def test_softmax_few_rows(self):
        x = self.randn(3, 20)
        torch.testing.assert_close(softmax.softmax(x), softmax.reference(x))

    def test_layernorm(self):
        x, w, b = self.randn(4, 80), self.randn(80), self.randn(80)
        torch.testing.assert_close(layernorm.layernorm(x, w, b),
                                   layernorm.reference(x, w, b),
                                   rtol=1e-4, atol=1e-4)

    def test_layernorm_short_rows(self):
        x, w, b = self.randn(2, 30), self.randn(30), self.randn(30)
        torch.testing.assert_close(layernorm.layernorm(x, w, b),
                                   layernorm.reference(x, w, b),
                                   rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    absltest.main()
