"""`autotune_cache show --coverage`: per device of a fleet's cache, how
many of the suite's fusions it has, which are missing or stale, and when
it was last tuned."""
import json
import os
import subprocess
import sys

from autotune import codec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "testdata", "fused_kernels.textproto")
H100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"
MODULES = ["--kernel_module=autotune.kernels.softmax",
           "--kernel_module=autotune.kernels.matmul",
           "--kernel_module=autotune.kernels.layernorm"]


def show(*args):
    return subprocess.run([sys.executable, os.path.join(
        ROOT, "tools", "autotune_cache.py"), "show", *args],
        capture_output=True, text=True, cwd=ROOT)


def test_coverage_by_device(tmp_path):
    entries = codec.load_results(SUITE)
    # The H100 has four of the six fusions; one of them is stale (another
    # fingerprint than the tree's).
    h100 = [e.replace(key=e.key._replace(device=H100)) for e in entries[:4]]
    h100[0] = h100[0].replace(key=h100[0].key._replace(fingerprint="old"))
    path = str(tmp_path / "fleet.textproto")
    codec.dump_results(entries + h100, path)
    out = show(path, "--coverage", "--json", *MODULES)
    assert out.returncode == 0, out.stderr
    rows = {r["device"]: r for r in json.loads(out.stdout)["devices"]}
    gpu, cpu = rows[H100], rows["cpu/triton-interpreter/triton-3.9.0"]
    assert (gpu["entries"], gpu["fusions"], len(gpu["missing"])) == (4, 6, 2)
    assert len(gpu["stale"]) == 1 and cpu["stale"] == []
    assert all(m.startswith("softmax_kernel [") for m in gpu["missing"])
    assert (cpu["entries"], cpu["missing"]) == (6, [])
    assert gpu["last_tuned"] and cpu["last_tuned"]
    text = show(path, "--coverage", *MODULES).stdout
    assert f"  {H100}: 4/6 fusions, 2 missing, 1 stale; last tuned " in text
    # Without the tree, stale is not judged, and it says so.
    assert "stale not checked" in show(path, "--coverage").stdout
