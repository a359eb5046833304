#!/usr/bin/env bash
# An sh_test that runs Python: gpu_autotuned_test gives it PYTHONPATH and
# AUTOTUNE_FLAGS, so nothing here knows about runfiles.
set -euo pipefail
exec python3 kernels_cli.py
