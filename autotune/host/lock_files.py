"""Lock files in a shared directory: where they live, how that directory is
checked, and how one file in it is opened, taken and read.

autotune's device locks (autotune/host/device_lock.py) and the slots
of the --run_under wrapper (tools/gpu_slot.py) are both flock(2)s on files
in one directory ($AUTOTUNE_LOCK_DIR, else /tmp/rules_autotune-locks-UID,
this user's own), so that a test and the wrapper around it agree on it.

A lock directory may be writable by others (a shared $AUTOTUNE_LOCK_DIR;
anything under /tmp before the default directory exists), so nothing in
it is trusted: a lock file is opened without following a link
(O_NOFOLLOW) and without blocking (a FIFO would), and what was opened is
checked with fstat before anything is written to it; anything but a
regular file with one link is refused with one line. The default
directory is created private (0700) and used only when it is a real
directory of this user's.

Standard library only, and nothing of the package: tools/gpu_slot.py runs
before and around a test's own Python and loads this file by its path (it
is in the wrapper's runfiles under Bazel). Every check raises the
exception class its caller passes as `error`, with one line.
"""
import errno
import fcntl
import hashlib
import os
import re
import stat

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
# Per user: a directory every user can write lets anyone plant links and
# FIFOs where another user's (or root's) lock files go. Not
# XDG_RUNTIME_DIR: a Bazel test's environment does not carry it, and the
# test and tools/gpu_slot.py around it must agree on the directory.
DEFAULT_LOCK_DIR = f"/tmp/rules_autotune-locks-{os.getuid()}"
# The wrapper's own variables, which regenerate passes on to the tests.
SLOT_DEVICES_ENV = "AUTOTUNE_GPU_SLOT_DEVICES"
SLOT_LOADS_ENV = "AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE"
MAX_PATH = 4096
NAME_LIMIT = 120  # a lock file's name, well under NAME_MAX (255)
_SHOWN_LIMIT = 300
_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
               | os.O_CLOEXEC)
FIX = f"remove it, or set {LOCK_DIR_ENV} to a directory of yours"


def lock_dir(env=None):
    """The lock directory `env` (default: this process's) names."""
    env = os.environ if env is None else env
    return env.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR


def shown(text, limit=_SHOWN_LIMIT):
    """A value as an error line may quote it: short, and escaped (ASCII)
    when it holds anything a terminal would not print as it is."""
    cut = text[:limit]
    more = "..." if len(text) > limit else ""
    return (cut if cut.isprintable() else ascii(cut)) + more


def safe_name(name):
    """A file name for `name`: only [A-Za-z0-9_.-], and bounded (a long
    name keeps its start and a hash of the whole)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "device"
    if len(safe) > NAME_LIMIT:
        digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()
        safe = f"{safe[:NAME_LIMIT - 17]}-{digest[:16]}"
    return safe


def file_kind(mode):
    """What a stat mode is, in words."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def what_is(path):
    """file_kind of what is at `path` (not followed), or None."""
    try:
        return file_kind(os.lstat(path).st_mode)
    except OSError:
        return None


def not_absolute(directory):
    """Why `directory` cannot be a lock directory although it may exist: a
    relative path names another directory in each working directory (a
    Bazel test runs in its own runfiles tree), so processes would not
    take turns; nothing expands a leading ~ here. None when absolute."""
    if directory.startswith("~"):
        return (f"starts with ~, and ~ is not expanded here (no shell "
                f"expands it inside --test_env= or a .bazelrc line); set "
                f"{LOCK_DIR_ENV} to an absolute path")
    if not os.path.isabs(directory):
        return (f"a relative path, which each working directory (each "
                f"Bazel test's runfiles tree) would resolve to a lock of "
                f"its own; set {LOCK_DIR_ENV} to an absolute path")
    return None


def ensure_lock_dir(directory, error):
    """Creates the lock directory if missing and checks it. The default
    one must be a directory (not a link) of this user's; a group- or
    world-writable mode is narrowed. $AUTOTUNE_LOCK_DIR is the user's own
    choice (it may be shared on purpose): it must be an absolute path
    to a directory. `error`: one line, when it cannot be used."""
    what = f"lock directory {shown(directory)}"
    if len(directory) > MAX_PATH or "\0" in directory:
        raise error(f"{what}: not a usable path (set {LOCK_DIR_ENV} to a "
                    "directory)")
    why = not_absolute(directory)
    if why is not None:
        raise error(f"{what}: {why}")
    if directory != DEFAULT_LOCK_DIR:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise error(f"{what}: {e.strerror or e} (set {LOCK_DIR_ENV} "
                        "to a writable directory)") from None
        return directory
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise error(f"{what}: {e.strerror or e} (set {LOCK_DIR_ENV} to a "
                    "writable directory)") from None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY
                     | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        kind = what_is(directory)
        raise error(
            f"{what}: "
            + (f"{kind}, not a directory" if kind else e.strerror or str(e))
            + f"; not used ({FIX})") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise error(f"{what}: belongs to uid {st.st_uid}, not to this "
                        f"user (uid {os.getuid()}); not used ({FIX})")
        if st.st_mode & 0o022:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o022)
    finally:
        os.close(fd)
    return directory


def checked_lock_dir(env, error):
    """The lock directory `env` names, created if missing and checked
    (ensure_lock_dir)."""
    return ensure_lock_dir(lock_dir(env), error)


def open_lock_file(path, error, what="lock file"):
    """A read-write descriptor (blocking) of the regular file at `path`,
    created if missing: never through a symbolic link, never blocking on a
    FIFO, and refused (one line, `error`, starting with `what` and the
    path) when what is there is anything but a regular file with one
    link."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o666)
    except OSError as e:
        kind = what_is(path)
        if e.errno == errno.ELOOP or kind not in (None, "a regular file"):
            kind = kind or "a symbolic link"
            reason = f"{kind}, not a regular file; " + (
                "not followed" if kind == "a symbolic link" else "not used")
        else:
            reason = e.strerror or str(e)
        raise error(f"{what} {path}: {reason} ({FIX})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path}: {file_kind(st.st_mode)}, not a "
                        f"regular file; not used ({FIX})")
        if st.st_nlink != 1:
            # A hard link to a file elsewhere: writing our pid would
            # overwrite it.
            raise error(f"{what} {path}: has {st.st_nlink} hard links; "
                        f"not used ({FIX})")
        fcntl.fcntl(fd, fcntl.F_SETFL,
                    fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if st.st_uid == os.getuid():
            # Anyone sharing the directory may need the lock: no umask
            # on the mode.
            os.fchmod(fd, 0o666)
    except BaseException:
        os.close(fd)
        raise
    return fd


def try_lock(path, error, what="lock file"):
    """An exclusive flock on the file at `path` (open_lock_file) if it is
    free, with this process's pid written in it: its descriptor, which
    holds the lock until closed; None when another process holds it."""
    fd = open_lock_file(path, error, what)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise error(f"{what} {path}: {e.strerror or e}") from None
    write_holder(fd)
    return fd


def write_holder(fd):
    """This process's pid in a held lock file, for the message another
    process logs while it waits."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the lock is held all the same; only the message lacks it


def holder_of(path):
    """The pid written in a lock file, or None (nothing readable, not a
    regular file, or not a pid)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 32).strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if re.fullmatch(rb"[0-9]{1,10}", text) else None
