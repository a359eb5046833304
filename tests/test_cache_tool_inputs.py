"""`autotune_cache rekey` on inputs it cannot rewrite, and kernel modules
that stop their own import: one line each, nothing written. Real FIFOs,
real process substitution (bash), real imports in a fresh process."""
import os
import shutil
import subprocess
import sys

import pytest

from autotune import codec
from autotune.records import CacheKey, Candidate, Entry, Provenance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _old_cache(tmp_path):
    """A cache whose one entry has the previous fingerprint scheme's key
    (rekey would rewrite it), and a kernel module that knows its kernel."""
    import tiny_kernels
    tuner = tiny_kernels.AXPB
    key = CacheKey("cpu/test", tuner.name, tuner.source_text_fingerprint,
                   "n=40")
    best = tiny_kernels.GOOD[0]
    cache = tmp_path / "old.textproto"
    codec.dump_results([Entry(key, best, 1.0, [Candidate(best, 1.0)],
                              Provenance())], str(cache))
    (tmp_path / "rk_kernels.py").write_text(
        "from tiny_kernels import AXPB  # noqa: F401\n")
    return cache


def _run(tmp_path, command, timeout=120):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [ROOT, HERE, str(tmp_path)]))
    try:
        return subprocess.run(command, cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{command} hung") from None


def _tool(*args):
    return [sys.executable, "-m", "autotune.cli.cache_tool", *args]


def _one_error_line(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune_cache: error: "),\
        proc.stderr
    return lines[0]


def test_rekey_of_a_fifo_is_one_line_and_the_fifo_stays(tmp_path):
    cache = _old_cache(tmp_path)
    fifo = tmp_path / "cache.textproto"
    os.mkfifo(fifo)
    # Something feeds the FIFO, as a user's pipeline would.
    feeder = subprocess.Popen(["sh", "-c", f"cat {cache} > {fifo}"])
    try:
        proc = _run(tmp_path, _tool("rekey", str(fifo), "--kernel_module",
                                    "rk_kernels"), timeout=60)
    finally:
        feeder.kill()
        feeder.wait()
    line = _one_error_line(proc)
    assert f"{fifo}: a pipe or other special file, not a regular file" \
        in line and "nothing written" in line, line
    assert proc.stdout == ""
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_rekey_of_a_process_substitution_is_one_line(tmp_path):
    cache = _old_cache(tmp_path)
    def command(*flags):
        return " ".join(_tool("rekey", *flags, f"<(cat {cache})",
                              "--kernel_module", "rk_kernels"))
    proc = _run(tmp_path, ["bash", "-c", command()])
    line = _one_error_line(proc)
    assert "/dev/fd/" in line and "not a regular file" in line, line
    assert "re-keyed" not in proc.stdout
    # --dry-run writes nothing: it may read a pipe.
    proc = _run(tmp_path, ["bash", "-c", command("--dry-run")])
    assert proc.returncode == 0, proc.stderr
    assert "1 re-keyed, 0 left (dry run, nothing written)" in proc.stdout


def test_rekey_of_stdin_is_one_line_and_writes_no_file_named_dash(tmp_path):
    cache = _old_cache(tmp_path)

    def rekey(*flags):
        return subprocess.run(
            _tool("rekey", *flags, "-", "--kernel_module", "rk_kernels"),
            cwd=tmp_path, stdin=open(cache), text=True, capture_output=True,
            timeout=120, env=dict(os.environ, TRITON_INTERPRET="1",
                                  PYTHONPATH=os.pathsep.join(
                                      [ROOT, HERE, str(tmp_path)])))
    line = _one_error_line(rekey())
    assert "-: standard input" in line and "nothing written" in line, line
    assert not (tmp_path / "-").exists()
    # --dry-run writes nothing: it may read standard input.
    proc = rekey("--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "1 re-keyed, 0 left (dry run, nothing written)" in proc.stdout
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("body,shown", [
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    ("raise KeyboardInterrupt('stop \\x1b[2J here')\n",
     "KeyboardInterrupt: stop \\x1b[2J here"),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
])
def test_a_kernel_module_that_stops_its_import_is_one_line(tmp_path, body,
                                                           shown):
    cache = _old_cache(tmp_path)
    (tmp_path / "stopping_kernels.py").write_text(body)
    before = cache.read_bytes()
    proc = _run(tmp_path, _tool("rekey", str(cache), "--kernel_module",
                                "stopping_kernels"))
    line = _one_error_line(proc)
    assert line == ("autotune_cache: error: --kernel_module=stopping_kernels:"
                    f" cannot import: {shown}"), line
    assert "\x1b" not in proc.stderr
    assert cache.read_bytes() == before
