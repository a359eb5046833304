"""Hardening, third pass: no password in any message, special files never
replaced, bounded reads, and the rough edges found with them. Each test
names what it guards against."""
import json
import math
import os
import stat
import subprocess
import sys
import textwrap
import threading
import urllib.parse

import pytest

import autotune
from autotune import codec, flags
from autotune.cache.tiers import PerFusionDirectory
from autotune.cli import cache_tool
from autotune.errors import AutotuneError, CacheFileError
from autotune.runtime import session as runtime_session

import tiny_kernels as tk
from test_results_io import make_entries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = ("-p", "pytest_autotune")


def tool(*argv):
    return cache_tool.main([str(a) for a in argv])


def one_line_error(capsys, *needles):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert str(needle) in err, err
    return err


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


def run_tool(argv, **options):
    """The cache tool in a child process with capped memory."""
    script = ("import sys\nfrom autotune.cli import cache_tool\n"
              + limited_memory() + "sys.exit(cache_tool.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", script] + [
        str(a) for a in argv], capture_output=True, text=True, cwd=ROOT,
        env=environment(), timeout=60, **options)


def environment(**extra):
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    for name in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
        env.pop(name, None)
    env.update(extra)
    return env


def good_file(tmp_path, ext=".textproto", n=3):
    path = tmp_path / ("good" + ext)
    codec.dump_results(make_entries(n), path)
    return path


# -- 1. a password never reaches a message --------------------------------

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


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_no_password_in_runtime_messages(url, session_factory, capsys):
    with pytest.raises(AutotuneError) as info:
        session_factory(autotune_remote_cache=url)
    assert "--autotune_remote_cache" in str(info.value)
    captured = capsys.readouterr()
    assert_no_secret(str(info.value), captured.out, captured.err)


@pytest.mark.parametrize("value", [
    "--autotune_remote_cache='{url}",                    # unbalanced '
    '--autotune_remote_cache="{url} --autotune_workers=2',  # unbalanced "
    "--autotune_remote_cache={url}",
    "--autotune_remote_cache='{url}' --autotune_remote_cache_timeout_s=nan",
    "--autotune_remote_cache=redis://bob:{secret} word@h/0",  # a space
    "--autotune_remote_cache redis://bob:{secret}@h/0",
    "--autotune_remote_cache_timeout_s=redis://bob:{secret}@h/0",
])
def test_no_password_in_autotune_flags_errors(value, monkeypatch, capsys):
    for url in HOSTILE_URLS[:6]:
        monkeypatch.setenv("AUTOTUNE_FLAGS",
                           value.format(url=url, secret=SECRET))
        monkeypatch.setattr(runtime_session, "_SESSION", None)
        with pytest.raises(AutotuneError) as info:
            runtime_session.session()
        captured = capsys.readouterr()
        assert_no_secret(str(info.value), captured.out, captured.err)
    monkeypatch.setattr(runtime_session, "_SESSION", None)


def test_unbalanced_quote_names_the_flags_not_the_value():
    with pytest.raises(flags.AutotuneFlagsError) as info:
        flags.parse(f"--autotune_workers=2 --autotune_remote_cache='"
                    f"redis://bob:{SECRET}@h/0")
    assert str(info.value) == (
        "AUTOTUNE_FLAGS: cannot split into flags (No closing quotation; "
        "check the quotes); it names --autotune_workers, "
        "--autotune_remote_cache")


def test_redacted_url_keeps_what_helps():
    redact = autotune.cache.remote.redact
    assert redact(f"redis://bob:{SECRET}/cd@host:6379/0") == \
        "redis://***@host:6379/0"
    assert redact(f"redis://h:1/0?prefix=team&password={SECRET}") == \
        "redis://h:1/0?prefix=team&password=***"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    assert redact("redis://[::1]:6380/0") == "redis://[::1]:6380/0"


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_no_password_in_tool_output(url, tmp_path, capsys):
    good = good_file(tmp_path)
    out = tmp_path / "out.textproto"
    for argv in (["stats", url], ["show", "--json", url], ["diff", good, url],
                 ["merge", good, url, "-o", out], ["verify", url],
                 ["convert", good, url], ["push", good, "--to", url],
                 ["pull", "--from", url, "-o", out]):
        assert tool(*argv) == 2, argv
        captured = capsys.readouterr()
        assert_no_secret(captured.out, captured.err)
    assert not out.exists()


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


@pytest.mark.redis
def test_no_password_in_the_report_or_summary(tmp_path, monkeypatch,
                                              capsys):
    from redis_support import RedisServer
    srv = RedisServer(password="the-right-one")
    try:
        monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_PASSWORD", SECRET)
        report = tmp_path / "report.json"
        url = srv.url.replace("redis://", "redis://bob@")
        sess = autotune.configure(autotune_remote_cache=url,
                                  autotune_report_to=str(report))
        tk.run(tk.make_tuner(), 40)
        sess.finish()
        data = report.read_bytes()
        assert json.loads(data)["remote"]["switched_off"]
        assert "bob@127.0.0.1" in json.loads(data)["remote"]["url"]
        captured = capsys.readouterr()
        assert "remote cache" in captured.err
        assert_no_secret(data, captured.out, captured.err)
        # The tool's messages for the same server.
        assert tool("stats", url) == 2
        captured = capsys.readouterr()
        assert "bob@127.0.0.1" in captured.err
        assert_no_secret(captured.out, captured.err)
    finally:
        runtime_session._SESSION = None
        srv.stop()


def test_the_library_logger_redacts_any_url(capsys):
    autotune.log.get("test").warning(
        "autotune: about redis://bob:%s@h/0", SECRET)
    err = capsys.readouterr().err
    assert "redis://***@h/0" in err
    assert_no_secret(err)


# -- 2. writing never replaces a special file --------------------------------

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


def test_report_and_dump_to_null_devices(tmp_path, session_factory):
    null = mknod_copy(tmp_path, "null", 1, 3)
    sess = session_factory(autotune_report_to=str(null),
                           dump_autotune_results_to=str(null))
    tk.run(tk.make_tuner(), 40)
    sess.finish()
    assert is_char_device(null)


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


# -- 3. reads are bounded --------------------------------------------------

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


def test_dump_to_an_endless_device_does_not_read_it(tmp_path):
    full = mknod_copy(tmp_path, "full", 1, 7)
    script = "import autotune, tiny_kernels as tk\n" + limited_memory() + \
        textwrap.dedent(f"""
        autotune.configure(dump_autotune_results_to={str(full)!r})
        tk.run(tk.make_tuner(), 40)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=environment(), timeout=120)
    assert run.returncode == 1, run.stderr
    assert f"autotune: error at exit: {full}: cannot write: No space " \
        "left on device" in run.stderr
    assert is_char_device(full)


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


# -- 4. rough edges ----------------------------------------------------------

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


@pytest.mark.parametrize("argv", [["merge", "{bad}", "-o", "{out}"],
                                  ["prune", "{bad}", "-o", "{out}"],
                                  ["convert", "{bad}", "{out}"],
                                  ["diff", "{bad}", "{bad}"]])
def test_a_damaged_binary_file_is_never_copied(tmp_path, capsys, argv):
    bad = good_file(tmp_path, ".pb")
    data = bytearray(bad.read_bytes())
    at = data.index(b"3.9.0")  # a provenance string: still parses
    data[at] = ord("4")
    bad.write_bytes(bytes(data))
    assert len(codec.load_results(bad)) == 3  # the runtime skips the check
    out = tmp_path / "out.pb"
    assert tool(*[a.format(bad=bad, out=out) for a in argv]) == 2
    one_line_error(capsys, f"{bad}: checksum mismatch")
    assert not out.exists()


def test_a_fifo_in_a_per_fusion_directory_is_not_opened(tmp_path,
                                                        session_factory,
                                                        capsys):
    sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
    tk.run(tk.make_tuner(), 40)
    (name,) = os.listdir(tmp_path)
    os.unlink(tmp_path / name)
    fifo = tmp_path / name
    os.mkfifo(fifo)

    def writer():  # so that a reader that opens it sees garbage, then EOF
        try:
            with open(fifo, "wb") as f:
                f.write(b"garbage")
        except OSError:
            pass
    feeding = threading.Thread(target=writer, daemon=True)
    feeding.start()
    try:
        sess = session_factory(per_fusion_autotune_cache_dir=str(tmp_path))
        tk.run(tk.make_tuner(), 40)
    finally:
        for path in tmp_path.iterdir():  # let the writer go
            if stat.S_ISFIFO(os.lstat(path).st_mode):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        feeding.join(10)
    assert sess.stats.tuned == 1
    assert "not a regular file" in capsys.readouterr().err
    assert os.path.isfile(tmp_path / name)


def test_dangling_symlink_in_the_per_fusion_directory(tmp_path,
                                                      session_factory,
                                                      capsys):
    directory = tmp_path / "cache"
    directory.mkdir()
    session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    (name,) = os.listdir(directory)
    os.unlink(directory / name)
    os.symlink(tmp_path / "gone", directory / name)
    capsys.readouterr()
    sess = session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    assert sess.stats.tuned == 1
    err = capsys.readouterr().err
    assert err.count("a symbolic link to a file that does not exist; moved "
                     "aside") == 1, err
    assert os.path.isfile(directory / name) and \
        not os.path.islink(directory / name)  # stored this time
    sess = session_factory(per_fusion_autotune_cache_dir=str(directory))
    tk.run(tk.make_tuner(), 40)
    assert (sess.stats.hits, sess.stats.tuned) == (1, 0)
    (key,) = sess.cache.memory
    os.unlink(directory / name)
    os.symlink(tmp_path / "gone", directory / name)
    with pytest.raises(CacheFileError, match="a symbolic link to a file "
                       "that does not exist"):
        PerFusionDirectory(directory, "read").lookup(key)


@pytest.mark.parametrize("flag", ["autotune_remote_cache_timeout_s"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_float_flags_fail_at_parse(flag, value, session_factory):
    with pytest.raises(flags.AutotuneFlagsError, match=flag):
        flags.parse(f"--{flag}={value}")
    with pytest.raises(AutotuneError, match="expected a finite number"):
        session_factory(**{flag: float(value)})


def test_every_float_flag_is_checked_for_finiteness():
    for spec in flags.FLAGS:
        if spec.kind == "float":
            with pytest.raises(flags.AutotuneFlagsError,
                               match="expected a finite number"):
                flags.parse(f"--{spec.name}=nan")


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


def test_perf_model_returning_none_names_kernel_and_argument(
        session_factory):
    session_factory()
    tuned = tk.make_tuner(prune_configs_by={
        "perf_model": lambda **_: None, "top_k": 1})
    with pytest.raises(AutotuneError, match="axpb_kernel: prune_configs_by "
                       "perf_model returned None for BLOCK=16"):
        tk.run(tuned, 40)


@pytest.mark.parametrize("options, message", [
    (dict(prune_configs_by={"perf_model": lambda **_: 1.0, "top_k": 0}),
     "prune_configs_by top_k=0; expected a fraction"),
    (dict(prune_configs_by={"perf_model": lambda **_: 1.0, "top_k": 0.0}),
     "prune_configs_by top_k=0.0"),
    (dict(prune_configs_by={"perf_model": "fast", "top_k": 1}),
     "prune_configs_by perf_model must be callable, got str"),
    (dict(reference=42), "reference= must be callable"),
    (dict(reference=lambda x, y: None), "reference= is called with the "
     "kernel's arguments by name (x, y, n, alpha), but takes no n, alpha"),
    (dict(reference=lambda x, y, n, alpha, expected: None),
     "but requires expected"),
])
def test_bad_decorator_arguments_fail_at_decoration(options, message):
    with pytest.raises(AutotuneError) as info:
        tk.make_tuner(**options)
    assert str(info.value).startswith("axpb_kernel: ")
    assert message in str(info.value)


@pytest.mark.parametrize("reference", [
    lambda x, y, n, alpha: None, lambda **_: None,
    lambda x, y, alpha, **_: None, lambda x, *, y, n, alpha, BLOCK=1: None])
def test_fitting_references_are_accepted(reference):
    tk.make_tuner(reference=reference)


def test_verify_errors_go_to_stderr_with_the_prefix(tmp_path, capsys):
    bad = tmp_path / "bad.textproto"
    bad.write_text("garbage")
    good = good_file(tmp_path)
    assert tool("verify", good, bad) == 2
    captured = capsys.readouterr()
    assert str(bad) not in captured.out
    errors = [line for line in captured.err.splitlines() if str(bad) in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"autotune_cache: error: {bad}: "), captured.err


def test_summary_line_once_when_a_forked_child_exits(tmp_path):
    dump = tmp_path / "dump.textproto"
    report = tmp_path / "report.json"
    script = textwrap.dedent(f"""
        import os, sys
        import autotune, tiny_kernels as tk
        autotune.configure(dump_autotune_results_to={str(dump)!r},
                           autotune_report_to={str(report)!r})
        tk.run(tk.make_tuner(), 40)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a child that dies runs the exit handlers too
        os.waitpid(pid, 0)
        if os.path.exists({str(report)!r}):  # written by the child
            os.unlink({str(report)!r})
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, env=environment(), timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("autotune: 1 fusions on ") == 1, run.stderr
    assert run.stderr.count("autotune: dumped ") == 1, run.stderr
    assert report.exists()  # written by the parent, after the child exited
