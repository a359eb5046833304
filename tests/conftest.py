import atexit
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests configure sessions explicitly; a stray AUTOTUNE_FLAGS from the
# caller's shell must not leak into them.
os.environ.pop("AUTOTUNE_FLAGS", None)
# Nor a runner stamp exported for the shell's Bazel runs: it describes
# that runner's GPU, and the tests run on the interpreter.
os.environ.pop("AUTOTUNE_RUNNER_STAMP", None)

# A private device lock and slot directory for this run: the default one
# (/tmp/rules_autotune-locks-UID) is shared with every other run of this
# user on the machine, and a test waiting there for someone else's tuning would time
# out. Every process the tests start inherits it (pytest-xdist workers
# keep their controller's; the Bazel runs get it through
# tools/run_example_suite.py). A test about sharing a lock sets its own.
LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
OWN_LOCK_DIR_ENV = "RULES_AUTOTUNE_TESTS_LOCK_DIR"


def _private_lock_dir():
    inherited = os.environ.get(OWN_LOCK_DIR_ENV)
    if inherited and os.environ.get(LOCK_DIR_ENV) == inherited and \
            os.path.isdir(inherited):
        return  # a worker of this run: the run's directory
    directory = tempfile.mkdtemp(prefix="rules_autotune-test-locks-")
    os.environ[LOCK_DIR_ENV] = os.environ[OWN_LOCK_DIR_ENV] = directory
    atexit.register(shutil.rmtree, directory, True)


_private_lock_dir()

import pytest  # noqa: E402

import autotune  # noqa: E402


@pytest.fixture
def session_factory(tmp_path):
    """Starts a fresh autotune session with the given options."""
    def make(**options):
        return autotune.configure(**options)
    yield make
    autotune.runtime.session.set_current(None)


# The remote cache tests share these: one real redis-server per test module
# (started only by a module that asks for it), emptied before each test.
@pytest.fixture(scope="module")
def server():
    from redis_support import RedisServer
    srv = RedisServer()
    yield srv
    srv.stop()


@pytest.fixture
def redis_db(server):
    client = server.client()
    client.flushall()
    yield client
    client.close()


# -- markers: `python3 -m pytest -m "not slow" tests` is the fast set ------
#
# bazel: runs a real `bazel test` (minutes); redis: starts a real
# redis-server (through the `server` fixture); slow: more than a few
# seconds here (every bazel test, every pytester project, real processes
# racing). CI runs everything. A new test that takes long is marked in its
# file with @pytest.mark.slow; the lists below mark what measured slow.
BAZEL_MODULES = {"test_bazel_integration.py", "test_e2e_smoke.py"}
SLOW_MODULES = BAZEL_MODULES | {
    "test_pytest_plugin.py", "test_stable_suite.py", "test_concurrency.py",
    "test_compile_check.py", "test_dropin.py"}
SLOW_TESTS = {
    "test_remote_cache.py": ("test_eight_processes_agree_on_one_config_per_key",
                             "test_two_processes_with_separate_directories",
                             "test_runtime_imports_redis_only_when_the_flag",
                             "test_tls_server", "test_server_stopped_mid_run",
                             "test_read_mode_writes_nothing",
                             "test_wrong_password"),
    "test_search.py": ("test_categorical_two_basins", "test_parallel_",
                       "test_returned_config_is_a_local_optimum",
                       "test_seeds_from_a_poor_basin", "test_search_on_recorded",
                       "test_isolated_optimum"),
    "test_gpu_path.py": ("test_gpu_workers_are_pinned",),
    "test_stable_runtime.py": ("test_failed_process_does_not_shrink",),
    "test_results_io.py": ("test_fast_text_reader_agrees_with_text_format",),
    "test_cache_tool.py": ("test_verify_knows_kernels_written_for_triton",
                           "test_every_subcommand_rejects_bad_input"),
    "test_session.py": ("test_failed_dump_at_exit_runs_every_other",),
    "test_package.py": ("test_wheel_",),
}


def pytest_configure(config):
    for name, text in (("slow", "takes more than a few seconds"),
                       ("bazel", "runs a real bazel test"),
                       ("redis", "starts a real redis-server")):
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.path.name
        if module in BAZEL_MODULES:
            item.add_marker(pytest.mark.bazel)
        if module in SLOW_MODULES or any(
                item.name.startswith(prefix)
                for prefix in SLOW_TESTS.get(module, ())):
            item.add_marker(pytest.mark.slow)
        if {"server", "redis_db"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)
