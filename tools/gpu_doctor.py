"""Entry point of the GPU runner doctor (autotune/cli/doctor.py):

    bazel test @rules_autotune//tools:gpu_doctor_test --test_output=all
    python3 tools/gpu_doctor.py [--compiled_kernels DIR]

One line per check of what a GPU test needs here, with the fix; exit
status 1 when a check FAILs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.cli import doctor  # noqa: E402

if __name__ == "__main__":
    sys.exit(doctor.main())
