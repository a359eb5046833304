"""One rule for "may this entry be used as it is": the runtime's load run
and `autotune_cache verify` say the same about an entry tuned under
another torch (a copy of testdata/xla_style.textproto)."""
import os
import subprocess
import sys

from autotune import codec
from autotune.records import Provenance
from autotune.runtime import freshness, session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XLA = os.path.join(ROOT, "testdata", "xla_style.textproto")


def _torch_drift_copy(path):
    entries = [e.replace(provenance=e.provenance._replace(
        torch_version="2.1.0")) for e in codec.load_results(XLA)]
    codec.dump_results(entries, path)
    return entries


def test_the_rule_names_the_first_component_that_differs():
    running = {"triton_version": "3.9.0", "torch_version": "2.13.0",
               "cuda_version": None}
    assert freshness.version_drift(Provenance("3.9.1", "2.1.0"), running) \
        == ("torch", "2.1", "2.13")
    assert freshness.version_drift(Provenance("3.4.0", "2.1.0"), running) \
        == ("Triton", "3.4", "3.9")
    assert freshness.version_drift(Provenance("3.9.0", "2.13.1"),
                                   running) is None
    assert session.version_drift is freshness.version_drift


def test_verify_and_a_load_run_agree_on_a_torch_drift(tmp_path):
    path = str(tmp_path / "drift.textproto")
    entries = _torch_drift_copy(path)
    verify = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "verify", path, "--kernel_module", "autotune.kernels.softmax"],
        capture_output=True, text=True, cwd=ROOT)
    assert verify.returncode == 0, verify.stderr
    assert "1 entries tuned with torch 2.1, running 2.13" in verify.stdout
    assert verify.stdout.strip().splitlines()[-1] != "verify: ok"
    # A load run of the same file counts the same entry, by the same rule.
    from autotune import flags
    from autotune.measure import backends
    loading = session.Session(
        flags.Options(load_autotune_results_from=[path]),
        backend=backends.InterpreterBackend())
    assert loading._drift(entries[0]) == ("torch", "2.1", "2.13")
