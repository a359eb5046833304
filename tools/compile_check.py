"""Compiles every config of the example kernels (or of given kernel modules,
or every config a results file names) for target GPUs, on the CPU.

    python tools/compile_check.py [--targets sm_90,sm_80] [--module M ...]
                                  [--cache FILE] [--jobs N] [--json OUT]

Prints per config the shared memory, registers and spill stack; exits 1,
with one line per config, when a config does not compile or exceeds the
target's limits. See autotune/binaries/compile_check.py.
"""
import os
import sys

# Before anything imports Triton: kernels must compile, not be interpreted.
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli import compile_check  # noqa: E402

if __name__ == "__main__":
    sys.exit(compile_check.main())
