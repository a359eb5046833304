"""The lock directory and the files in it (autotune/host/lock_files.py),
where others may write: nothing in it is trusted. A planted link, hard
link, FIFO or directory is one line and touches nothing; a holder is read
without hanging; the directory is this user's own, absolute and private.
(tests/test_device_lock.py: one tuner per device, with real processes;
tests/test_gpu_slot.py: the slots that share these files.)"""
import os
import subprocess
import sys

import pytest

from autotune.host import device_lock, lock_files

HERE = os.path.dirname(os.path.abspath(__file__))


def _turn(tmp_path, identity="gpu-x"):
    return device_lock.DeviceTurn(identity=identity,
                                  directory=str(tmp_path / "locks"))


def _one_line(error):
    text = str(error)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("victim_exists", [True, False])
def test_a_planted_symlink_is_not_followed(tmp_path, victim_exists):
    """Someone who can write the directory points the lock file at a file
    of the user's (or root's): the lock neither creates nor overwrites
    it."""
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    victim = tmp_path / "victim"
    if victim_exists:
        victim.write_text("keep me\n")
    os.symlink(victim, turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        turn.take()
    text = _one_line(raised.value)
    assert turn.lock.path in text and "a symbolic link" in text, text
    if victim_exists:
        assert victim.read_text() == "keep me\n"
    else:
        assert not victim.exists()
    assert not turn.lock.held


def test_a_hard_link_to_another_file_is_refused(tmp_path):
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.link(victim, turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError, match="2 hard links"):
        turn.take()
    assert victim.read_text() == "keep me\n"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_in_place_of_the_lock_file_is_one_line(
        tmp_path, kind):
    turn = _turn(tmp_path)
    os.makedirs(tmp_path / "locks")
    if kind == "fifo":
        os.mkfifo(turn.lock.path)
    else:
        os.mkdir(turn.lock.path)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        turn.take()
    text = _one_line(raised.value)
    expected = "a FIFO" if kind == "fifo" else "a directory"
    assert f"{expected}, not a regular file" in text, text


def test_the_holder_of_a_fifo_is_read_without_hanging(tmp_path):
    import threading
    fifo = tmp_path / "gpu-x.lock"
    os.mkfifo(fifo)
    found = []
    reader = threading.Thread(
        target=lambda: found.append(lock_files.holder_of(str(fifo))),
        daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "holder_of blocked on a FIFO"
    assert found == [None]


@pytest.mark.parametrize("text", ["\u00b2\n", "\u0663\u0664\n", "12x\n",
                                  "9" * 40 + "\n"])
def test_a_lock_file_that_holds_no_ascii_pid_names_no_holder(tmp_path,
                                                             text):
    path = tmp_path / "gpu-x.lock"
    path.write_text(text, encoding="utf-8")
    assert lock_files.holder_of(str(path)) is None
    path.write_text("4242\n")
    assert lock_files.holder_of(str(path)) == 4242


def test_a_long_device_name_makes_a_bounded_file_name(tmp_path):
    turn = _turn(tmp_path, identity="gpu-" + "7," * 5000)
    name = os.path.basename(turn.lock.path)
    assert len(name) <= 130 and name.endswith(".lock"), name
    other = _turn(tmp_path, identity="gpu-" + "7," * 5001)
    assert other.lock.path != turn.lock.path
    turn.take()
    assert turn.lock.held
    turn.release()


def _read_only_run(directory, code):
    """Runs `code` in a Python whose view of `directory` is a read-only
    bind mount (a private mount namespace: nothing leaks out); None when
    this host cannot make one."""
    import shutil
    if shutil.which("unshare") is None:
        return None
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
              '|| exit 99; shift; exec "$@"')
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
         "sh", str(directory), sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
    if proc.returncode == 99 or "unshare:" in proc.stderr[:200]:
        return None
    return proc


def test_a_read_only_lock_directory_is_one_line(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    code = ("from autotune.host import device_lock\n"
            "turn = device_lock.DeviceTurn(identity='gpu-x', "
            f"directory={str(locks)!r})\n"
            "try:\n"
            "    turn.take()\n"
            "except device_lock.DeviceLockError as e:\n"
            "    print('ERROR', e)\n")
    proc = _read_only_run(locks, code)
    if proc is None:
        if os.geteuid() == 0:
            pytest.skip("no read-only bind mount here (unshare -m)")
        # Not root: a directory without write permission refuses the
        # create the same way (EACCES instead of EROFS).
        locks.chmod(0o555)
        proc = subprocess.run([sys.executable, "-c", code],
                              capture_output=True, text=True,
                              env=dict(os.environ,
                                       PYTHONPATH=os.path.dirname(HERE)))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, \
        proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR lock file"), lines
    assert "Read-only file system" in lines[0] or \
        "Permission denied" in lines[0]
    assert os.listdir(locks) == []


def test_the_default_directory_is_this_users_own(tmp_path, monkeypatch):
    assert lock_files.DEFAULT_LOCK_DIR == \
        f"/tmp/rules_autotune-locks-{os.getuid()}"
    monkeypatch.delenv(device_lock.LOCK_DIR_ENV, raising=False)
    default = tmp_path / "default"
    monkeypatch.setattr(lock_files, "DEFAULT_LOCK_DIR", str(default))
    assert device_lock.lock_dir() == str(default)
    # Missing: created private.
    turn = device_lock.DeviceTurn(identity="gpu-x")
    turn.take()
    turn.release()
    assert (default.stat().st_mode & 0o777) == 0o700
    # Ours but writable by others: narrowed.
    default.chmod(0o777)
    turn = device_lock.DeviceTurn(identity="gpu-x")
    turn.take()
    turn.release()
    assert default.stat().st_mode & 0o022 == 0


def test_a_planted_default_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(device_lock.LOCK_DIR_ENV, raising=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    default = tmp_path / "default"
    default.symlink_to(elsewhere)
    monkeypatch.setattr(lock_files, "DEFAULT_LOCK_DIR", str(default))
    with pytest.raises(device_lock.DeviceLockError) as raised:
        device_lock.DeviceTurn(identity="gpu-x").take()
    text = _one_line(raised.value)
    assert "a symbolic link, not a directory" in text, text
    assert os.listdir(elsewhere) == []
    if os.geteuid() == 0:
        default.unlink()
        default.mkdir()
        os.chown(default, 65534, 65534)  # another user made it first
        with pytest.raises(device_lock.DeviceLockError,
                           match="belongs to uid 65534"):
            device_lock.DeviceTurn(identity="gpu-x").take()
        assert os.listdir(default) == []


@pytest.mark.parametrize("value", ["locks", "./locks", "~/locks", "~",
                                   "~other/locks"])
def test_a_relative_or_tilde_lock_directory_is_refused(tmp_path, monkeypatch,
                                                       value):
    """Resolved per working directory (each Bazel test runs in its own
    runfiles tree), such a directory would give every process its own
    lock: refused, one line saying why, and nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(device_lock.LOCK_DIR_ENV, value)
    with pytest.raises(device_lock.DeviceLockError) as raised:
        device_lock.DeviceTurn(identity="gpu-x").take()
    text = _one_line(raised.value)
    assert text.startswith(f"lock directory {value}: ") and \
        device_lock.LOCK_DIR_ENV in text and "absolute" in text, text
    if value.startswith("~"):
        assert "~ is not expanded" in text, text
    else:
        assert "a relative path" in text, text
    assert os.listdir(tmp_path) == []


# -- the functions the device lock and the slot wrapper share ---------------

class _LockError(Exception):
    pass


def test_a_taken_lock_names_its_holder_and_is_not_taken_twice(tmp_path):
    path = str(tmp_path / "gpu-x.lock")
    fd = lock_files.try_lock(path, _LockError)
    assert fd is not None
    try:
        assert lock_files.holder_of(path) == os.getpid()
        # Another open of the file (as another process would) finds it
        # held.
        assert lock_files.try_lock(path, _LockError) is None
    finally:
        os.close(fd)
    again = lock_files.try_lock(path, _LockError)
    assert again is not None
    os.close(again)


def test_a_file_name_keeps_safe_characters_and_is_bounded():
    assert lock_files.safe_name("gpu-GPU/1 2.x") == "gpu-GPU_1_2.x"
    assert lock_files.safe_name("///") == "device"
    long_one = lock_files.safe_name("7," * 500)
    longer = lock_files.safe_name("7," * 501)
    assert len(long_one) <= lock_files.NAME_LIMIT
    assert long_one != longer


def test_a_shown_value_is_short_and_printable():
    assert lock_files.shown("/tmp/locks") == "/tmp/locks"
    assert lock_files.shown("a\x1b[2Jb") == ascii("a\x1b[2Jb")
    cut = lock_files.shown("x" * 1000, limit=10)
    assert cut == "x" * 10 + "..."


def test_the_lock_directory_is_the_variables_or_the_default():
    assert lock_files.lock_dir({lock_files.LOCK_DIR_ENV: "/srv/locks"}) == \
        "/srv/locks"
    assert lock_files.lock_dir({lock_files.LOCK_DIR_ENV: ""}) == \
        lock_files.DEFAULT_LOCK_DIR
    assert lock_files.lock_dir({}) == lock_files.DEFAULT_LOCK_DIR
