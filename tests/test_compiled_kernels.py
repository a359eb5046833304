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

from autotune.errors import UnservableFile

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
    import triton

    from autotune import codec
    from autotune.binaries import compile_requests
    entries = codec.load_results(suite_dump)
    assert entries and all(e.compile_requests for e in entries)
    for entry in entries:
        for request in entry.compile_requests:
            assert compile_requests.mismatch(request, entry) is None
            # The entry's own Triton's, and this run's when it differs
            # (the matrix runs this under every Triton of the range).
            assert request.triton_version in (
                entry.provenance.triton_version, triton.__version__)
            assert request.kernel.endswith(":" + entry.key.kernel)
        assert any(r.triton_version == triton.__version__
                   for r in entry.compile_requests)
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
    import triton

    from autotune import codec
    from autotune.binaries import triton_cache
    root, stdout = compiled
    versions = [r.triton_version for e in codec.load_results(suite_dump)
                for r in e.compile_requests]
    # Built: this Triton's requests; another's (the checked-in cache's,
    # under an older Triton of the matrix) refused, and counted.
    requests = versions.count(triton.__version__)
    assert f"{requests} of {requests} binaries built for sm_90" in stdout
    other = len(versions) - requests
    assert (f"; {other} request(s) refused" in stdout) if other else \
        "refused" not in stdout, stdout
    assert "0 of 6 entries without a compile request" in stdout
    manifest, problem = triton_cache.read_manifest(root)
    assert problem is None and manifest["built"] == requests
    assert manifest["triton_env"] == {"TRITON_DEFAULT_FP_FUSION": "true"}
    cubins = [f for d in os.listdir(root)
              if os.path.isdir(os.path.join(root, d))
              for f in os.listdir(os.path.join(root, d))
              if f.endswith(".cubin")]
    assert len(cubins) == requests


def _serve(dump, root, fp_fusion="1", flags="", ok=True):
    cache = os.path.join(os.path.dirname(root), "private")
    run = subprocess.run(
        [sys.executable, __file__, "serve", dump, root], capture_output=True,
        text=True, cwd=ROOT,
        env=_env(TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION=fp_fusion,
                 TEST_TMPDIR=os.path.dirname(cache),
                 AUTOTUNE_FLAGS=f"--autotune_compiled_kernels={root} "
                 + flags))
    if not ok:
        assert run.returncode != 0, run.stdout
        return None, run.stderr
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
    assert f"compiled kernels: {out['served']} served, 0 compiled" in log


def test_the_json_report_counts_served_and_compiled(compiled, suite_dump,
                                                    tmp_path):
    root, _ = compiled
    report = tmp_path / "report.json"
    out, _ = _serve(suite_dump, root, flags=f"--autotune_report_to={report}")
    counts = json.loads(report.read_text())["compiled_kernels"]
    assert counts == {"directories": [root], "served": out["served"],
                      "compiled": 0, "compiled_kernels": []}, counts


def test_other_cache_invalidating_variables_are_refused_once(compiled,
                                                             suite_dump):
    root, _ = compiled
    out, log = _serve(suite_dump, root, fp_fusion="0")
    assert out["served"] == 0, out
    assert out["missed"] == out["launch_compiles"], out
    assert log.count(
        f"autotune: compiled kernels in {root} were built with other "
        "cache-invalidating variables than this test's "
        "(TRITON_DEFAULT_FP_FUSION: true there, false here): nothing will "
        "be served") == 1, log
    # Every launch counted in the summary line.
    assert f"compiled kernels: 0 served, {out['missed']} compiled (" in log


def test_another_triton_version_is_never_served(compiled, suite_dump,
                                                tmp_path):
    root, _ = compiled
    other = str(tmp_path / "other")
    shutil.copytree(root, other)
    from autotune.binaries import triton_cache
    manifest, _ = triton_cache.read_manifest(other)
    manifest["identity"]["triton_version"] = "2.0.0"
    triton_cache.write_manifest(other, manifest)
    out, log = _serve(suite_dump, other)
    assert out["served"] == 0 and out["missed"] == out["launch_compiles"], out
    assert log.count("were built by Triton 2.0.0, this test runs Triton "
                     f"{out['triton']}: nothing will be served") == 1, log


def test_require_compiled_kernels_fails_a_launch_that_compiles(
        compiled, suite_dump, tmp_path):
    # A copy: its own private Triton cache, which holds no kernel yet.
    root = _copy(compiled[0], tmp_path)
    _, log = _serve(suite_dump, root, fp_fusion="0", ok=False,
                    flags="--require_compiled_kernels")
    assert "CompiledKernelMissError: autotune: kernel " in log, log[-3000:]
    assert "is compiled although compiled kernels were given " \
        f"({root}) and --require_compiled_kernels is set: compiled kernels " \
        f"in {root} were built with other cache-invalidating variables" \
        in log, log[-3000:]


def _copy(root, tmp_path, name="copy"):
    other = str(tmp_path / name)
    shutil.copytree(root, other, symlinks=True)
    return other


def _key_folders(root):
    return sorted(d for d in os.listdir(root)
                  if os.path.isdir(os.path.join(root, d)))


def _kernel_of(folder):
    return [f for f in os.listdir(folder)
            if f.endswith(".json") and not f.startswith("__grp__")][0]


def test_each_identity_difference_is_named_in_one_line(compiled, tmp_path,
                                                       monkeypatch):
    from autotune.binaries import triton_cache
    import triton
    root, _ = compiled
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    for name in triton_cache.KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert triton_cache.identity_problem(root) is None
    here = triton_cache.build_identity(["sm_90"])
    sm90 = here["backend_hash"]["sm_90"]
    old_ptxas = sm90.replace("release 13.4, V13.4.59",
                             "release 12.8, V12.8.93") \
        if "V13.4.59" in sm90 else "Cuda compilation tools, release 12.8, " \
        "V12.8.93\n-90"
    release = triton_cache._release(sm90)
    cases = [
        (("python",), "cpython-312",
         f"were built under cpython-312, this test runs {here['python']}"),
        (("ext_suffix",), ".cpython-311d-x86_64-linux-gnu.so",
         "were built with extension suffix .cpython-311d-x86_64-linux-gnu"
         f".so, this test runs {here['ext_suffix']}"),
        (("triton_version",), "2.0.0",
         f"were built by Triton 2.0.0, this test runs Triton "
         f"{triton.__version__}"),
        (("triton_key",), "0" * 64,
         f"were built by another build of Triton {triton.__version__} (its "
         "key of itself differs from this one's)"),
        (("triton_env",), {},
         "were built with other cache-invalidating variables than this "
         "test's (TRITON_DEFAULT_FP_FUSION: unset there, true here)"),
        (("key_variables",), {"TRITON_DEBUG": "1"},
         "were built with other TRITON_DEBUG than this test's (TRITON_DEBUG:"
         " 1 there, unset here)"),
        (("key_variables", "backend_hash"),
         ({"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"},
          {"sm_90": old_ptxas}),
         f"were built with ptxas V12.8.93 for sm_90, this test's is "
         f"{release} (TRITON_PTXAS_PATH: /usr/local/cuda/bin/ptxas there, "
         "unset here)"),
        (("triton_env",), ["TRITON_DEFAULT_FP_FUSION"],
         "were built with an unreadable triton_env in its manifest"),
    ]
    for n, (fields, value, said) in enumerate(cases):
        other = _copy(root, tmp_path, f"c{n}")
        manifest, _ = triton_cache.read_manifest(other)
        values = value if len(fields) > 1 else (value,)
        for field, v in zip(fields, values):
            manifest["identity"][field] = v
        triton_cache.write_manifest(other, manifest)
        assert triton_cache.identity_problem(other) == \
            f"compiled kernels in {other} {said}: nothing will be served"
    del manifest["identity"]
    triton_cache.write_manifest(other, manifest)
    assert "record no build identity" in triton_cache.identity_problem(other)
    assert triton_cache.identity_problem(str(tmp_path / "none")) == \
        f"{tmp_path / 'none'} is not a directory"


def test_nothing_malformed_is_served_and_each_is_named(compiled, tmp_path):
    """A FIFO, a device, 50,000 nested '[', garbled JSON, wrong types,
    links out of the directory, swapped key folders: each refused with one
    reason naming the file, none blocking or raising anything else."""
    import signal

    from autotune.binaries import triton_cache
    root, _ = compiled
    first, second = _key_folders(root)[:2]

    def served(path, key):
        folder = os.path.join(path, key)
        return triton_cache.served_group(
            path, triton_cache._root_real(path), key, _kernel_of(folder))

    def refused(path, key, said):
        with pytest.raises(UnservableFile) as e:
            served(path, key)
        assert said in str(e.value), str(e.value)
        assert str(e.value).startswith(os.path.join(path, key)), str(e.value)

    signal.alarm(60)  # a FIFO opened blocking would hang here
    try:
        assert served(root, first)
        kernel = _kernel_of(os.path.join(root, first))
        stem = kernel[:-len(".json")]
        binary = os.path.join(first, stem + ".cubin")
        group = os.path.join(first, "__grp__" + kernel)
        outside = tmp_path / "outside.cubin"
        outside.write_bytes(b"\0" * 64)

        def case(name, change, said, key=first):
            other = _copy(root, tmp_path, name)
            change(other)
            refused(other, key, said)

        def replace(rel, make):
            def change(other):
                os.unlink(os.path.join(other, rel))
                make(os.path.join(other, rel))
            return change

        def write(rel, text):
            return replace(rel, lambda p: open(p, "w").write(text))

        case("fifo_group", replace(group, os.mkfifo), "not a regular file")
        case("fifo_binary", replace(binary, os.mkfifo), "not a regular file")
        case("zero_binary", replace(binary, lambda p: os.symlink("/dev/zero",
                                                                 p)),
             "a link resolving outside")
        case("link_out", replace(binary, lambda p: os.symlink(outside, p)),
             "a link resolving outside")
        case("nested", write(group, "[" * 50000), "not valid JSON")
        case("garbled", write(os.path.join(first, kernel), '{"hash": '),
             "not valid JSON")
        case("list", write(group, "[1, 2]"), "a JSON list, not an object")
        case("types", write(group, '{"child_paths": ["a"]}'),
             "no child_paths naming")
        case("dotdot", write(group, json.dumps({"child_paths": {
            kernel: kernel, "../x.cubin": "x"}})), "not a file name")
        case("huge", lambda o: os.truncate(os.path.join(o, binary),
                                           triton_cache.MAX_FILE_BYTES + 1),
             "bytes, more than the")

        def swap(other):
            a, b = os.path.join(other, first), os.path.join(other, second)
            os.rename(a, a + ".x")
            os.rename(b, a)
            os.rename(a + ".x", b)
        case("swapped", swap, "its metadata's hash is not this key's")

        def renamed(other):
            path = os.path.join(other, first, kernel)
            meta = json.load(open(path))
            meta["name"] = "evil_kernel"
            open(path, "w").write(json.dumps(meta))
        case("renamed", renamed, "its metadata names kernel 'evil_kernel'")

        def folder_link(other):
            moved = str(tmp_path / "elsewhere")
            shutil.move(os.path.join(other, first), moved)
            os.symlink(moved, os.path.join(other, first))
        case("folder_link", folder_link, "a link resolving outside")

        # The manifest: read without blocking, one line.
        for name, make, said in (
                ("fifo_manifest", os.mkfifo, "not a regular file"),
                ("zero_manifest", lambda p: os.symlink("/dev/zero", p),
                 "not a regular file"),
                ("nested_manifest", lambda p: open(p, "w").write(
                    "[" * 50000), "not valid JSON")):
            other = _copy(root, tmp_path, name)
            replace(triton_cache.MANIFEST_NAME, make)(other)
            problem = triton_cache.identity_problem(other)
            assert problem == (f"{other}/{triton_cache.MANIFEST_NAME}: "
                               f"unreadable manifest ({said})"), problem
    finally:
        signal.alarm(0)


def test_a_directory_of_links_into_the_build_is_served(compiled, tmp_path):
    """As Bazel lays a tree artifact out for a test: the directory itself a
    link (runfiles), or real folders whose files are links into the
    build's tree (the sandbox)."""
    from autotune.binaries import triton_cache
    root, _ = compiled
    linked = str(tmp_path / "linked")
    os.symlink(root, linked)
    sandbox = str(tmp_path / "sandbox")
    for folder, _, files in os.walk(root):
        mirror = os.path.join(sandbox, os.path.relpath(folder, root))
        os.makedirs(mirror, exist_ok=True)
        for name in files:
            os.symlink(os.path.join(folder, name), os.path.join(mirror, name))
    for path in (linked, sandbox):
        assert triton_cache._root_real(path) == os.path.realpath(root)
        for key in _key_folders(root):
            group = triton_cache.served_group(
                path, triton_cache._root_real(path), key,
                _kernel_of(os.path.join(root, key)))
            assert group and all(p.startswith(os.path.realpath(root))
                                 for p in group.values()), group
        assert triton_cache.served_group(
            path, triton_cache._root_real(path), "NOKEY", "k.json") is None


def test_swapped_key_folders_are_compiled_not_served(compiled, suite_dump,
                                                     tmp_path):
    """The launch asking for one config is never handed another's binary:
    each swapped folder is named once and its launches compile."""
    root, _ = compiled
    other = _copy(root, tmp_path)
    first, second = [d for d in _key_folders(other) if _kernel_of(
        os.path.join(other, d)) == "softmax_kernel.json"]
    a, b = os.path.join(other, first), os.path.join(other, second)
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    out, log = _serve(suite_dump, other)
    assert out["missed"] == 2 and \
        out["served"] + out["missed"] == out["launch_compiles"], out
    assert "compiled kernels: 4 served, 2 compiled (softmax_kernel)" in log
    assert log.count("its metadata's hash is not this key's") == 2, log


def test_a_hit_with_a_read_only_triton_cache_names_triton_cache_dir(
        tmp_path, monkeypatch):
    import errno

    from autotune.errors import TritonCacheError
    from autotune.binaries import triton_cache
    read_only = str(tmp_path / "ro")
    monkeypatch.setenv("TRITON_CACHE_DIR", read_only)

    def makedirs(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", path)
    monkeypatch.setattr(os, "makedirs", makedirs)
    with pytest.raises(TritonCacheError) as raised:
        triton_cache.ReadThroughCacheManager("KEY")
    assert f"Triton's cache {read_only} is not writable" in str(raised.value)
    assert "set TRITON_CACHE_DIR" in str(raised.value)


def test_directories_travel_whole_and_missing_ones_are_named(tmp_path,
                                                            capsys):
    from autotune.binaries import triton_cache
    odd = tmp_path / "a:b,c"
    odd.mkdir()
    env = {}
    triton_cache.configure_environment([str(odd)], env)
    assert triton_cache.compiled_dirs(env) == [str(odd)]
    missing = str(tmp_path / "nowhere")
    triton_cache.configure_environment([missing], {})
    assert f"compiled kernels: {missing} is not a directory: nothing is " \
        "served from it" in capsys.readouterr().err
    triton_cache.configure_environment([str(odd)], {"TRITON_INTERPRET": "1"})
    assert f"compiled kernels in {odd} are not used: kernels run on " \
        "Triton's interpreter here" in capsys.readouterr().err


def _cache_tool(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py")]
        + list(args), capture_output=True, text=True, cwd=ROOT, env=_env())


def _one_kernel_dump(dump, tmp_path, kernel="softmax_kernel"):
    from autotune import codec
    entries = [e for e in codec.load_results(dump) if e.key.kernel == kernel]
    assert entries
    path = str(tmp_path / f"{kernel}.textproto")
    codec.dump_results(entries, path)
    return path


def test_the_same_cache_compiled_from_two_checkouts_is_byte_identical(
        suite_dump, tmp_path):
    """Group files hold bare names, the metadata no path of the builder,
    only the binary and its metadata are kept, and the line info names
    each source file relative to its import path entry."""
    dump = _one_kernel_dump(suite_dump, tmp_path)
    trees = []
    for name in ("one", "two"):
        checkout = tmp_path / name / "src"
        for part in ("autotune", "tools"):
            shutil.copytree(os.path.join(ROOT, part), checkout / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
        out = tmp_path / name / "kernels"
        run = subprocess.run(
            [sys.executable, "tools/autotune_cache.py", "compile", dump,
             "--target", "sm_90", "-o", str(out), "--jobs", "1",
             "--kernel_module", "autotune.kernels.softmax"],
            capture_output=True, text=True, cwd=checkout,
            env=dict(_env(), PYTHONPATH=str(checkout)))
        assert run.returncode == 0, run.stdout + run.stderr[-3000:]
        trees.append({os.path.relpath(os.path.join(d, f), out):
                      open(os.path.join(d, f), "rb").read()
                      for d, _, files in os.walk(out) for f in files})
    assert trees[0] == trees[1]
    names = sorted(trees[0])
    assert all(n.endswith((".cubin", ".json")) for n in names), names
    assert sum(n.endswith(".cubin") for n in names) == 2, names
    for name, data in trees[0].items():
        assert str(tmp_path).encode() not in data, name


def test_compile_refuses_what_would_leave_a_wrong_tree(suite_dump,
                                                       tmp_path):
    elsewhere = tmp_path / "E"
    run = _cache_tool("compile", suite_dump, "--target", "sm_90", "-o",
                      str(tmp_path / "k"), "--triton_env",
                      f"TRITON_CACHE_DIR={elsewhere}")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "TRITON_CACHE_DIR is not one of Triton's cache-invalidating " \
        "variables" in run.stderr
    assert "Traceback" not in run.stderr
    assert not elsewhere.exists() and not (tmp_path / "k").exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    run = _cache_tool("compile", suite_dump, "--target", "sm_90", "-o",
                      str(a_file / "k"))
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"compile: cannot create {a_file / 'k'}: Not a directory" in \
        run.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".autotune-compile.lock").write_text("")
    run = _cache_tool("compile", suite_dump, "--target", "sm_90", "-o",
                      str(busy))
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"compile: another compile is writing {busy}" in run.stderr
    assert os.listdir(busy) == [".autotune-compile.lock"]


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


# -- the child ---------------------------------------------------------------

def serve(dump, root):
    sys.path[:0] = [ROOT, HERE]
    import autotune

    from autotune.binaries import triton_cache
    from autotune.measure import backends
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
                      "triton": __import__("triton").__version__,
                      "private_cache": os.environ.get("TRITON_CACHE_DIR",
                                                      "")}))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])

