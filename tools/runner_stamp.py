"""Prints this runner's stamp, for AUTOTUNE_RUNNER_STAMP (see
autotune/host/stamp.py and docs/bazel.md#cached-results-and-upgrades).

    export AUTOTUNE_RUNNER_STAMP="$(python3 RULES_AUTOTUNE/tools/runner_stamp.py)"

Run it with the Python and the environment the GPU tests run with (the
same TRITON_INTERPRET): the stamp names the device key they see, the
Triton, torch and CUDA versions, and the NVIDIA driver where nvidia-smi
answers.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.host import stamp  # noqa: E402

if __name__ == "__main__":
    print(stamp.current())
