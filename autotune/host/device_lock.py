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

The lock directory and its files are those of tools/gpu_slot.py's slots
too, and one module says where they are, how the directory is checked and
how a file in it is opened (autotune/host/lock_files.py): nothing in a
directory others may write is trusted.

    turn = DeviceTurn(backend)      # nothing taken yet
    turn.take()                     # blocks until this process holds it
    ...measure...
    turn.release()                  # turn.report(): waited, start, end
"""
import fcntl
import os
import socket
import threading
import time

from autotune import log as logs
from autotune.errors import DeviceLockError
from autotune.host import lock_files
# The lock directory and a lock file's holder, as the callers of the
# device lock read them.
from autotune.host.lock_files import (  # noqa: F401
    LOCK_DIR_ENV, holder_of, lock_dir)

log = logs.get("device_lock")


def device_identity(backend):
    """A name for the physical device `backend` measures on, the same in
    every process that uses that device."""
    if backend.name != "gpu":
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
        lock_files.ensure_lock_dir(os.path.dirname(self.path),
                                   DeviceLockError)
        return lock_files.open_lock_file(self.path, DeviceLockError)

    def try_acquire(self):
        """Takes the lock if it is free; True when taken."""
        lock_files.ensure_lock_dir(os.path.dirname(self.path),
                                   DeviceLockError)
        fd = lock_files.try_lock(self.path, DeviceLockError)
        if fd is None:
            return False
        self._held(fd)
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
        lock_files.write_holder(fd)
        self._held(fd)
        return time.monotonic() - start

    def _held(self, fd):
        self.fd = fd
        _HELD.add(self)

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
            os.path.join(directory or lock_dir(), lock_files.safe_name(self.identity)
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
