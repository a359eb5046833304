"""The pytest plugin, run as a user runs it: pytest in a separate process on
a small project of real Triton kernels (the interpreter), with the plugin
loaded by `-p pytest_autotune` or, as an installed distribution,
through its `pytest11` entry point."""
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import triton
import triton.language as tl

import autotune
from autotune import codec
from autotune.records import Config

from test_results_io import make_entries
from tests_support import HOSTILE_URLS, assert_no_secret, environment

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = "testdata/kernels.textproto"
PLUGIN = ("-p", "pytest_autotune")
DEPRECATIONS_ARE_ERRORS = "error::pytest.PytestDeprecationWarning"
PYTEST_MAJOR = int(pytest.__version__.split(".")[0])

KERNELS = '''
import autotune
import torch
import triton
import triton.language as tl
from autotune import Config

CONFIGS = [Config({"BLOCK": 16}, num_warps=1), Config({"BLOCK": 32})]


@autotune.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def add_one_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1.0,
             mask=offs < n)


@autotune.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def double_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2.0,
             mask=offs < n)


def call(kernel, n):
    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return x, y
'''

TESTS = '''
import pytest
import torch
from kernels import add_one_kernel, call, double_kernel


@pytest.mark.parametrize("n", [20, 40])
def test_add_one(n):
    x, y = call(add_one_kernel, n)
    assert torch.equal(y, x + 1)


def test_double():
    x, y = call(double_kernel, 20)
    assert torch.equal(y, x * 2)


def test_statistics_fixture(request, autotune_stats):
    call(double_kernel, 20)
    if request.config.getoption("autotune_update_all"):
        assert autotune_stats.candidate_benchmarks > 0
    elif not request.config.getoption("--autotune-update"):
        assert autotune_stats.candidate_benchmarks == 0
        assert autotune_stats.hits > 0
    # The same kind of object as the fixture: attributes.
    assert autotune_stats.since_test_start().tuned == 0
'''

PYPROJECT = f'''
[tool.pytest.ini_options]
autotune_cache = "{CACHE}"
'''


# add_one's code changed (its entries go stale) and a test of a shape of
# double_kernel that was never tuned (missing).
STALE_KERNELS = KERNELS.replace("+ 1.0,", "+ 1.0 + 0.0,")
NEW_SHAPE_TEST = textwrap.dedent('''
    def test_double_new_shape():
        call(double_kernel, 60)
    ''')


def write_project(path, kernels=KERNELS, tests=TESTS, ini=PYPROJECT):
    (path / "testdata").mkdir(exist_ok=True)
    (path / "kernels.py").write_text(textwrap.dedent(kernels))
    (path / "test_kernels.py").write_text(textwrap.dedent(tests))
    (path / "pyproject.toml").write_text(textwrap.dedent(ini))


def _environment(pythonpath, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        list(pythonpath) + [str(cwd)]))
    for name in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "AUTOTUNE_FLAGS",
                 "TRITON_DEFAULT_FP_FUSION"):
        env.pop(name, None)
    return env


class Run:
    def __init__(self, returncode, output):
        self.returncode, self.output = returncode, output


def run_pytest(pytester, *args, pythonpath=(ROOT,)):
    """pytest in a new process in the pytester project, as a user runs it."""
    env = _environment(pythonpath, pytester.path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", env["PYTHONPATH"])
        for name in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
            mp.delenv(name, raising=False)
        # Every session fails on a deprecated pytest API the plugin uses.
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-W", DEPRECATIONS_ARE_ERRORS, *args,
            timeout=300)
    return Run(result.ret, result.stdout.str() + "\n" + result.stderr.str())


def outcomes(result):
    """The counts of pytest's last summary line, warnings left out."""
    line = [l for l in result.output.splitlines()
            if re.search(r"\d+ (passed|failed|error)", l)][-1]
    counts = dict((word.rstrip("s"), int(n))
                  for n, word in re.findall(r"(\d+) (\w+)", line))
    counts.pop("warning", None)
    return counts


def entries_of(path):
    return {(e.key.kernel, e.key.signature): e
            for e in codec.load_results(str(path))}


def add_an_unused_entry(cache):
    """Adds to the cache an entry of `unused_kernel`, which no test meets;
    returns the cache's path."""
    entries = list(codec.load_results(str(cache)))
    other = entries[0].replace(key=entries[0].key._replace(
        kernel="unused_kernel"))
    codec.dump_results(entries + [other], str(cache))
    return cache


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The project tuned from nothing: `pytest --autotune-update` with no
    cache file. Returns (the run, the cache's bytes)."""
    project = tmp_path_factory.mktemp("tuned")
    write_project(project)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PLUGIN,
         "--autotune-update", "--autotune-report=report.json"],
        cwd=project, env=_environment((ROOT,), project), capture_output=True,
        text=True, timeout=300)
    result = Run(done.returncode, done.stdout + done.stderr)
    cache = project / CACHE
    data = cache.read_bytes() if cache.exists() else None
    return result, data, project


@pytest.fixture
def project(pytester, tuned):
    """A copy of the tuned project, its cache checked in."""
    write_project(pytester.path)
    (pytester.path / CACHE).write_bytes(tuned[1])
    return pytester


def test_update_from_nothing_writes_every_fusion(tuned):
    result, data, project = tuned
    assert result.returncode == 0, result.output
    assert data is not None
    entries = entries_of(project / CACHE)
    assert sorted(entries) == [
        ("add_one_kernel", "n=20;dtypes=x:float32,y:float32"),
        ("add_one_kernel", "n=40;dtypes=x:float32,y:float32"),
        ("double_kernel", "n=20;dtypes=x:float32,y:float32")]
    assert f"autotune: {CACHE}: 3 entries; 3 added, 0 removed, 0 changed" \
        in result.output
    assert "+ add_one_kernel [n=20;" in result.output
    # The plugin sets Triton's FP fusion default as the Bazel macro does:
    # no UserWarning about it, and the same Triton keys on both paths.
    assert "TRITON_DEFAULT_FP_FUSION is unset" not in result.output
    report = json.loads((project / "report.json").read_text())
    assert report["tuned"] == 3 and report["written"] is True
    assert report["candidate_benchmarks"] == 6
    assert len(report["changes"]["added"]) == 3
    # The per-fusion list of the Bazel report, candidates and all.
    fusions = report["fusions"]
    assert [(f["kernel"], f["signature"]) for f in fusions] == sorted(entries)
    assert all(f["status"] == "tuned" and f["candidates"] and
               sum(c["winner"] for c in f["candidates"]) == 1
               for f in fusions)
    from autotune.report import summary
    entry = entries[("double_kernel", "n=20;dtypes=x:float32,y:float32")]
    # (with what only the run knows: status, source, the device turn)
    run_fields = {k: fusions[-1][k] for k in (
        "status", "source", "miss_reason", "device_wait_s", "tuning_start",
        "tuning_end") if k in fusions[-1]}
    record = summary.fusion_record(entry.key, entry, **run_fields)
    assert set(fusions[-1]) == set(record)


def test_load_serves_every_fusion_without_benchmarks(project):
    before = (project.path / CACHE).read_bytes()
    # Without xdist too: its hooks are optional for the plugin.
    result = run_pytest(project, *PLUGIN, "-p", "no:xdist",
                        "--autotune-report=r.json")
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 4}
    assert "autotune: 3 hits, 0 tuned, 0 missed; 0 candidate benchmarks, " \
        "0.00 s tuning" in result.output
    report = json.loads((project.path / "r.json").read_text())
    assert (report["hits"], report["candidate_benchmarks"]) == (3, 0)
    assert report["missing"] == [] and report["stale"] == []
    assert (project.path / CACHE).read_bytes() == before


def test_update_of_a_subset_keeps_other_entries(project):
    # An entry no test meets, and the double_kernel entry, must survive a
    # run that only selects add_one tests.
    cache = add_an_unused_entry(project.path / CACHE)
    before = entries_of(cache)
    # With xdist: the controller, which collects nothing, must still see
    # that -k narrows the run.
    result = run_pytest(project, *PLUGIN, "--autotune-update=all", "-k",
                        "add_one", "--autotune-prune-unused", "-n", "2")
    assert result.returncode == 0, result.output
    after = entries_of(cache)
    assert sorted(after) == sorted(before)
    for kept in ("double_kernel", "unused_kernel"):
        (sig,) = [s for k, s in before if k == kept]
        assert after[kept, sig] == before[kept, sig]
    assert "--autotune-prune-unused ignored, not a full run" in result.output
    assert "autotune: 2 re-measured, 0 hits, 0 missed;" in result.output


def test_update_tunes_only_missing_and_stale_fusions(project):
    # add_one's code changes (its two entries go stale), double_kernel gets
    # a new shape (missing); double_kernel n=20 is a hit, kept verbatim.
    cache = project.path / CACHE
    before = entries_of(cache)
    write_project(project.path, kernels=STALE_KERNELS,
                  tests=TESTS + NEW_SHAPE_TEST)
    result = run_pytest(project, *PLUGIN, "--autotune-update",
                        "--autotune-report=r.json")
    assert result.returncode == 0, result.output
    report = json.loads((project.path / "r.json").read_text())
    assert (report["hits"], report["tuned"]) == (1, 3), result.output
    assert report["candidate_benchmarks"] == 6  # 2 configs x 3 fusions
    after = entries_of(cache)
    sig = "n=20;dtypes=x:float32,y:float32"
    assert after["double_kernel", sig] == before["double_kernel", sig]
    assert ("double_kernel", "n=60;dtypes=x:float32,y:float32") in after
    assert "update, missing and stale fusions" in result.output


def test_update_on_an_unchanged_tree_measures_nothing(project):
    before = (project.path / CACHE).read_bytes()
    result = run_pytest(project, *PLUGIN, "--autotune-update")
    assert result.returncode == 0, result.output
    assert "autotune: 3 hits, 0 tuned, 0 missed; 0 candidate benchmarks" \
        in result.output
    assert "left untouched (no change)" in result.output
    assert (project.path / CACHE).read_bytes() == before
    # =all re-measures every fusion, a test path after it still a path.
    result = run_pytest(project, *PLUGIN, "--autotune-update=all",
                        "test_kernels.py")
    assert result.returncode == 0, result.output
    assert "autotune: 3 re-measured, 0 hits, 0 missed;" in result.output
    assert "(update=all " in result.output


def test_update_creates_the_cache_directory(bare):
    result = run_pytest(bare, *PLUGIN, "--autotune-update",
                        "--autotune-cache=new/dir/c.textproto")
    assert result.returncode == 0, result.output
    assert (bare.path / "new" / "dir" / "c.textproto").exists()


def test_prune_unused_on_a_full_run(project):
    cache = add_an_unused_entry(project.path / CACHE)
    result = run_pytest(project, *PLUGIN, "--autotune-update",
                        "--autotune-prune-unused")
    assert result.returncode == 0, result.output
    assert "unused_kernel" not in {k for k, _ in entries_of(cache)}
    assert "1 removed" in result.output
    assert "- unused_kernel [" in result.output


def test_require_complete_names_stale_and_missing_fusions(project):
    # add_one's source changes (its entries go stale); a new test meets a
    # shape of double_kernel that was never tuned (missing); a marked test
    # runs in its own session that may tune.
    write_project(
        project.path,
        kernels=STALE_KERNELS,
        tests=TESTS + NEW_SHAPE_TEST + textwrap.dedent('''
            @pytest.mark.autotune(require_complete_autotune_results=False)
            def test_marked_may_tune():
                call(double_kernel, 80)

            @pytest.mark.autotune(bogus_option=1)
            def test_marked_with_a_bad_option():
                pass
        '''),
        ini=PYPROJECT + "autotune_require_complete = true\n")
    before = (project.path / CACHE).read_bytes()
    result = run_pytest(project, *PLUGIN, "--autotune-report=r.json")
    assert result.returncode == 1, result.output
    assert outcomes(result) == {"failed": 3, "passed": 3, "error": 1}
    assert "@pytest.mark.autotune: unknown option(s) bogus_option" \
        in result.output
    assert "stale: add_one_kernel [n=20;dtypes=x:float32,y:float32]" \
        in result.output
    assert "its source changed since it was tuned" in result.output
    # Load mode: the summary's miss lines end with the command that fixes
    # them.
    assert re.search(r"^  stale: add_one_kernel \[n=20;.*; fix: `pytest "
                     r"--autotune-update`, then commit the cache$",
                     result.output, re.M), result.output
    assert "missing: double_kernel [n=60;dtypes=x:float32,y:float32]" \
        in result.output
    report = json.loads((project.path / "r.json").read_text())
    assert sorted(m["signature"] for m in report["stale"]) == [
        "n=20;dtypes=x:float32,y:float32", "n=40;dtypes=x:float32,y:float32"]
    # n=80 missed too, but the marked test may tune: it passed.
    assert sorted(m["signature"] for m in report["missing"]) == [
        "n=60;dtypes=x:float32,y:float32", "n=80;dtypes=x:float32,y:float32"]
    assert report["tuned"] == 1
    assert "FAILED test_kernels.py::test_marked_may_tune" not in result.output
    assert (project.path / CACHE).read_bytes() == before


def test_xdist_load(project):
    result = run_pytest(project, *PLUGIN, "-n", "2",
                        "--autotune-report=r.json")
    assert result.returncode == 0, result.output
    report = json.loads((project.path / "r.json").read_text())
    assert report["hits"] == 3 and report["candidate_benchmarks"] == 0
    assert report["tuned"] == 0
    # The workers' fusions, gathered by the controller, each once.
    assert len(report["fusions"]) == 3
    assert all(f["status"] == "hit" and len(f["candidates"]) == 2
               for f in report["fusions"])


def test_xdist_update_merges_the_workers_results(pytester, tuned):
    # One file per worker (--dist loadfile); both meet double_kernel n=20.
    write_project(pytester.path)
    (pytester.path / "test_more.py").write_text(
        "from kernels import call, double_kernel\n"
        "def test_double_again():\n    call(double_kernel, 20)\n")
    result = run_pytest(pytester, *PLUGIN, "-n", "2", "--dist", "loadfile",
                        "--autotune-update", "--autotune-report=r.json")
    assert result.returncode == 0, result.output
    entries = entries_of(pytester.path / CACHE)
    assert sorted(entries) == sorted(entries_of(tuned[2] / CACHE))
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["written"] is True
    # The workers share a per-fusion directory: the second one to meet a
    # fusion finds the first one's result (or, in a race, adopts it).
    assert report["conflicts"] == []
    assert report["tuned"] in (3, 4)
    # Met twice in two sessions: a single process would count the second
    # meeting as neither (its memory serves it).
    assert report["tuned"] + report["hits"] == 4
    assert f"{CACHE}: 3 entries; 3 added" in result.output


def test_failed_update_leaves_the_cache_untouched(project):
    (project.path / "test_broken.py").write_text(
        "from kernels import call, double_kernel\n"
        "def test_broken():\n    call(double_kernel, 70)\n    assert False\n")
    before = (project.path / CACHE).read_bytes()
    result = run_pytest(project, *PLUGIN, "--autotune-update")
    assert result.returncode == 1
    assert f"{CACHE} left untouched (1 test(s) failed)" in result.output
    assert (project.path / CACHE).read_bytes() == before


# -- bad input: one line, nothing run, nothing written ---------------------

TRIVIAL_TESTS = "def test_nothing():\n    pass\n"


@pytest.fixture
def bare(pytester):
    """A project whose tests need neither torch nor Triton."""
    write_project(pytester.path, kernels="", tests=TRIVIAL_TESTS)
    return pytester


def _error_line(result):
    lines = [l for l in result.output.splitlines() if l.startswith("ERROR")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_missing_cache_in_load_mode(bare):
    result = run_pytest(bare, *PLUGIN)
    assert result.returncode == 4
    assert _error_line(result) == (
        f"ERROR: autotune: {CACHE} does not exist; run `pytest "
        "--autotune-update` to create it")
    assert "test_nothing" not in result.output


@pytest.mark.parametrize("mode", [(), ("--autotune-update",)])
def test_corrupt_cache_stops_before_any_test(bare, mode):
    cache = bare.path / CACHE
    cache.write_text("version: 1\nentries { kernel: \n")
    result = run_pytest(bare, *PLUGIN, *mode)
    assert result.returncode == 4, result.output
    line = _error_line(result)
    assert str(cache) in line
    assert "passed" not in result.output
    assert cache.read_text() == "version: 1\nentries { kernel: \n"


def test_update_on_a_read_only_path(bare):
    directory = bare.path / "testdata"
    cache = directory / "kernels.textproto"
    cache.write_bytes(b"")
    os.chmod(directory, 0o555)
    immutable = False
    try:
        if os.access(directory, os.W_OK):  # root ignores permission bits
            immutable = subprocess.run(
                ["chattr", "+i", str(directory)],
                capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("no way to make a read-only directory here")
        result = run_pytest(bare, *PLUGIN, "--autotune-update")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        os.chmod(directory, 0o755)
    assert result.returncode == 4, result.output
    line = _error_line(result)
    assert f"cannot write {CACHE}" in line and "not writable" in line
    assert "test_nothing" not in result.output
    assert cache.read_bytes() == b""


@pytest.mark.parametrize("ini, message", [
    ("autotune_require_complete = \"maybe\"\n",
     "ini autotune_require_complete = 'maybe'"),
    ("autotune_backend = \"tpu\"\n", "ini autotune_backend = 'tpu'"),
    ("autotune_cahce = \"x.textproto\"\n",
     "unknown ini key 'autotune_cahce'"),
    ("autotune_cahce = \"x.textproto\"\n",
     "did you mean autotune_cache? known keys: autotune_cache,"),
    ("autotune_dropin = \"sometimes\"\n",
     "ini autotune_dropin = 'sometimes'"),
])
def test_unknown_ini_values(bare, ini, message):
    (bare.path / "pyproject.toml").write_text(PYPROJECT + ini)
    (bare.path / CACHE).write_bytes(b"checked in")
    before = (bare.path / CACHE).read_bytes()
    result = run_pytest(bare, *PLUGIN, "--autotune-update")
    assert result.returncode == 4, result.output
    assert message in _error_line(result)
    assert str(bare.path / "pyproject.toml") in _error_line(result)
    assert (bare.path / CACHE).read_bytes() == before


# -- installed: the pytest11 entry point -----------------------------------

@pytest.fixture
def installed(tmp_path):
    """A site directory holding this checkout as an installed distribution,
    with the entry points pyproject.toml declares."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    site = tmp_path / "site"
    dist = site / "rules_autotune-0.1.0.dist-info"
    dist.mkdir(parents=True)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    groups = project["entry-points"]
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\n"
        f"Version: {project['version']}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n"
                                 for name, target in names.items())
        for group, names in groups.items()))
    return site


def test_installed_plugin_loads_and_can_be_turned_off(bare, installed):
    path = (ROOT, str(installed))
    result = run_pytest(bare, pythonpath=path)
    assert result.returncode == 4, result.output
    assert "does not exist; run `pytest --autotune-update`" in \
        _error_line(result)
    # Naming it on the command line as well, as from a checkout: the same
    # plugin, not a second registration of the module.
    result = run_pytest(bare, *PLUGIN, pythonpath=path)
    assert result.returncode == 4, result.output
    assert "does not exist; run `pytest --autotune-update`" in \
        _error_line(result)
    result = run_pytest(bare, "-p", "no:pytest_autotune", pythonpath=path)
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 1}


UNRELATED_TESTS = """
import os
import sys


def test_autotune_left_alone():
    assert "autotune" not in sys.modules
    assert "torch" not in sys.modules
    assert os.environ.get("TRITON_INTERPRET") is None
"""


def test_installed_plugin_stays_out_of_projects_that_do_not_use_it(
        pytester, installed):
    """A project with the package installed but no autotune settings: the
    entry point neither imports the runtime (and torch) nor selects
    Triton's interpreter for the project's own Triton code."""
    (pytester.path / "test_other.py").write_text(UNRELATED_TESTS)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        result = run_pytest(pytester, pythonpath=(ROOT, str(installed)))
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 1}


# A project without autotune settings that turns every warning into an
# error, in each kind of ini file.
STRICT_INI_FILES = [
    ("pytest.ini", "[pytest]\nfilterwarnings = error\n"),
    ("tox.ini", "[pytest]\nfilterwarnings = error\n"),
    ("setup.cfg", "[tool:pytest]\nfilterwarnings = error\n"),
    ("pyproject.toml",
     "[tool.pytest.ini_options]\nfilterwarnings = [\"error\"]\n"),
]
if PYTEST_MAJOR >= 9:  # pytest.toml and native [tool.pytest] tables
    STRICT_INI_FILES += [
        ("pytest.toml", "[pytest]\nfilterwarnings = [\"error\"]\n"),
        ("pyproject.toml", "[tool.pytest]\nfilterwarnings = [\"error\"]\n"),
    ]


@pytest.mark.parametrize("ini_name, ini_text", STRICT_INI_FILES)
def test_installed_plugin_is_silent_for_projects_with_warnings_as_errors(
        pytester, installed, ini_name, ini_text):
    """Not one warning from the entry point, under -W error and the
    project's own filterwarnings = error: a deprecated pytest API used at
    start-up would stop every session of such a project."""
    (pytester.path / ini_name).write_text(ini_text)
    (pytester.path / "test_other.py").write_text(UNRELATED_TESTS)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        result = run_pytest(pytester, "-W", "error",
                            pythonpath=(ROOT, str(installed)))
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 1}
    assert not re.search(r"Warning\b|warnings summary|\d+ warning",
                         result.output), result.output


@pytest.mark.parametrize("ini_name, ini_text", [
    (name, text.replace("filterwarnings", "autotune_cahce"))
    for name, text in STRICT_INI_FILES])
def test_misspelt_key_is_named_in_every_kind_of_ini_file(
        pytester, ini_name, ini_text):
    (pytester.path / ini_name).write_text(ini_text)
    result = run_pytest(pytester, *PLUGIN)
    assert result.returncode == 4, result.output
    line = _error_line(result)
    assert "unknown ini key 'autotune_cahce'" in line
    assert "did you mean autotune_cache?" in line
    assert str(pytester.path / ini_name) in line


def test_runtime_is_imported_before_the_projects_conftest(bare):
    """A conftest that imports kernels decorates them before any test
    module: with a cache configured, `autotune` (which selects Triton's
    interpreter where there is no GPU) must already be imported then."""
    (bare.path / "conftest.py").write_text(textwrap.dedent("""
        import sys
        AUTOTUNE_BEFORE_CONFTEST = "autotune" in sys.modules
    """))
    (bare.path / "test_order.py").write_text(textwrap.dedent("""
        import conftest


        def test_order():
            assert conftest.AUTOTUNE_BEFORE_CONFTEST
    """))
    result = run_pytest(bare, *PLUGIN, "--autotune-update", "test_order.py")
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 1}


def test_interpreter_backend_is_set_before_the_projects_conftest(bare):
    """`autotune_backend = interpreter` on a machine whose runtime would
    pick the GPU (the flag stands in for one here): kernels a conftest
    decorates must already see TRITON_INTERPRET=1."""
    (bare.path / "pyproject.toml").write_text(
        PYPROJECT + 'autotune_backend = "interpreter"\n')
    (bare.path / "conftest.py").write_text(textwrap.dedent("""
        import os
        SEEN = os.environ.get("TRITON_INTERPRET")
    """))
    (bare.path / "test_seen.py").write_text(textwrap.dedent("""
        import conftest


        def test_seen():
            assert conftest.SEEN == "1"
    """))
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        mp.setenv("AUTOTUNE_FLAGS", "--autotune_backend=gpu")
        result = run_pytest(bare, *PLUGIN, "--autotune-update",
                            "test_seen.py")
    assert outcomes(result) == {"passed": 1}, result.output


def test_ini_value_given_with_override_ini_is_named_so(bare):
    result = run_pytest(bare, *PLUGIN, "-o", "autotune_backend=bogus")
    assert result.returncode == 4, result.output
    assert "ini autotune_backend = 'bogus' (given with -o/--override-ini)" \
        in _error_line(result)


TRITON_AUTOTUNE_KERNELS = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])
@triton.jit
def fill_kernel(out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, 1.0, mask=offs < n)
'''


def test_kernels_of_triton_autotune_without_the_dropin_are_named(bare):
    """Plain triton.autotune kernels with no drop-in installed tune at
    every run, unseen by the cache: the summary names them and the fix."""
    (bare.path / "plain_kernels.py").write_text(TRITON_AUTOTUNE_KERNELS)
    (bare.path / "test_uses.py").write_text(
        "import plain_kernels\n\n\ndef test_imported():\n"
        "    assert plain_kernels.fill_kernel is not None\n")
    result = run_pytest(bare, *PLUGIN, "--autotune-update",
                        "--autotune-report=report.json", "test_uses.py")
    assert outcomes(result) == {"passed": 1}, result.output
    assert "1 kernel(s) decorated with Triton's own triton.autotune did " \
        "not use the cache: plain_kernels.fill_kernel; " \
        "`autotune.install()` in conftest.py" in result.output
    report = json.loads((bare.path / "report.json").read_text())
    assert report["bypassing"] == ["plain_kernels.fill_kernel"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOTUNE_FLAGS", "--autotune_dropin")
        result = run_pytest(bare, *PLUGIN, "--autotune-update",
                            "test_uses.py")
    assert outcomes(result) == {"passed": 1}, result.output
    assert "did not use the cache" not in result.output
    # The ini key does what the flag does, without the variable.
    (bare.path / "pyproject.toml").write_text(
        PYPROJECT + "autotune_dropin = \"true\"\n")
    result = run_pytest(bare, *PLUGIN, "--autotune-update", "test_uses.py")
    assert outcomes(result) == {"passed": 1}, result.output
    assert "did not use the cache" not in result.output


def test_a_cache_given_with_override_ini_turns_the_plugin_on(bare):
    """`-o autotune_cache=...` alone asks for autotuning (pytest 8 keeps
    -o values out of the ini file's keys)."""
    (bare.path / "pyproject.toml").write_text("")
    result = run_pytest(bare, *PLUGIN, "-o", "autotune_cache=other.textproto")
    assert result.returncode == 4, result.output
    assert "other.textproto does not exist; run `pytest --autotune-update`" \
        in _error_line(result)


# -- bad configuration stops the run at start -----------------------------

def plugin_project(tmp_path, ini):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "pytest.ini").write_text(ini)


def run_plugin(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PLUGIN,
         *args], cwd=tmp_path, capture_output=True, text=True,
        env=environment(), timeout=120)


@pytest.mark.parametrize("update", [False, True])
def test_malformed_best_config_stops_update_at_start(tmp_path, update):
    text = codec.encode(make_entries(2), "x.textproto").decode()
    line = text.split("\n  best { ", 1)[1].split("\n", 1)[0]
    (tmp_path / "cache.textproto").write_text(text.replace(
        "  best { " + line, '  best { params: "BLOCK=32 BUG" num_warps: 4 '
        'num_stages: 2 }', 1))
    plugin_project(tmp_path, "[pytest]\nautotune_cache = cache.textproto\n")
    run = run_plugin(tmp_path, *(["--autotune-update"] if update else []))
    assert run.returncode == 4, run.stdout + run.stderr
    assert "cache.textproto" in run.stderr
    assert "malformed config params 'BLOCK=32 BUG'" in run.stderr
    assert "1 passed" not in run.stdout  # no test ran


@pytest.mark.parametrize("ini", ["[pytest]\nautotune_cache =\n",
                                 "[pytest]\nautotune_cache =   \n"])
def test_blank_ini_cache_is_an_error(tmp_path, ini):
    plugin_project(tmp_path, ini)
    run = run_plugin(tmp_path)
    assert run.returncode == 4, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if "autotune" in line]
    assert len(lines) == 1 and "ini autotune_cache is blank" in lines[0], \
        run.stderr


@pytest.mark.slow
def test_no_password_through_the_pytest_plugin(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nautotune_cache = cache.textproto\n")
    codec.dump_results([], tmp_path / "cache.textproto")
    runs = []
    for url in HOSTILE_URLS[:8]:
        for env_flags, args in (
                (f"--autotune_remote_cache='{url}", ()),
                (f"--autotune_remote_cache={url}", ()),
                ("", (f"--autotune-cache={url}",))):
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                 *PLUGIN, *args], cwd=tmp_path, capture_output=True,
                env=environment(AUTOTUNE_FLAGS=env_flags), timeout=120)
            runs.append(run)
            assert run.returncode == 4, run.stdout + run.stderr
            assert_no_secret(run.stdout, run.stderr)
    assert b"cannot split into flags" in runs[0].stderr


@pytest.mark.parametrize("update", [False, True])
def test_a_malformed_candidate_is_one_line_and_the_run_stands(project,
                                                              update):
    """A candidate whose config does not decode: the tests pass with the
    fusion's config (the best config decodes), and the summary names the
    file and the entry in one line, without changing the exit status. An
    update measures that fusion again (its entry could not be written
    back) and writes a cache that decodes."""
    cache = project.path / CACHE
    text = cache.read_text()
    first = text.index('candidates { config { params: "BLOCK=16"')
    cache.write_text(text[:first] + text[first:].replace(
        'params: "BLOCK=16"', 'params: "BLOCK"', 1))
    result = run_pytest(project, *PLUGIN,
                        *(["--autotune-update"] if update else []))
    assert result.returncode == 0, result.output
    assert outcomes(result) == {"passed": 4}, result.output
    assert "Traceback" not in result.output
    if update:
        assert "2 hits, 1 tuned" in result.output
        assert "left untouched" not in result.output
        assert "bad entry" not in result.output
        entries = codec.load_results(str(cache), parse_all=True)
        assert len(entries) == 3 and all(e.candidates for e in entries)
        return
    lines = [l for l in result.output.splitlines() if "bad entry" in l]
    assert len(lines) == 1, result.output
    assert re.match(
        r"autotune: bad entry: \S*testdata/kernels\.textproto: entry "
        r"add_one_kernel \[n=20;dtypes=x:float32,y:float32\] on \S+: "
        r"candidate: malformed config params 'BLOCK'", lines[0]), lines[0]


# One config of two gives the right result (BUG=1 adds 1): the winner is
# the same at every tuning, whatever the timings.
ONE_WINNER_KERNELS = KERNELS.replace(
    'CONFIGS = [Config({"BLOCK": 16}, num_warps=1), Config({"BLOCK": 32})]',
    'CONFIGS = [Config({"BLOCK": 32, "BUG": 0}), '
    'Config({"BLOCK": 16, "BUG": 1}, num_warps=1)]').replace(
    "BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, BUG: tl.constexpr):"
).replace("+ 1.0,", "+ 1.0 + BUG,").replace("* 2.0,", "* 2.0 + BUG,")


def test_an_edited_kernel_that_keeps_its_winners_is_re_tuned(pytester):
    """After an edit of add_one_kernel (its two fusions tuned again, one
    config of two right, so the winners cannot change) the summary says
    re-tuned,
    not added and removed."""
    assert ONE_WINNER_KERNELS.count("BUG") == 6
    write_project(pytester.path, kernels=ONE_WINNER_KERNELS)
    result = run_pytest(pytester, *PLUGIN, "--autotune-update")
    assert "3 entries; 3 added, 0 removed, 0 changed" in result.output, \
        result.output
    write_project(pytester.path, kernels=ONE_WINNER_KERNELS.replace(
        "+ 1.0 + BUG,", "+ 1.0 + BUG + 0.0,"))
    result = run_pytest(pytester, *PLUGIN, "--autotune-update",
                        "--autotune-report=report.json")
    assert result.returncode == 0, result.output
    assert (f"autotune: {CACHE}: 3 entries; 0 added, 0 removed, 0 changed; "
            "2 re-tuned (kernel changed), winners unchanged") in \
        result.output, result.output
    assert re.search(r"^  = add_one_kernel \[n=20;.*\(re-tuned: kernel "
                     r"changed \(fingerprint [0-9a-f]+ -> [0-9a-f]+\), "
                     r"winner unchanged\)$", result.output, re.M), \
        result.output
    # The report's changes are the same model, by fusion.
    changes = json.loads((pytester.path / "report.json").read_text())[
        "changes"]
    assert changes["added"] == changes["removed"] == changes["changed"] == []
    assert [(c["kernel"], c["retune_reason"]) for c in changes["retuned"]] \
        == [("add_one_kernel", "kernel changed")] * 2
    assert all(c["old_fingerprint"] != c["fingerprint"]
               for c in changes["retuned"])


def _run_on_a_terminal(project, *args):
    """pytest in a new process whose stdout and stderr are a terminal (a
    pseudo-terminal); returns (exit status, what the terminal showed)."""
    import pty
    import select
    main, side = pty.openpty()
    env = _environment((ROOT,), project)
    env.update(TERM="dumb", COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
         "--color=no", *PLUGIN, *args], cwd=project, env=env,
        stdin=subprocess.DEVNULL, stdout=side, stderr=side)
    os.close(side)
    chunks = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(main, 65536)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode(errors="replace").replace("\r", "")


def test_tuning_progress_shows_on_a_terminal_and_not_under_q(pytester):
    """pytest captures the tests' stderr: the tuning lines reach a terminal
    through pytest's own reporter (by default), and -q keeps them out."""
    write_project(pytester.path)
    code, shown = _run_on_a_terminal(pytester.path, "--autotune-update")
    assert code == 0, shown
    starts = re.findall(r"^autotune: tuning (\w+) \[n=(\d+);", shown, re.M)
    ends = re.findall(r"^autotune: tuned (\w+) \[n=\d+;.*: winner BLOCK=",
                      shown, re.M)
    assert sorted(starts) == [("add_one_kernel", "20"),
                              ("add_one_kernel", "40"),
                              ("double_kernel", "20")], shown
    assert len(ends) == 3, shown
    # The progress line of the tests goes on after them.
    assert re.search(r"^test_kernels\.py \.", shown, re.M), shown
    (pytester.path / CACHE).unlink()
    code, shown = _run_on_a_terminal(pytester.path, "--autotune-update", "-q")
    assert code == 0, shown
    assert "autotune: tuning" not in shown and "autotune: tuned" not in \
        shown, shown


def test_the_pytest_extra_installs_pytest_and_the_docs_say_so():
    """`pip install rules_autotune` alone has no pytest: the [pytest]
    extra brings one the plugin supports, and getting started says how to
    try it without a GPU or the CUDA wheels."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert not any(d.startswith("pytest") for d in project["dependencies"])
    extra = project["optional-dependencies"]["pytest"]
    assert extra == ["pytest>=8"]
    assert int(pytest.__version__.split(".")[0]) >= 8
    # One install line, the same in the README and getting started, that
    # a CPU user can copy: torch's CPU build first, then the package with
    # every extra a newcomer needs (each one pyproject.toml declares).
    lines = []
    for page in ("README.md", os.path.join("docs", "getting-started.md")):
        with open(os.path.join(ROOT, page)) as f:
            lines.append([line for line in f.read().splitlines()
                          if line.startswith("pip install ")])
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    torch_cpu, package = lines[0][0].split(" && ")
    assert torch_cpu == "pip install torch --index-url " \
        "https://download.pytorch.org/whl/cpu"
    extras = re.fullmatch(r"pip install '/path/to/rules_autotune\[(.*)\]'",
                          package).group(1).split(",")
    assert extras == ["pytest", "report"]
    assert set(extras) <= set(project["optional-dependencies"])


def test_configs_removed_and_added_as_the_plugin_reports_them(project):
    """A winner deleted from the list is stale, named with its config; a
    config added keeps the hits and is counted; an update measures it and
    writes its times into the cache, and the next update has nothing left
    to measure."""
    cache = project.path / CACHE
    tuned = {e.key.kernel: e.best for e in codec.load_results(str(cache))}
    winner = tuned["add_one_kernel"].kwargs["BLOCK"]
    other = 48 - winner  # 16 <-> 32
    # add_one keeps only the loser and gains 64; double keeps both.
    (project.path / "kernels.py").write_text(textwrap.dedent(KERNELS).replace(
        "@autotune.autotune(configs=CONFIGS, key=[\"n\"])\n@triton.jit\n"
        "def add_one_kernel",
        f"@autotune.autotune(configs=[Config({{'BLOCK': {other}}}), "
        "Config({'BLOCK': 64})], key=[\"n\"])\n@triton.jit\n"
        "def add_one_kernel", 1))
    # (only add_one's tests: the project's statistics test expects no
    # tuning in load mode)
    result = run_pytest(project, *PLUGIN, "-k", "add_one")
    assert result.returncode == 0, result.output
    assert ("stale: add_one_kernel [n=20;dtypes=x:float32,y:float32] on "
            f"cpu/triton-interpreter/triton-{triton_version()}: config no "
            f"longer offered (BLOCK={winner} ") in result.output
    # The update re-tunes add_one among what it offers now.
    result = run_pytest(project, *PLUGIN, "--autotune-update")
    assert result.returncode == 0, result.output
    # double gains a config: its hits stand, the new config is counted.
    (project.path / "kernels.py").write_text(
        (project.path / "kernels.py").read_text().replace(
            "CONFIGS = [Config({\"BLOCK\": 16}, num_warps=1), "
            "Config({\"BLOCK\": 32})]",
            "CONFIGS = [Config({\"BLOCK\": 16}, num_warps=1), "
            "Config({\"BLOCK\": 32}), Config({\"BLOCK\": 128})]"))
    result = run_pytest(project, *PLUGIN)
    assert result.returncode == 0, result.output
    assert "autotune: 1 offered config(s) never measured" in result.output
    before = cache.read_bytes()
    result = run_pytest(project, *PLUGIN, "--autotune-update")
    assert result.returncode == 0, result.output
    assert cache.read_bytes() != before
    double = [e for e in codec.load_results(str(cache), parse_all=True)
              if e.key.kernel == "double_kernel"]
    assert all(Config({"BLOCK": 128}) in {c.config for c in e.candidates}
               for e in double)
    result = run_pytest(project, *PLUGIN, "--autotune-update")
    assert "left untouched (no change)" in result.output
    assert "0 candidate benchmarks" in result.output


def triton_version():
    import triton
    return triton.__version__


@triton.jit
def _another_axpb(x, y, n, alpha, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 3.0, mask=offs < n)


def test_a_miss_beside_another_kernel_of_that_name_is_not_a_source_change():
    # Two functions decorated under one name (two modules): the cache holds
    # the first one's fusion; the second's miss of it is no source change.
    from autotune import pytest_plugin
    import tiny_kernels as tk
    first = tk.make_tuner(tk.GOOD)
    second = autotune.tune(_another_axpb, tk.GOOD, key=["n"],
                           name="axpb_kernel")
    assert first.fingerprint != second.fingerprint
    cached = make_entries(1)[0]
    cached = cached.replace(key=cached.key._replace(
        kernel="axpb_kernel", fingerprint=first.fingerprint))
    miss = cached.key._replace(fingerprint=second.fingerprint)
    status, reason = pytest_plugin.classify_miss(miss, [cached])
    assert status == "missing", reason
    assert "source changed" not in reason
    assert "another kernel named axpb_kernel" in reason
    assert first.fingerprint in reason and second.fingerprint in reason
    # A cached fingerprint no decorated kernel has: this kernel, edited.
    edited = cached.key._replace(fingerprint="0" * 16)
    status, reason = pytest_plugin.classify_miss(
        miss, [cached.replace(key=edited)])
    assert status == "stale" and "its source changed" in reason


def test_the_plugin_sets_the_triton_variables_the_bazel_macro_sets():
    from autotune import pytest_plugin
    with open(os.path.join(ROOT, "rules", "private",
                           "gpu_autotuned_test.bzl")) as f:
        macro = re.search(r"^COMPILE_TRITON_ENV = (\{.*\})$", f.read(),
                          re.M).group(1)
    assert pytest_plugin.TRITON_ENV == json.loads(macro)
