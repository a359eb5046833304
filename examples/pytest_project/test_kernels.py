import pytest
import torch

import autotune
from kernels import row_max, scale_shift

DEVICE = autotune.device()


@pytest.mark.parametrize("n", [100, 1000])
def test_scale_shift(n):
    x = torch.randn(n, device=DEVICE)
    torch.testing.assert_close(scale_shift(x, 2.0, 1.0), x * 2.0 + 1.0)


@pytest.mark.parametrize("cols", [50, 300])
def test_row_max(cols):
    x = torch.randn(4, cols, device=DEVICE)
    torch.testing.assert_close(row_max(x), x.max(dim=1).values)


def test_loaded_cache_needs_no_tuning(request, autotune_stats):
    scale_shift(torch.ones(100, device=DEVICE), 1.0, 0.0)
    if not request.config.getoption("--autotune-update"):
        # This test's own launches: earlier tests may have tuned a miss.
        assert autotune_stats.since_test_start().candidate_benchmarks == 0
