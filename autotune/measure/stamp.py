"""The runner stamp: what a GPU test's result depends on beyond its files.

With a system or virtual-environment Python, Bazel does not see the
installed Triton and torch (they are no inputs of the test action): after
an upgrade a cached pass would stand, locally and for every runner that
shares the remote cache. The runner exports the stamp,

    export AUTOTUNE_RUNNER_STAMP="$(python3 RULES_AUTOTUNE/tools/runner_stamp.py)"

and the workspace's `.bazelrc` passes it to every test,

    test --test_env=AUTOTUNE_RUNNER_STAMP

so the value is part of the test action's key: a runner whose stamp
differs misses the cached result and runs the test. The stamp is
`NAME=VALUE` fields joined by `;`: `device` (the device key: GPU name,
compute capability, SM count, Triton version), `triton`, `torch`, `cuda`
and, where nvidia-smi answers, `driver`. A runner may add fields of its
own (an image digest): they only key the action.

A test that sees the stamp checks it against what it runs on (every field
but `driver` and the runner's own): a stamp that does not describe the
runner would key results under another runner's name, so the test fails
with one line naming the field.
"""
import os
import shutil
import subprocess

from autotune.errors import AutotuneError
from autotune.measure import backends

STAMP_ENV = "AUTOTUNE_RUNNER_STAMP"
DOCS = "docs/bazel.md#cached-results-and-upgrades"
# The fields a test checks against what it runs on, in the stamp's order.
CHECKED = ("device", "triton", "torch", "cuda")


def fields_of(backend):
    """{field: value} this process runs with (the checked fields)."""
    versions = backend.versions()
    return {"device": backend.device_key(),
            "triton": versions.get("triton_version", ""),
            "torch": versions.get("torch_version", ""),
            "cuda": versions.get("cuda_version", "")}


def driver_version():
    """The NVIDIA driver's version from nvidia-smi, or "" without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def format_stamp(fields):
    return ";".join(f"{k}={v}" for k, v in fields.items())


def current(backend=None):
    """The stamp of this runner (for the runner to export)."""
    fields = fields_of(backend or backends.select_backend())
    driver = driver_version()
    if driver:
        fields["driver"] = driver
    return format_stamp(fields)


def parse(text):
    """{field: value} of a stamp; AutotuneError naming the variable when a
    part is not NAME=VALUE."""
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
    running = fields_of(backend)
    for name in CHECKED:
        if name in stamped and stamped[name] != running[name]:
            raise AutotuneError(
                f"{STAMP_ENV} says {name}={stamped[name]}, but this test "
                f"runs with {name}={running[name]}: the stamp keys the "
                "test's cached result and must describe this runner; "
                f"export it from `python3 tools/runner_stamp.py` on the "
                f"runner ({DOCS})")
    return stamped
