"""One tuner per device: an inter-process lock per physical device.

Two processes that time candidates on one device at once time each other's
kernels, and the winner they store is whatever the contention produced. A
process therefore measures only while it holds its device's lock: an
exclusive flock(2) on a file in the lock directory ($AUTOTUNE_LOCK_DIR, else
/tmp/rules_autotune-locks-UID, this user's own). Hits, loads and launches of
tuned kernels never take it.

The file is named after the device itself, not its index: a GPU's UUID (or
PCI bus id) when torch can tell, so two processes that see one GPU through
different CUDA_VISIBLE_DEVICES agree; on the interpreter, one lock per host
(the CPU is the device). The kernel releases an flock when its holder dies,
so a lock file left behind by a dead process never blocks; the file only
says which pid held it last, for the message a waiting process logs.

A lock directory may be writable by others (a shared $AUTOTUNE_LOCK_DIR;
anything under /tmp before the default directory exists), so nothing in
it is trusted: a lock file is opened without following a link
(O_NOFOLLOW) and without blocking (a FIFO would), and what was opened is
checked with fstat before anything is written to it; anything but a
regular file with one link is refused with one line. The default
directory is created private (0700) and used only when it is a real
directory of this user's.

    turn = DeviceTurn(backend)      # nothing taken yet
    turn.take()                     # blocks until this process holds it
    ...measure...
    turn.release()                  # turn.report(): waited, start, end
"""
import errno
import fcntl
import hashlib
import os
import re
import socket
import stat
import threading
import time

from autotune import log as logs
from autotune.errors import DeviceLockError

log = logs.get("device_lock")

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
# Per user: a directory every user can write lets anyone plant links and
# FIFOs where another user's (or root's) lock files go. Not
# XDG_RUNTIME_DIR: a Bazel test's environment does not carry it, and the
# test and tools/gpu_slot.py around it must agree on the directory.
DEFAULT_LOCK_DIR = f"/tmp/rules_autotune-locks-{os.getuid()}"
MAX_PATH = 4096
_NAME_LIMIT = 120  # a lock file's name, well under NAME_MAX (255)
_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
               | os.O_CLOEXEC)
_FIX = f"remove it, or set {LOCK_DIR_ENV} to a directory of yours"


def lock_dir(env=None):
    env = os.environ if env is None else env
    return env.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR


def _safe(name):
    """A file name for `name`: only [A-Za-z0-9_.-], and bounded (a long
    name keeps its start and a hash of the whole)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "device"
    if len(safe) > _NAME_LIMIT:
        digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()
        safe = f"{safe[:_NAME_LIMIT - 17]}-{digest[:16]}"
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


def _what_is(path):
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


def ensure_lock_dir(directory):
    """Creates the lock directory if missing and checks it. The default
    one must be a directory (not a link) of this user's; a group- or
    world-writable mode is narrowed. $AUTOTUNE_LOCK_DIR is the user's own
    choice (it may be shared on purpose): it must be an absolute path
    to a directory. DeviceLockError: one line, when it cannot be used."""
    what = f"lock directory {logs.printable(directory)[:300]}"
    if len(directory) > MAX_PATH or "\0" in directory:
        raise DeviceLockError(f"{what}: not a usable path (set "
                              f"{LOCK_DIR_ENV} to a directory)")
    why = not_absolute(directory)
    if why is not None:
        raise DeviceLockError(f"{what}: {why}")
    if directory != DEFAULT_LOCK_DIR:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise DeviceLockError(
                f"{what}: {e.strerror or e} (set {LOCK_DIR_ENV} to a "
                "writable directory)") from None
        return directory
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise DeviceLockError(f"{what}: {e.strerror or e} (set "
                              f"{LOCK_DIR_ENV} to a writable directory)") \
            from None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY
                     | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        kind = _what_is(directory)
        raise DeviceLockError(
            f"{what}: "
            + (f"{kind}, not a directory" if kind else e.strerror or str(e))
            + f"; not used ({_FIX})") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise DeviceLockError(
                f"{what}: belongs to uid {st.st_uid}, not to "
                f"this user (uid {os.getuid()}); not used ({_FIX})")
        if st.st_mode & 0o022:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o022)
    finally:
        os.close(fd)
    return directory


def open_lock_file(path, error=DeviceLockError):
    """A read-write descriptor of the regular file at `path`, created if
    missing: never through a symbolic link, never blocking on a FIFO, and
    refused (one line, `error`) when what is there is anything but a
    regular file with one link."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o666)
    except OSError as e:
        kind = _what_is(path)
        if e.errno == errno.ELOOP or kind not in (None, "a regular file"):
            kind = kind or "a symbolic link"
            reason = f"{kind}, not a regular file; " + (
                "not followed" if kind == "a symbolic link" else "not used")
        else:
            reason = e.strerror or str(e)
        raise error(f"lock file {path}: {reason} ({_FIX})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"lock file {path}: {file_kind(st.st_mode)}, not a "
                        f"regular file; not used ({_FIX})")
        if st.st_nlink != 1:
            # A hard link to a file elsewhere: writing our pid would
            # overwrite it.
            raise error(f"lock file {path}: has {st.st_nlink} hard links; "
                        f"not used ({_FIX})")
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


def device_identity(backend):
    """A name for the physical device `backend` measures on, the same in
    every process that uses that device."""
    if getattr(backend, "name", "") != "gpu":
        return "host-" + socket.gethostname()
    import torch
    device = backend.device
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid:
        return f"gpu-{uuid}"
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        return (f"gpu-pci-{getattr(props, 'pci_domain_id', 0)}-{bus}-"
                f"{getattr(props, 'pci_device_id', 0)}")
    # Neither known: the index as this process sees it, with the visible
    # list, so processes with the same view at least agree.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    return f"gpu-{visible}-{device.index}"


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


# Under `bazel test` (TEST_TIMEOUT set), a wait still going on when this
# share of the test's timeout has passed is said to be what will time it
# out: the test log would otherwise end at the wait line, and a timeout
# reads as slow tuning.
TIMEOUT_WARNING_SHARE = 0.85


def process_age_s():
    """Seconds since this process started (Linux), or None."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22, starttime, counted after the ")" closing field 2.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _timeout_warning(lock, holder, start, env=None):
    """A started timer that logs, close to the test's timeout, that the
    wait for `lock` is what will end the test; None outside a test that
    has a timeout."""
    env = os.environ if env is None else env
    try:
        timeout = float(env.get("TEST_TIMEOUT", ""))
    except ValueError:
        return None
    if not timeout > 0:
        return None
    age = process_age_s() or 0.0
    delay = max(0.0, timeout * TIMEOUT_WARNING_SHARE - age)

    def warn():
        waited = time.monotonic() - start
        log.warning(
            f"autotune: still waiting for {lock.what} after {waited:.0f} s, "
            "held by " + (f"pid {holder}" if holder else "another process")
            + f" ({lock.path}); this test times out after {timeout:.0f} s "
            "(TEST_TIMEOUT): the wait for the device, not tuning, is what "
            "will time it out. Give the dump target a longer timeout "
            "(timeout = \"long\", or --test_timeout; docs/bazel.md) or free "
            "the device.")
    timer = threading.Timer(delay, warn)
    timer.daemon = True
    timer.start()
    return timer


# The locks this process holds. A forked child shares each one's open file
# (close-on-exec covers exec, not fork), and an flock lasts while any
# process holds that file open: a child that outlived this process (a
# worker orphaned by a killed tuner) would hold the device for good. So a
# forked child closes its copies at once: it holds none of its parent's
# locks, and its FileLock objects say so. _WAITING: descriptors another
# thread waits on (the lock, once granted, would be the child's too).
_HELD = set()
_WAITING = set()


def _forget_held_locks():
    fds = set(_WAITING)
    for lock in list(_HELD):
        fd, lock.fd = lock.fd, None
        fds.add(fd)
    _HELD.clear()
    _WAITING.clear()
    for fd in fds - {None}:
        try:
            os.close(fd)  # not LOCK_UN: that would free the parent's
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held_locks)


class FileLock:
    """An exclusive flock on one file; acquire() blocks, logging once (with
    the holder's pid) when it has to wait. Returns the seconds waited.
    A forked child does not inherit a held lock (see _HELD)."""

    def __init__(self, path, what=None):
        self.path = path
        self.what = what or os.path.basename(path)
        self.fd = None

    def _open(self):
        ensure_lock_dir(os.path.dirname(self.path))
        return open_lock_file(self.path)

    def try_acquire(self):
        """Takes the lock if it is free; True when taken."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise DeviceLockError(f"device lock {self.path}: {e}") from None
        self._took(fd)
        return True

    def acquire(self, on_wait=None):
        start = time.monotonic()
        if self.try_acquire():
            return 0.0
        holder = holder_of(self.path)
        if on_wait is not None:
            on_wait(holder)
        else:
            log.info(f"autotune: waiting for {self.what}: held by "
                     + (f"pid {holder}" if holder else "another process")
                     + f" ({self.path})")
        fd = self._open()
        _WAITING.add(fd)
        warning = _timeout_warning(self, holder, start)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    break
                except InterruptedError:
                    continue
        except BaseException:
            _WAITING.discard(fd)
            os.close(fd)
            raise
        finally:
            _WAITING.discard(fd)
            if warning is not None:
                warning.cancel()
        self._took(fd)
        return time.monotonic() - start

    def _took(self, fd):
        self.fd = fd
        _HELD.add(self)
        # Who holds it, for the message another process logs while waiting.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the lock is held all the same; only the message lacks it

    def release(self):
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        _HELD.discard(self)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @property
    def held(self):
        return self.fd is not None


class DeviceTurn:
    """This process's turn on its device for one tuned fusion. take() is
    called before each measurement and acquires the lock the first time,
    so a tuning that measures nothing (pruned to one config) never waits;
    release() ends the turn. report(): {"device_wait_s", "tuning_start",
    "tuning_end"} (Unix times) once the lock was held, else {}."""

    def __init__(self, backend=None, identity=None, directory=None):
        self.identity = identity or device_identity(backend)
        self.lock = FileLock(
            os.path.join(directory or lock_dir(), _safe(self.identity)
                         + ".lock"), f"device {self.identity}")
        self.waited_s = None
        self.start = self.end = None
        self.left_to_other_rank = False

    def leave_to_other_rank(self):
        """Another rank of this process's torch.distributed job, on the
        same device, holds the lock for both: this turn takes nothing."""
        self.left_to_other_rank = True

    def take(self):
        if self.lock.held or self.start is not None or \
                self.left_to_other_rank:
            return
        self.waited_s = self.lock.acquire()
        self.start = time.time()

    def release(self):
        if self.lock.held:
            # Read before letting go: the next holder's start comes after.
            self.end = time.time()
            self.lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def report(self):
        if self.start is None:
            return {}
        return {"device_wait_s": round(self.waited_s, 3),
                "tuning_start": round(self.start, 6),
                "tuning_end": round(self.end if self.end is not None
                                    else time.time(), 6)}
