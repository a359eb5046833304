import pytest
import torch

from kernels import row_max, scale_shift


@pytest.mark.parametrize("n", [100, 1000])
def test_scale_shift(n):
    x = torch.randn(n)
    torch.testing.assert_close(scale_shift(x, 2.0, 1.0), x * 2.0 + 1.0)


@pytest.mark.parametrize("cols", [50, 300])
def test_row_max(cols):
    x = torch.randn(4, cols)
    torch.testing.assert_close(row_max(x), x.max(dim=1).values)


def test_loaded_cache_needs_no_tuning(request, autotune_stats):
    scale_shift(torch.ones(100), 1.0, 0.0)
    if not request.config.getoption("--autotune-update"):
        assert autotune_stats.candidate_benchmarks == 0
