"""The runner stamp: what a GPU test's result depends on beyond its files.

With a system or virtual-environment Python, Bazel does not see the
installed Triton and torch (they are no inputs of the test action): after
an upgrade a cached pass would stand, locally and for every runner that
shares the remote cache. The runner exports the stamp,

    export AUTOTUNE_RUNNER_STAMP="$(python3 RULES_AUTOTUNE/tools/runner_stamp.py)"

and the GPU targets `gpu_autotuned_test` creates inherit it (their
`env_inherit`), so the value is part of those test actions' keys: a runner
whose stamp differs misses their cached results and runs them. Other
tests of the workspace do not see it and keep their cache hits. The stamp
is `NAME=VALUE` fields joined by `;`: `device` (the device key: GPU name,
compute capability, SM count, Triton version), `triton`, `torch`, `cuda`
and, where nvidia-smi answers, `driver`: the driver's branch (`580` of
`580.159.04`). A branch fixes which CUDA releases the driver runs; patch
levels of one branch run the same binaries, so runners a patch apart share
cached results. A runner may add fields of its own (an image digest): they
only key the action.

A test that sees the stamp checks it against what it runs on (every field
but `driver` and the runner's own): a stamp that does not describe the
runner would key results under another runner's name, so the test fails
with one line naming the field.
"""
import os
import re
import shutil
import subprocess

from autotune.errors import AutotuneError
from autotune.measure import backends

STAMP_ENV = "AUTOTUNE_RUNNER_STAMP"
DOCS = "docs/bazel.md#cached-results-and-upgrades"
# The fields a test checks against what it runs on, in the stamp's order.
CHECKED = ("device", "triton", "torch", "cuda")
# A stamp longer than this is refused: it is a handful of short fields.
MAX_STAMP_CHARS = 1024
# What nvidia-smi must print for the driver field: a version.
_DRIVER_VERSION = re.compile(r"\d+(\.\d+){0,3}")


def fields_of(backend):
    """{field: value} this process runs with (the checked fields)."""
    versions = backend.versions()
    return {"device": backend.device_key(),
            "triton": versions.get("triton_version", ""),
            "torch": versions.get("torch_version", ""),
            "cuda": versions.get("cuda_version", "")}


def driver_version():
    """The NVIDIA driver's version from nvidia-smi (`580.159.04`), or ""
    without one or when its answer is not a version."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first if _DRIVER_VERSION.fullmatch(first) else ""


def driver_branch(version):
    """The branch of a driver version (`580` of `580.159.04`), "" when
    `version` is not one."""
    version = (version or "").strip()
    if not _DRIVER_VERSION.fullmatch(version):
        return ""
    return version.split(".")[0]


def format_stamp(fields):
    return ";".join(f"{k}={v}" for k, v in fields.items())


def current(backend=None):
    """The stamp of this runner (for the runner to export)."""
    fields = fields_of(backend or backends.select_backend())
    driver = driver_branch(driver_version())
    if driver:
        fields["driver"] = driver
    return format_stamp(fields)


def parse(text):
    """{field: value} of a stamp; AutotuneError naming the variable when a
    part is not NAME=VALUE, or when the stamp is too long or holds a
    control character (a newline would start a line of its own in every
    message that shows a field)."""
    if len(text) > MAX_STAMP_CHARS:
        raise AutotuneError(
            f"{STAMP_ENV} is {len(text)} characters long: a stamp is at "
            f"most {MAX_STAMP_CHARS} (export the output of "
            f"`python3 tools/runner_stamp.py`; see {DOCS})")
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise AutotuneError(
            f"{STAMP_ENV} holds the control character {bad!r} at "
            f"position {text.index(bad)}: a stamp is one line of "
            f"printable NAME=VALUE fields (export the output of "
            f"`python3 tools/runner_stamp.py`; see {DOCS})")
    fields = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise AutotuneError(
                f"{STAMP_ENV}={text!r}: {part.strip()!r} is not NAME=VALUE "
                f"(the stamp is fields joined by ';'; see {DOCS})")
        fields[name.strip()] = value.strip()
    return fields


def check(backend, env=None):
    """Raises AutotuneError when the stamp in env names a checked field
    with another value than this process runs with. Returns the stamp's
    fields ({} without a stamp)."""
    env = os.environ if env is None else env
    text = env.get(STAMP_ENV, "")
    if not text.strip():
        return {}
    stamped = parse(text)
    differing = first_difference(stamped, fields_of(backend))
    if differing:
        name, said, running = differing
        raise AutotuneError(
            f"{STAMP_ENV} says {name}={said}, but this test "
            f"runs with {name}={running}: the stamp keys the "
            "test's cached result and must describe this runner; "
            f"export it from `python3 tools/runner_stamp.py` on the "
            f"runner ({DOCS})")
    return stamped


def first_difference(stamped, running):
    """(field, stamped value, running value) of the first checked field
    the stamp gives another value than this process runs with, or None."""
    for name in CHECKED:
        if name in stamped and stamped[name] != running[name]:
            return name, stamped[name], running[name]
    return None
