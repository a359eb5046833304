#!/usr/bin/env bash
# One command on a machine with one NVIDIA GPU and its own python, torch and
# triton (no Bazel, no network): device key and versions, the GPU-relevant
# tests on the GPU backend, the example suite cold then warm, tuned kernels
# against torch; JSON and markdown reports under $OUT when set.
#
#   bash bench/gpu_check.sh [--dry-run] [--sections a,b]
#
# It prints the versions it found first. It runs with the machine's own
# packages: Triton 3.6 or newer, torch, absl-py, protobuf, pytest and NumPy
# installed are all it needs (no wheels carried). Only where one of them is
# missing and bench/wheels/ holds it is it installed from there into a
# temporary directory, never into the system.
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

# The versions found, first: what the report's figures were measured with.
"$PYTHON" - <<'PY' || true
import importlib.metadata
import platform
import shutil
import subprocess
found = [("python", platform.python_version())]
for dist in ("torch", "triton", "protobuf", "numpy", "absl-py", "pytest"):
    try:
        found.append((dist, importlib.metadata.version(dist)))
    except importlib.metadata.PackageNotFoundError:
        found.append((dist, "missing"))
driver = "none (no nvidia-smi)"
if shutil.which("nvidia-smi"):
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,name",
             "--format=csv,noheader"], capture_output=True, text=True,
            timeout=30).stdout.strip().splitlines()[0]
    except Exception as e:
        driver = f"nvidia-smi failed ({type(e).__name__})"
found.append(("driver", driver))
print("gpu_check: versions: " + ", ".join(f"{k} {v}" for k, v in found),
      flush=True)
PY

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
# The oldest Triton the project supports: the floor pyproject.toml declares.
if ! "$PYTHON" - <<'PY'
import importlib.metadata
import re
import sys
try:
    version = importlib.metadata.version("triton")
except importlib.metadata.PackageNotFoundError:
    sys.exit(0)  # said below, with the other missing packages
with open("pyproject.toml") as f:
    floor = re.search(r'"triton>=([0-9.]+)', f.read())
def parts(text):
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])
if floor and parts(version) < parts(floor.group(1)):
    print(f"gpu_check: Triton {version} is older than {floor.group(1)}, the "
          "oldest this project supports (pyproject.toml)", file=sys.stderr)
    sys.exit(2)
PY
then
  exit 2
fi

if [ -n "$missing" ]; then
  if [ -d bench/wheels ]; then
    site="$(mktemp -d)"
    trap 'rm -rf "$site"' EXIT
    "$PYTHON" -m pip install -q --no-index --find-links bench/wheels \
      --target "$site" $missing
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu_check: missing python packages: $missing (install them, or put their wheels in bench/wheels/)" >&2
    exit 2
  fi
fi

# gpu_check.py keeps 10 s of the limit for writing the report; this
# timeout only catches a hang outside its sections (each section runs in a
# process group of its own that is killed whole when it runs over).
exec timeout -k 5 "$LIMIT_S" "$PYTHON" bench/gpu_check.py "$@"
