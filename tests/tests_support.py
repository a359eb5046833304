"""Helpers shared by tests."""
import contextlib
import errno
import os
import shutil
import stat
import subprocess
import textwrap
import urllib.parse

import pytest

from autotune import codec
from autotune.cli import cache_tool
from autotune.records import CacheKey, Candidate, Entry, Provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BAZEL = os.environ.get("BAZEL", "bazel")
# The tests that run a real Bazel: skipped where none is installed, or when
# AUTOTUNE_SKIP_BAZEL_TESTS=1 asks for the quick set.
needs_bazel = pytest.mark.skipif(
    os.environ.get("AUTOTUNE_SKIP_BAZEL_TESTS") == "1"
    or shutil.which(BAZEL) is None, reason="bazel is not installed")


def entry_for(config, signature="n=1;dtypes=x:float32", device="cpu/test",
              kernel="axpb_kernel", run_time_us=10.0):
    return Entry(CacheKey(device, kernel, "00ff00ff00ff00ff", signature),
                 config, run_time_us, [Candidate(config, run_time_us)],
                 Provenance(triton_version="3.9.0", tuner="exhaustive"))


def tool(*argv):
    """The cache tool's exit status for these arguments, in this process."""
    return cache_tool.main([str(a) for a in argv])


def one_line_error(capsys, *needles):
    """The one line a command wrote to stderr (no traceback), holding
    every needle."""
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert str(needle) in err, err
    return err


def good_file(tmp_path, ext=".textproto", n=3):
    from test_results_io import make_entries  # it imports this module
    path = tmp_path / ("good" + ext)
    codec.dump_results(make_entries(n), path)
    return path


def malformed_cache(tmp_path):
    """A text cache whose first best config has a malformed params line."""
    from test_results_io import make_entries  # it imports this module
    text = codec.encode(make_entries(2), "x.textproto").decode()
    line = text.split("\n  best { ", 1)[1].split("\n", 1)[0]
    bad = text.replace("  best { " + line,
                       '  best { params: "BLOCK=32 BUG" num_warps: 4 '
                       'num_stages: 2 }', 1)
    path = tmp_path / "bad.textproto"
    path.write_text(bad)
    return path


# -- full disks, special files, bounded memory --------------------------------

def no_space(monkeypatch):
    """Every file write that reaches the disk fails as on a full disk."""
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)


@contextlib.contextmanager
def tiny_tmpfs(path):
    """A 64 KiB tmpfs at `path`, filled up; skips unless it can mount."""
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
            capture_output=True).returncode != 0:
        pytest.skip("needs root and mount")
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 512)
        os.close(fd)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def mknod_copy(tmp_path, name, major, minor):
    """A character device like /dev/null (1, 3) or /dev/full (1, 7) in
    tmp_path, so that a regression replaces the copy, not the machine's."""
    path = tmp_path / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except (PermissionError, OSError):
        pytest.skip("needs root (mknod)")
    return path


def is_char_device(path):
    return stat.S_ISCHR(os.lstat(path).st_mode)


def limited_memory(extra=2 << 30):
    """For a child that, were a read unbounded, would fill the memory: its
    address space is capped at what it has plus `extra` (set after its
    imports, which map a lot)."""
    return textwrap.dedent(f"""
        import os, resource
        _vm = int(open("/proc/self/statm").read().split()[0]) * \\
            os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (_vm + {extra},) * 2)
    """)


def environment(**extra):
    """The environment of a child Python that imports the package and the
    tests' helpers, free of the caller's autotune and pytest settings."""
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    for name in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
        env.pop(name, None)
    env.update(extra)
    return env


# -- passwords -------------------------------------------------------------

SECRET = "Sekr3tPw"
# Every shape a password has been seen to leak through.
HOSTILE_URLS = [
    f"redis://h:1/0?password={SECRET}",
    f"redis://h:1/0?prefix=team&password={SECRET}",
    f"redis://bob:{SECRET}/cd@host:6379/0",
    f"redis://bob:{SECRET}@x@host:6379/0",
    f"redis://bob:ab:{SECRET}@host:6379/0",
    f"redis://:{SECRET}@host/0",
    f"redis://bob:{urllib.parse.quote(SECRET + '/@:')}@host/0",
    f"rediss://bob:{SECRET}?x@host/0",
    f"redis://bob:{SECRET}#@host/0",
    f"redis://h:1/0#{SECRET}",
    f"redis://h:1/0?{SECRET}",
    f"redis://bob:{SECRET}",
    f"redis://bob:{SECRET}/0",
    f"redis:bob:{SECRET}@host/0",
]


def assert_no_secret(*texts):
    for text in texts:
        text = text if isinstance(text, str) else text.decode(
            "utf-8", "replace")
        for form in (SECRET, SECRET[:5], urllib.parse.quote(SECRET)):
            assert form not in text, text


def copy_of_smoke_workspace(base):
    """A copy of this repository in `base` and, inside it, e2e/smoke (which
    reaches the copy as ../..: its local_repository and
    local_path_override), with the offline Bazel overrides written for
    it. Returns (repository copy, workspace)."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import run_example_suite
    repo = str(base)
    run_example_suite.copy_workspace(repo)
    ws = os.path.join(repo, "e2e", "smoke")
    subprocess.run(["bash", os.path.join(repo, "tools", "bazel_offline",
                                         "configure.sh"), ws],
                   check=True, capture_output=True)
    return repo, ws


def write_package(ws, package, files, executables=()):
    """A package of its own in a workspace copy: {file name: text}."""
    folder = os.path.join(ws, package)
    os.makedirs(folder)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    for name in executables:
        os.chmod(os.path.join(folder, name), 0o755)
    return folder


def process_alive(pid):
    """Whether `pid` runs (a zombie, whose files are closed, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
