#!/usr/bin/env bash
# One command on a machine with one NVIDIA GPU and its own python, torch and
# triton (no Bazel, no network): device key and versions, the GPU-relevant
# tests on the GPU backend, the example suite cold then warm, tuned kernels
# against torch; JSON and markdown reports under $OUT when set.
#
#   bash bench/gpu_check.sh [--dry-run] [--sections a,b]
#
# Python packages the machine lacks (absl-py, protobuf, pytest) are installed
# from bench/wheels/ into a temporary directory, never into the system.
# --dry-run runs the same steps on Triton's interpreter (CI, no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# The whole check: 5 minutes on the GPU; the dry run interprets every
# kernel, with budgets six times longer (bench/gpu_check.py).
case " $* " in
  *" --dry-run "*) LIMIT_S="${GPU_CHECK_LIMIT_S:-1800}" ;;
  *) LIMIT_S="${GPU_CHECK_LIMIT_S:-300}" ;;
esac
export GPU_CHECK_LIMIT_S="$LIMIT_S"

missing="$("$PYTHON" - <<'PY'
import importlib.util
need = {"absl": "absl-py", "google.protobuf": "protobuf", "pytest": "pytest",
        "torch": "torch", "triton": "triton", "numpy": "numpy"}
missing = []
for module, package in need.items():
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        missing.append(package)
print(" ".join(missing))
PY
)"
if [ -n "$missing" ]; then
  if [ -d bench/wheels ]; then
    site="$(mktemp -d)"
    trap 'rm -rf "$site"' EXIT
    "$PYTHON" -m pip install -q --no-index --find-links bench/wheels \
      --target "$site" $missing
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu_check: missing python packages: $missing (put their wheels in bench/wheels/)" >&2
    exit 2
  fi
fi

# gpu_check.py keeps 10 s of the limit for writing the report; this
# timeout only catches a hang outside its sections (each section runs in a
# process group of its own that is killed whole when it runs over).
exec timeout -k 5 "$LIMIT_S" "$PYTHON" bench/gpu_check.py "$@"
