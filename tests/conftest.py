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
    autotune.runtime._SESSION = None
