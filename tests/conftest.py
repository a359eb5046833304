import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests configure sessions explicitly; a stray AUTOTUNE_FLAGS from the
# caller's shell must not leak into them.
os.environ.pop("AUTOTUNE_FLAGS", None)

import pytest  # noqa: E402

import autotune  # noqa: E402


@pytest.fixture
def session_factory(tmp_path):
    """Starts a fresh autotune session with the given options."""
    def make(**options):
        return autotune.configure(**options)
    yield make
    autotune.runtime.session._SESSION = None


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


def pytest_configure(config):
    for name, text in (("slow", "takes more than ~10 s"),
                       ("bazel", "runs bazel"),
                       ("redis", "starts redis-server")):
        config.addinivalue_line("markers", f"{name}: {text}")
