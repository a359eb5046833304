"""Results files on disk (autotune/codec/files.py): the one atomic writer
(symbolic links, the umask, special files never replaced), reads bounded
in size, and values checked at load. The formats themselves are
tests/test_results_io.py's."""
import math
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from autotune import codec
from autotune.cache.tiers import PerFusionDirectory
from autotune.errors import AutotuneError, CacheFileError

import tiny_kernels as tk
from test_results_io import make_entries
from tests_support import (ROOT, entry_for, environment, good_file,
                           is_char_device, limited_memory, mknod_copy,
                           one_line_error, tool)


# -- the writer: symbolic links and the umask -----------------------------

def test_dump_and_merge_write_through_symlinks(tmp_path):
    target = tmp_path / "real.textproto"
    link = tmp_path / "link.textproto"
    codec.dump_results(make_entries(1), target)
    link.symlink_to(target)
    codec.dump_results(make_entries(2), link)
    assert link.is_symlink() and len(codec.load_results(target)) == 2
    source = tmp_path / "src.textproto"
    codec.dump_results(make_entries(4), source)
    assert tool("merge", source, "-o", link) == 0
    assert link.is_symlink() and len(codec.load_results(target)) == 4


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        codec.dump_results(make_entries(1), tmp_path / "c.pb")
        PerFusionDirectory(tmp_path).store(entry_for(tk.GOOD[0]))
    finally:
        os.umask(old)
    modes = {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {0o666 & ~umask}




def test_a_file_that_holds_the_bytes_already_is_left_as_it_was(tmp_path):
    path = tmp_path / "c.textproto"
    entries = make_entries(5)
    assert codec.dump_results(entries, path) is True
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = os.stat(path)
    assert codec.dump_results(list(reversed(entries)), path) is False
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino,
                                                 before.st_mtime_ns)
    assert codec.dump_results(entries[:4], path) is True
    assert codec.load_results(path) == codec.sort_entries(entries[:4])


@pytest.mark.parametrize("chunks, expected", [
    ([b"hello", b" there"], True),      # differs after an equal start
    ([b"hello"], True),                 # a prefix of what the file holds
    ([b"hello", b" world", b"!"], True),  # longer
    ([b"hel", b"lo wo", b"rld", b""], False),
    (b"hello world", False)])
def test_the_comparison_runs_as_the_chunks_come(tmp_path, chunks, expected):
    path = tmp_path / "c.pb"
    path.write_bytes(b"hello world")
    content = b"".join(chunks) if isinstance(chunks, list) else chunks
    data = iter(chunks) if isinstance(chunks, list) else chunks
    assert codec.atomic_write(path, data) is expected
    assert path.read_bytes() == content
    assert os.listdir(tmp_path) == ["c.pb"]  # no temporary file left


def test_an_existing_file_keeps_its_mode_through_a_link(tmp_path):
    target = tmp_path / "real.textproto"
    link = tmp_path / "link.textproto"
    codec.dump_results(make_entries(1), target)
    os.chmod(target, 0o640)
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        assert codec.dump_results(make_entries(2), link) is True
    finally:
        os.umask(old)
    assert link.is_symlink()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert len(codec.load_results(target)) == 2


# -- the writer never replaces a special file -----------------------------

def test_convert_into_a_fifo_writes_through(tmp_path):
    good = good_file(tmp_path)
    fifo = tmp_path / "out.textproto"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(
        fifo.read_bytes()), daemon=True)
    reader.start()
    assert tool("convert", good, fifo) == 0
    reader.join(30)
    assert received == [good.read_bytes()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "good.textproto", "out.textproto"]  # no temporary file left


@pytest.mark.parametrize("command", ["convert", "merge", "prune"])
def test_output_to_a_null_device_discards(tmp_path, command):
    good = good_file(tmp_path)
    null = mknod_copy(tmp_path, "null", 1, 3)
    argv = {"convert": ["convert", good, null],
            "merge": ["merge", good, "-o", null],
            "prune": ["prune", good, "-o", null, "--device", "x"]}[command]
    assert tool(*argv) == 0
    assert is_char_device(null)
    # Only once a copy survived: the machine's own /dev/null.
    argv[-1] = "/dev/null"
    assert tool(*argv) == 0
    assert is_char_device("/dev/null")


def test_output_to_a_full_device_is_one_line_exit_2(tmp_path, capsys):
    good = good_file(tmp_path)
    full = mknod_copy(tmp_path, "full", 1, 7)
    assert tool("convert", good, full) == 2
    one_line_error(capsys, f"{full}: cannot write: No space left on device")
    assert is_char_device(full)
    assert tool("convert", good, "/dev/full") == 2
    one_line_error(capsys, "/dev/full: cannot write: No space left")
    assert is_char_device("/dev/full")


def test_symlink_loop_as_output_is_one_line_exit_2(tmp_path, capsys):
    good = good_file(tmp_path)
    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    a.symlink_to(b)
    b.symlink_to(a)
    assert tool("convert", good, a) == 2
    one_line_error(capsys, f"{a}: is a symbolic link loop")
    assert a.is_symlink() and b.is_symlink()


def test_a_socket_as_output_is_refused(tmp_path, capsys):
    import socket
    good = good_file(tmp_path)
    path = tmp_path / "sock.textproto"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert tool("convert", good, path) == 2
        one_line_error(capsys, "is a socket, not a regular file; not "
                       "replaced")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)



# -- reads are bounded ----------------------------------------------------

def run_tool(argv, **options):
    """The cache tool in a child process with capped memory."""
    script = ("import sys\nfrom autotune.cli import cache_tool\n"
              + limited_memory() + "sys.exit(cache_tool.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", script] + [
        str(a) for a in argv], capture_output=True, text=True, cwd=ROOT,
        env=environment(), timeout=60, **options)


def test_a_pipe_on_stdin_still_works(tmp_path):
    good = good_file(tmp_path, ".pb")
    with open(good, "rb") as f:
        run = run_tool(["show", "-"], stdin=f)
    assert run.returncode == 0, run.stderr
    assert "-: 3 entries" in run.stdout
    # `git show HEAD:x | autotune_cache show -` is a pipe, not a file.
    run = subprocess.run(f"cat {good} | {sys.executable} -m "
                         "autotune.cli.cache_tool show -", shell=True,
                         capture_output=True, text=True, cwd=ROOT,
                         env=environment(), timeout=60)
    assert run.returncode == 0 and "-: 3 entries" in run.stdout, run.stderr


@pytest.mark.parametrize("argv", [["show", "/dev/zero"],
                                  ["verify", "/dev/full"],
                                  ["diff", "/dev/zero", "{good}"],
                                  ["show", "-"]])
def test_endless_devices_are_one_line_exit_2(tmp_path, argv):
    good = good_file(tmp_path)
    with open("/dev/zero", "rb") as zero:
        run = run_tool([a.format(good=good) for a in argv], stdin=zero)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "starts with a NUL byte" in lines[0], lines
    assert lines[0].startswith("autotune_cache: error: ")


def test_load_from_an_endless_device():
    script = ("import autotune\n" + limited_memory() + textwrap.dedent("""
        try:
            autotune.configure(load_autotune_results_from=["/dev/zero"])
        except autotune.AutotuneError as e:
            print(e)
    """))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=environment(), timeout=120)
    assert run.stdout.strip() == (
        "cannot load autotune results: /dev/zero: not a cache file (a "
        "character device that starts with a NUL byte)"), run.stderr


def test_a_cache_over_the_size_limit(tmp_path, capsys, session_factory):
    good = good_file(tmp_path)
    size = good.stat().st_size
    assert tool("show", good, "--max_cache_bytes", size - 1) == 2
    one_line_error(capsys, f"{good}: {size} bytes, over the limit of "
                   f"{size - 1} bytes")
    assert tool("show", good, "--max_cache_bytes", size) == 0
    capsys.readouterr()
    with pytest.raises(AutotuneError, match=f"{size} bytes, over the limit"):
        session_factory(load_autotune_results_from=[str(good)],
                        autotune_max_cache_bytes=size - 1)
    run = run_tool(["show", "-", "--max_cache_bytes=100"],
                   input=good.read_text())  # a pipe: no size of its own
    assert run.returncode == 2
    assert "-: more than 100 bytes, over the limit of 100 bytes" in run.stderr


def test_default_size_limit_is_far_above_a_million_entries():
    per_entry = len(codec.encode(make_entries(100), "x.textproto")) / 100
    assert codec.MAX_CACHE_BYTES > 5 * 1_000_000 * per_entry



# -- values checked at load -----------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
@pytest.mark.parametrize("field", ["best", "candidate", "spread"])
@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_unusable_times_are_rejected(tmp_path, capsys, value, field, ext):
    entries = make_entries(3)
    entry = entries[1]
    if field == "best":
        entries[1] = entry.replace(run_time_us=value)
    elif field == "candidate":
        cands = list(entry.candidates)
        cands[0] = cands[0]._replace(run_time_us=value)
        entries[1] = entry.replace(candidates=cands)
    else:
        entries[1] = entry.replace(provenance=entry.provenance._replace(
            timing_spread=value))
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, path)
    assert tool("verify", path) == 2
    assert "finite numbers >= 0" in capsys.readouterr().err
    # show reads best configs and provenance (not candidates).
    assert tool("show", "--json", "--entries", path) == (
        0 if field == "candidate" else 2)
    if field == "best":
        with pytest.raises(CacheFileError, match="finite"):
            [e.best for e in codec.load_results(path)]


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
@pytest.mark.parametrize("field", ["tuning_seconds", "timing_spread"])
@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_bad_durations_are_rejected_at_load(tmp_path, capsys, value, field,
                                            ext):
    entries = make_entries(3)
    entry = entries[1]
    entries[1] = entry.replace(provenance=entry.provenance._replace(
        **{field: value}))
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, path)
    named = f"entry for kernel {entry.key.kernel} [{entry.key.signature}]"
    with pytest.raises(CacheFileError, match=f"{field} is "):
        codec.load_results(path)
    with pytest.raises(CacheFileError) as info:
        codec.load_results(path)
    assert named in str(info.value)
    out = tmp_path / "out.textproto"
    assert tool("diff", path, path) == 2
    one_line_error(capsys, named, field)
    assert tool("merge", path, "-o", out) == 2
    assert tool("convert", path, out) == 2
    assert not out.exists()


@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_usable_durations_still_load(tmp_path, ext):
    entries = make_entries(3)
    for i, value in enumerate([-0.0, 1e-05, 1e300]):
        entries[i] = entries[i].replace(
            provenance=entries[i].provenance._replace(tuning_seconds=value))
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, path)
    assert {e.key: str(e.provenance.tuning_seconds)
            for e in codec.load_results(path)} == {
        e.key: str(e.provenance.tuning_seconds) for e in entries}



@pytest.mark.parametrize("part", ["best", "candidate"])
def test_a_malformed_binary_entry_without_a_name_is_named_by_its_index(
        tmp_path, capsys, part):
    from autotune.proto import autotune_results_pb2 as pb
    path = tmp_path / "c.pb"
    codec.dump_results(make_entries(3), path)
    results = pb.AutotuneResults()
    results.ParseFromString(path.read_bytes())
    results.ClearField("crc32")
    broken = results.entries[1]
    broken.ClearField("kernel")
    broken.ClearField("signature")
    config = broken.best if part == "best" else broken.candidates[0].config
    config.params = "BLOCK"
    path.write_bytes(results.SerializeToString())
    assert tool("show", "--candidates", path) == 2
    err = capsys.readouterr().err
    assert "entry for kernel  []" not in err
    assert f"{path}: entry 2 of 3 (no kernel name): " in err, err
    assert "malformed config params 'BLOCK'" in err


def test_a_malformed_text_candidate_names_its_entry(tmp_path, capsys):
    # The candidate lines of a text entry are decoded alone, when used:
    # the error still names the entry they belong to.
    entries = make_entries(3)
    path = tmp_path / "c.textproto"
    codec.dump_results(entries, path)
    text = path.read_text()
    at = text.index('candidates { config { params: "') + \
        len('candidates { config { params: "')
    path.write_text(text[:at] + "BLOCK" + text[text.index('"', at):])
    first = sorted(e.key for e in entries)[0]
    assert tool("show", "--candidates", path) == 2
    err = capsys.readouterr().err
    assert f"{path}: entry for kernel {first.kernel} [{first.signature}]: " \
        "candidate: malformed config params 'BLOCK'" in err, err
