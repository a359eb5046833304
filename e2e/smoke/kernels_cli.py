"""Started by kernels_sh_test.sh: a program, not a py_test, that uses the
kernel (one shape of its own, one the py_test uses too)."""
import sys

import autotune  # first: picks Triton's interpreter when there is no GPU

import torch

from mykernels.scale_shift import scale_shift

for n in (300, 4000):
    x = torch.arange(n, dtype=torch.float32)
    if not torch.allclose(scale_shift(x, 3.0, -1.0), x * 3.0 - 1.0):
        sys.exit(f"scale_shift: wrong result for n={n}")
print(autotune.session().summary_line())
