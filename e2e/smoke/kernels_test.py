"""py_test: three shapes, one per test method, so the shards split them."""
import autotune  # first: picks Triton's interpreter when there is no GPU

import torch
from absl.testing import absltest

from mykernels.scale_shift import scale_shift


class ScaleShiftTest(absltest.TestCase):

    def _check(self, n):
        x = torch.arange(n, dtype=torch.float32)
        torch.testing.assert_close(scale_shift(x, 2.0, 1.0), x * 2.0 + 1.0)

    def test_small(self):
        self._check(100)

    def test_medium(self):
        self._check(300)

    def test_large(self):
        self._check(1000)


if __name__ == "__main__":
    absltest.main()
