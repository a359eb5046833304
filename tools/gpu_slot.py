"""Runs a test on a free device slot: `bazel test --run_under` wrapper.

    bazel test //... --run_under=@rules_autotune//tools:gpu_slot
    python3 tools/gpu_slot.py COMMAND [ARG...]

Waits for a free slot on one of the machine's devices, runs COMMAND with
CUDA_VISIBLE_DEVICES set to that device, and frees the slot when COMMAND
exits (the slot is an flock held by this process, so the kernel frees it
too when this process is killed; SIGTERM and SIGINT are passed on to
COMMAND first).

A dump target (AUTOTUNE_FLAGS holds --dump_autotune_results_to) takes a
device for itself: it tunes, and two tunings on one device time each
other. Any other test shares its device with at most
AUTOTUNE_GPU_SLOT_LOADS_PER_DEVICE - 1 others (default 2 per device).
AUTOTUNE_GPU_SLOT_KIND=dump|load overrides the guess.

The devices: AUTOTUNE_GPU_SLOT_DEVICES (a count) if set, else the GPUs
`nvidia-smi -L` lists, else torch's count, else one (the host's CPU). When
CUDA_VISIBLE_DEVICES is already set, its entries are the devices. Slot
files live in $AUTOTUNE_LOCK_DIR (default /tmp/rules_autotune-locks-UID,
this user's own), the directory of autotune's own device locks; it must be
shared by every test (a sandbox with a private /tmp needs
--sandbox_writable_path for it). As autotune's locks are, slot files are
opened without following links or blocking on a FIFO, anything but a
regular file is refused with one line, and every variable above is
checked and bounded before use.

Standard library only: it runs before and around the test's own Python.
The lock directory and its files are autotune's own
(autotune/host/lock_files.py, which imports nothing of autotune): this
wrapper loads that file by its path, beside this one in the repository
and in the wrapper's runfiles under Bazel, not the package.
"""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time

LOCK_FILES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "autotune", "host", "lock_files.py")


def _load_lock_files(path=LOCK_FILES):
    if not os.path.isfile(path):
        raise SystemExit(f"gpu_slot: error: {path}: missing (this wrapper "
                         "runs from a rules_autotune tree, or from its "
                         "runfiles under Bazel)")
    spec = importlib.util.spec_from_file_location("_autotune_lock_files",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock_files = _load_lock_files()
DEVICES_ENV = lock_files.SLOT_DEVICES_ENV
LOADS_ENV = lock_files.SLOT_LOADS_ENV
KIND_ENV = "AUTOTUNE_GPU_SLOT_KIND"
DEFAULT_LOADS_PER_DEVICE = 2
# Far above any machine, far below a list that would not fit in memory or
# a loop that would not end: each slot is a file.
MAX_DEVICES = 256
MAX_LOADS_PER_DEVICE = 64
POLL_S = 0.2
# An entry of CUDA_VISIBLE_DEVICES: an index, or a GPU or MIG UUID.
_VISIBLE_ENTRY = re.compile(r"-?[A-Za-z0-9][A-Za-z0-9:/_.-]{0,127}")


class SlotError(Exception):
    pass


def _shown(text, limit=40):
    """A value as an error line may quote it: ASCII, escaped, short."""
    return ascii(text[:limit]) + ("..." if len(text) > limit else "")


def _int_env(env, name, minimum, maximum):
    text = env.get(name, "").strip()
    if not text:
        return None
    # ASCII digits only: int() takes other scripts' digits, isdigit()
    # superscripts that int() refuses.
    if not re.fullmatch(r"[0-9]{1,9}", text) or \
            not minimum <= int(text) <= maximum:
        raise SlotError(f"{name}={_shown(text)}: expected a whole number "
                        f"from {minimum} to {maximum}")
    return int(text)


def _visible_entries(env):
    """The entries of CUDA_VISIBLE_DEVICES, checked, or None when unset
    or empty."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return None
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    if len(entries) > MAX_DEVICES:
        raise SlotError(f"CUDA_VISIBLE_DEVICES: {len(entries)} entries, "
                        f"more than {MAX_DEVICES}")
    for entry in entries:
        if not _VISIBLE_ENTRY.fullmatch(entry):
            raise SlotError(f"CUDA_VISIBLE_DEVICES: entry {_shown(entry)} is "
                            "neither a device index nor a GPU or MIG UUID")
    return entries or None


def _nvidia_smi_gpus():
    """[(index, uuid)] from `nvidia-smi -L`, or None when it cannot run."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    gpus = []
    for line in out.stdout.splitlines():
        m = re.match(r"GPU (\d+):.*\(UUID: ([^)]+)\)", line.strip())
        if m:
            gpus.append((m.group(1), m.group(2)))
    return gpus or None


def _torch_count():
    try:
        out = subprocess.run(
            [sys.executable, "-c",
             "import torch; print(torch.cuda.device_count())"],
            capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip()) if out.returncode == 0 else 0
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def devices(env=None):
    """[(value for CUDA_VISIBLE_DEVICES, lock name)] of the devices."""
    env = os.environ if env is None else env
    visible = _visible_entries(env)
    count = _int_env(env, DEVICES_ENV, 1, MAX_DEVICES)
    if count is not None:
        if visible:
            return [(v, f"dev-{v}") for v in visible[:count]]
        return [(str(i), f"dev-{i}") for i in range(count)]
    gpus = _nvidia_smi_gpus()
    if gpus is None:
        n = _torch_count()
        gpus = [(str(i), None) for i in range(n)]
    if visible:
        # The entries the caller allowed: indices, or UUIDs.
        by_index = dict(gpus)
        return [(v, f"gpu-{by_index.get(v) or v}") for v in visible]
    if not gpus:
        return [("", "host")]
    return [(i, f"gpu-{uuid or i}") for i, uuid in gpus[:MAX_DEVICES]]


def kind(env=None):
    env = os.environ if env is None else env
    given = env.get(KIND_ENV, "").strip()
    if given:
        if given not in ("dump", "load"):
            raise SlotError(f"{KIND_ENV}={_shown(given)}: expected dump or "
                            "load")
        return given
    return "dump" if "--dump_autotune_results_to" in \
        env.get("AUTOTUNE_FLAGS", "") else "load"


class Slot:
    """flocks held on the share files of one device: all of them for a
    dump, one for a load."""

    def __init__(self, directory, device, lock_name, fds):
        self.directory = directory
        self.device, self.lock_name, self.fds = device, lock_name, fds

    def release(self):
        for fd in self.fds:
            os.close(fd)  # closing drops the flock
        self.fds = []


def lock_directory(env=None):
    """The slot files' directory, created if missing and checked
    (lock_files.ensure_lock_dir). SlotError: one line."""
    return lock_files.checked_lock_dir(os.environ if env is None else env,
                                       SlotError)


def _try_lock(path):
    return lock_files.try_lock(path, SlotError, "slot file")


def try_take(directory, device_list, slot_kind, loads_per_device):
    """A Slot on the first device with room, or None."""
    for device, lock_name in device_list:
        name = lock_files.safe_name(lock_name)
        paths = [os.path.join(directory, f"slot-{name}-{k}.lock")
                 for k in range(loads_per_device)]
        if slot_kind == "load":
            for path in paths:
                fd = _try_lock(path)
                if fd is not None:
                    return Slot(directory, device, lock_name, [fd])
            continue
        fds = []
        for path in paths:
            fd = _try_lock(path)
            if fd is None:
                break
            fds.append(fd)
        if len(fds) == len(paths):
            return Slot(directory, device, lock_name, fds)
        for fd in fds:
            os.close(fd)
    return None


def take(env=None, log=None):
    env = os.environ if env is None else env
    directory = lock_directory(env)
    device_list = devices(env)
    loads = _int_env(env, LOADS_ENV, 1, MAX_LOADS_PER_DEVICE) or \
        DEFAULT_LOADS_PER_DEVICE
    slot_kind = kind(env)
    said = False
    while True:
        slot = try_take(directory, device_list, slot_kind, loads)
        if slot is not None:
            return slot, slot_kind
        if not said and log is not None:
            log(f"gpu_slot: waiting for a free {slot_kind} slot on "
                f"{len(device_list)} device(s) ({directory})")
            said = True
        time.sleep(POLL_S)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: gpu_slot.py COMMAND [ARG...]", file=sys.stderr)
        return 2

    def say(text):
        print(text, file=sys.stderr, flush=True)
    try:
        slot, slot_kind = take(log=say)
    except SlotError as e:
        say(f"gpu_slot: error: {e}")
        return 2
    env = dict(os.environ)
    if env.get("TEST_SRCDIR"):
        # Started as a py_binary, this wrapper's stub pointed RUNFILES_DIR
        # at its own runfiles: the test gets its own back.
        env["RUNFILES_DIR"] = env["TEST_SRCDIR"]
    if slot.device:
        env["CUDA_VISIBLE_DEVICES"] = slot.device
    say(f"gpu_slot: {slot_kind} slot on device "
        f"{slot.device or slot.lock_name}")
    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as e:
        slot.release()
        say(f"gpu_slot: cannot run {argv[0]}: {e}")
        return 127

    def forward(signum, _frame):
        child.send_signal(signum)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        code = child.wait()
    finally:
        slot.release()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
