"""Compiled kernels cached like tuned configs, proved on the CPU.

- A load-and-dump run of the example suite on the interpreter records a
  compile request per winner launch (each differently aligned launch
  once), in text and binary files alike.
- `autotune_cache compile` builds them for sm_90 with Triton's compiler
  into a directory, which is then moved (Triton's group files hold
  absolute paths: the read-through manager resolves by name).
- A child process with an sm_90 driver stand-in (TRITON_INTERPRET=0, so
  the kernels are JITFunctions) runs the suite in load mode with
  --autotune_compiled_kernels: every launch's own compile (real
  triton.compile, returning a stand-in kernel afterwards) is served from
  the directory: served == launches, nothing compiled.
- A directory built by another Triton version is never served, and says
  so once; an unwritable Triton cache is one environment error.

    python tests/test_compiled_kernels.py serve DUMP DIR   # the child
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUITE = os.path.join(ROOT, "examples", "fused_kernels_test.py")
CHECKED_IN = os.path.join(ROOT, "testdata", "fused_kernels.textproto")


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    for name in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR", "TRITON_HOME",
                 "TRITON_CACHE_MANAGER", "TEST_TMPDIR"):
        env.pop(name, None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def suite_dump(tmp_path_factory):
    """The example suite run once on the interpreter, loading the checked-in
    cache and dumping what it used."""
    out = tmp_path_factory.mktemp("dump") / "suite.textproto"
    run = subprocess.run(
        [sys.executable, SUITE], capture_output=True, text=True, cwd=ROOT,
        env=_env(AUTOTUNE_FLAGS=f"--load_autotune_results_from={CHECKED_IN}"
                 f" --dump_autotune_results_to={out}"))
    assert run.returncode == 0, run.stderr[-3000:]
    return str(out)


@pytest.fixture(scope="module")
def compiled(suite_dump, tmp_path_factory):
    """The dump's requests built for sm_90, then moved elsewhere."""
    built = tmp_path_factory.mktemp("build") / "kernels"
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "compile", suite_dump, "--target", "sm_90", "-o", str(built),
         "--jobs", "2", "--triton_env", "TRITON_DEFAULT_FP_FUSION=1"]
        + [f"--kernel_module=autotune.kernels.{name}"
           for name in ("layernorm", "matmul", "softmax")],
        capture_output=True, text=True, cwd=ROOT, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    moved = tmp_path_factory.mktemp("moved") / "kernels"
    shutil.move(str(built), str(moved))
    return str(moved), run.stdout


def test_dump_records_a_compile_request_per_launch(suite_dump):
    from autotune import codec
    from autotune.measure import compile_requests
    entries = codec.load_results(suite_dump)
    assert entries and all(e.compile_requests for e in entries)
    for entry in entries:
        for request in entry.compile_requests:
            assert compile_requests.mismatch(request, entry) is None
            assert request.triton_version == entry.provenance.triton_version
            assert request.kernel.endswith(":" + entry.key.kernel)
    # The layernorm fusion whose row length is not a multiple of 16 is
    # launched with an aligned stride too? Each distinct specialisation is
    # one request: no two requests of an entry are equal.
    for entry in entries:
        assert len(set(entry.compile_requests)) == \
            len(entry.compile_requests)
    # Binary files carry them too.
    binary = suite_dump.replace(".textproto", ".pb")
    codec.dump_results(entries, binary)
    back = {e.key: e.compile_requests for e in codec.load_results(binary)}
    assert back == {e.key: e.compile_requests for e in entries}


def test_a_load_run_records_no_request():
    """Only a run that writes a cache records requests (the first one of a
    kernel costs Triton's backend and binder set-up)."""
    script = ("import torch, autotune\n"
              "from autotune.kernels import softmax\n"
              "softmax.softmax(torch.randn(8, 96))\n"
              "s = autotune.session()\n"
              "print(s.stats.hits, len(s.compile_requests))\n")
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True,
        cwd=ROOT, env=_env(AUTOTUNE_FLAGS="--load_autotune_results_from="
                           f"{CHECKED_IN}"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["1", "0"], run.stdout


def test_compile_builds_every_request(compiled, suite_dump):
    from autotune import codec
    from autotune.measure import triton_cache
    root, stdout = compiled
    requests = sum(len(e.compile_requests)
                   for e in codec.load_results(suite_dump))
    assert f"{requests} of {requests} binaries built for sm_90" in stdout
    assert "0 of 6 entries without a compile request" in stdout
    manifest, problem = triton_cache.read_manifest(root)
    assert problem is None and manifest["built"] == requests
    assert manifest["triton_env"] == {"TRITON_DEFAULT_FP_FUSION": "true"}
    cubins = [f for d in os.listdir(root)
              if os.path.isdir(os.path.join(root, d))
              for f in os.listdir(os.path.join(root, d))
              if f.endswith(".cubin")]
    assert len(cubins) == requests


def _serve(dump, root, fp_fusion="1"):
    cache = os.path.join(os.path.dirname(root), "private")
    run = subprocess.run(
        [sys.executable, __file__, "serve", dump, root], capture_output=True,
        text=True, cwd=ROOT,
        env=_env(TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION=fp_fusion,
                 TEST_TMPDIR=os.path.dirname(cache),
                 AUTOTUNE_FLAGS=f"--autotune_compiled_kernels={root}"))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_every_launch_is_served_from_the_moved_directory(compiled, suite_dump):
    root, _ = compiled
    out, log = _serve(suite_dump, root)
    assert out["launch_compiles"] >= 6, out
    assert out["served"] == out["launch_compiles"], out
    assert out["missed"] == 0, out
    # The private folder under the child's TEST_TMPDIR (see _serve).
    assert out["private_cache"] == os.path.join(os.path.dirname(root),
                                                "triton-cache"), out
    assert "serving compiled kernels from " + root in log


def test_other_cache_invalidating_variables_are_refused_once(compiled,
                                                             suite_dump):
    root, _ = compiled
    out, log = _serve(suite_dump, root, fp_fusion="0")
    assert out["served"] == 0, out
    assert log.count("other Triton cache-invalidating variables") == 1, log


def test_another_triton_version_is_never_served(compiled, suite_dump,
                                                tmp_path):
    root, _ = compiled
    other = str(tmp_path / "other")
    shutil.copytree(root, other)
    from autotune.measure import triton_cache
    manifest, _ = triton_cache.read_manifest(other)
    manifest["triton_version"] = "2.0.0"
    triton_cache.write_manifest(other, manifest)
    out, log = _serve(suite_dump, other)
    assert out["served"] == 0 and out["missed"] == 0, out
    assert log.count("were built by Triton 2.0.0") == 1, log


def _cache_tool(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py")]
        + list(args), capture_output=True, text=True, cwd=ROOT, env=_env())


def test_show_prints_and_verify_checks_the_requests(suite_dump, tmp_path):
    shown = _cache_tool("show", suite_dump, "--compile_requests",
                        "--kernel", "softmax_kernel")
    assert shown.returncode == 0, shown.stderr
    assert "autotune.kernels.softmax:softmax_kernel(x:*fp32:D" in shown.stdout
    verified = _cache_tool("verify", suite_dump)
    assert verified.returncode == 0 and "verify: ok" in verified.stdout
    # A request that names another config than the winner: a finding.
    text = open(suite_dump).read()
    wrong = tmp_path / "wrong.textproto"
    first = text.index('options: "num_ctas=1 num_stages=')
    end = text.index('"', first + len('options: "'))
    options = text[first:end]
    warps = options.rsplit("num_warps=", 1)
    wrong.write_text(text[:first] + warps[0] + "num_warps=16" +
                     text[end:])
    verified = _cache_tool("verify", str(wrong))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "compile request does not describe the winner: compile request " \
        "has num_warps=16" in verified.stdout


def test_private_cache_under_bazel(monkeypatch, tmp_path):
    from autotune.measure import triton_cache
    env = {"TEST_TMPDIR": str(tmp_path)}
    assert triton_cache.configure_environment((), env) == \
        str(tmp_path / "triton-cache")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton-cache")
    for kept in ({"TEST_TMPDIR": "t", "TRITON_CACHE_DIR": "/mine"},
                 {"TEST_TMPDIR": "t", "TRITON_HOME": "/home"}):
        before = dict(kept)
        assert triton_cache.configure_environment((), kept) is None
        kept.pop("MPLCONFIGDIR")
        assert kept == before
    outside = {}
    triton_cache.configure_environment((), outside)
    assert "TRITON_CACHE_DIR" not in outside


def test_users_cache_manager_is_kept_and_named(capsys):
    from autotune.measure import triton_cache
    env = {"TRITON_CACHE_MANAGER": "my.module:Manager"}
    triton_cache.configure_environment(("/compiled",), env)
    assert env["TRITON_CACHE_MANAGER"] == "my.module:Manager"
    assert triton_cache.COMPILED_DIRS_ENV not in env
    assert "TRITON_CACHE_MANAGER=my.module:Manager is set: the compiled " \
        "kernels in /compiled are not served" in capsys.readouterr().err


def test_unwritable_triton_cache_is_one_environment_error(tmp_path,
                                                          monkeypatch):
    import errno

    from autotune.errors import TritonCacheError
    from autotune.measure import tuner
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "ro"))
    exc = OSError(errno.EROFS, "Read-only file system",
                  str(tmp_path / "ro" / "ABC"))
    with pytest.raises(TritonCacheError) as raised:
        tuner._stop_for_unwritable_cache(exc)
    assert "TRITON_CACHE_DIR" in str(raised.value)
    # Not the cache: left to the per-config classification.
    tuner._stop_for_unwritable_cache(OSError(errno.EROFS, "x", "/elsewhere"))


# -- the child ---------------------------------------------------------------

def serve(dump, root):
    sys.path[:0] = [ROOT, HERE]
    import autotune

    from autotune.measure import backends, triton_cache
    from gpu_standin import count_launch_compiles, stand_in_gpu_backend

    launches = count_launch_compiles()
    autotune.configure(backend=stand_in_gpu_backend(),
                       load_autotune_results_from=[dump],
                       require_complete_autotune_results=True)
    # The entries were tuned on the interpreter, whose config lists the
    # example kernels offer there: the same lists here, or the matmul's
    # winners would be refused as no longer offered.
    backends.interpreter_selected = lambda: True
    sys.path.insert(0, os.path.dirname(SUITE))
    import fused_kernels_test as suite
    for name in sorted(dir(suite.FusedKernelsTest)):
        if name.startswith("test"):
            case = suite.FusedKernelsTest(name)
            case.setUp()
            try:
                getattr(case, name)()
            except AssertionError:
                pass  # the stand-in kernel computes nothing
    print(json.dumps({"launch_compiles": len(launches),
                      "served": triton_cache.ServedCounts.served,
                      "missed": triton_cache.ServedCounts.missed,
                      "private_cache": os.environ.get("TRITON_CACHE_DIR",
                                                      "")}))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])


def test_matplotlib_config_folder_under_bazel(tmp_path):
    from autotune.measure import triton_cache
    env = {"TEST_TMPDIR": str(tmp_path)}
    triton_cache.configure_environment((), env)
    assert env["MPLCONFIGDIR"] == str(tmp_path / "matplotlib")
    mine = {"TEST_TMPDIR": str(tmp_path), "MPLCONFIGDIR": "/mine"}
    triton_cache.configure_environment((), mine)
    assert mine["MPLCONFIGDIR"] == "/mine"
    outside = {}
    triton_cache.configure_environment((), outside)
    assert "MPLCONFIGDIR" not in outside
