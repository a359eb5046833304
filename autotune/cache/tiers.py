"""Cache storage: results loaded from files, and the per-fusion directory.

Lookup order: memory (this run) -> loaded results files -> per-fusion
directory -> remote cache (autotune/cache/remote.py). The storage knows nothing about kernels or tuning; it maps cache
keys to entries and says where each came from.
"""
import collections
import errno
import os
import stat
import time

from autotune import log as logs
from autotune import keys as keys
from autotune import codec
from autotune.errors import CacheConflictError, CacheFileError

log = logs.get("cache")

MODES = ("update", "read")




class PerFusionDirectory:
    """One file per fusion, named by a hash of its cache key.

    Writes go to a temporary file and are linked into place: the first
    process to finish a fusion wins, later ones adopt its entry, so every
    process of a parallel run ends up with the same config per key; an
    entry the caller refused (a winner no longer offered) is replaced.
    """

    def __init__(self, path, mode="update"):
        if mode not in MODES:
            raise ValueError(f"unknown cache mode {mode!r}; expected one of "
                             f"{', '.join(MODES)}")
        self.path = os.fspath(path)
        self.mode = mode
        self.store_failed = False
        if not os.path.isdir(self.path):
            reason = ("is not a directory" if os.path.exists(self.path)
                      else "does not exist (create it, or fix the path)")
            raise CacheFileError(self.path, f"per-fusion cache directory "
                                 f"{reason}")
        if mode == "update" and not os.access(self.path, os.W_OK | os.X_OK):
            raise CacheFileError(self.path, "per-fusion cache directory is "
                                 "not writable (use --autotune_cache_mode=read "
                                 "to only read it)")

    def file_path(self, key):
        return os.path.join(self.path, keys.file_name(key))

    def _read(self, path, key):
        """(entry, identity of the file read) or (None, None) when there is
        no file; CacheFileError (carrying the identity) when it is bad."""
        try:
            info = os.stat(path)
            if not stat.S_ISREG(info.st_mode):
                # Opening a pipe would wait for a writer forever.
                error = CacheFileError(path, "not a regular file; not a "
                                       "per-fusion cache file")
                error.identity = _identity(info)
                raise error
            with open(path, "rb") as f:
                identity = _identity(os.fstat(f.fileno()))
                try:
                    data = codec.read_stream(f, path)
                except CacheFileError as e:
                    e.identity = identity
                    raise
        except FileNotFoundError:
            if os.path.islink(path):
                # A link to nothing blocks the store of its fusion for
                # good: as bad as a corrupt file.
                error = CacheFileError(path, "a symbolic link to a file "
                                       "that does not exist")
                error.identity = ("link",) + _identity(os.lstat(path))
                raise error from None
            return None, None
        except OSError as e:
            error = CacheFileError(path, f"cannot read per-fusion cache file: "
                                   f"{e.strerror}")
            try:
                error.identity = ("link",) + _identity(os.lstat(path)) \
                    if os.path.islink(path) else _identity(os.stat(path))
            except OSError:
                error.identity = None
            raise error from None
        try:
            entries = codec.decode(data, path)
            if len(entries) != 1 or entries[0].key != key:
                raise CacheFileError(path, "holds a different cache key than "
                                     "its file name says")
            entries[0].best  # noqa: B018 -- a malformed config is bad too
        except CacheFileError as e:
            e.identity = identity
            raise
        return entries[0], identity

    def lookup(self, key):
        path = self.file_path(key)
        try:
            return self._read(path, key)[0]
        except CacheFileError as e:
            if self.mode == "read":
                raise
            if not self._move_aside(path, e):
                # Another process replaced the bad file since it was read:
                # use what it stored.
                try:
                    return self._read(path, key)[0]
                except CacheFileError:
                    return None
            return None

    def _move_aside(self, path, error):
        """Moves the bad file that was read out of the way, and only that
        one: returns False when `path` is now another file (a process moved
        the bad one aside and stored a good entry meanwhile)."""
        aside = f"{path}.corrupt-{int(time.time())}-{os.getpid()}"
        try:
            if not _set_aside(path, error.identity, aside):
                return False
        except OSError:
            aside = None
        log.warning("autotune: warning: %s; moved aside to %s and re-tuning",
                    error, aside)
        return True

    def store(self, entry, refused=None, refuses=None):
        """Stores `entry` unless another process stored this key first;
        returns the entry that is in the directory afterwards. refused: an
        entry the caller refused (its key and winner): a file holding it
        is replaced, not adopted; refuses: None, or a test of the entry
        found: one it refuses is not adopted either (`entry` is returned).
        A store that fails (a full disk) warns once and returns `entry`:
        the tuning result is still used by this process."""
        if self.mode == "read":
            return entry
        path = self.file_path(entry.key)
        try:
            return self._store(entry, path, refused, refuses)
        except OSError as e:
            if not self.store_failed:
                self.store_failed = True
                log.warning(f"autotune: warning: cannot store in the "
                            f"per-fusion cache directory {self.path}: "
                            f"{e.strerror or e} ({path}); tuned configs are "
                            "used but not stored")
            return entry

    def _store(self, entry, path, refused=None, refuses=None):
        tmp = codec.write_temp(path, codec.encode([entry], path))
        try:
            for _ in range(3):
                try:
                    os.link(tmp, path)
                    return entry
                except FileExistsError:
                    pass
                # Another process stored this key first: adopt its entry;
                # a bad file there, or the entry the caller refused, is
                # taken away (only if it is still the one read) and the
                # link tried again.
                try:
                    existing, identity = self._read(path, entry.key)
                except CacheFileError as e:
                    self._move_aside(path, e)
                    continue
                if existing is None:
                    continue
                if not same_result(existing, refused):
                    if refuses is not None and refuses(existing):
                        return entry  # never an entry the caller refuses
                    return existing
                aside = f"{path}.replaced-{os.getpid()}.tmp"
                if _set_aside(path, identity, aside):
                    os.unlink(aside)
            return entry
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
                raise
            os.replace(tmp, path)  # no hard links here: last writer wins
            tmp = None
            return entry
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def entries(self):
        """Every entry in the directory (for tools); foreign or corrupt files
        raise CacheFileError naming them."""
        out = []
        for name in sorted(os.listdir(self.path)):
            path = os.path.join(self.path, name)
            if name.startswith(".") or ".corrupt-" in name or \
                    name.endswith(".tmp"):
                continue
            if not name.endswith(".textproto"):
                raise CacheFileError(path, "not a per-fusion cache file "
                                     "(foreign file in the cache directory)")
            if not codec.is_regular_file(path):
                raise CacheFileError(path, "not a regular file (or a "
                                     "symbolic link to one)")
            entries = codec.decode(codec.read_bytes(path), path,
                                   check_crc=True)
            for entry in entries:
                if keys.file_name(entry.key) != name:
                    raise CacheFileError(path, "file name does not match the "
                                         "cache key inside")
            out.extend(entries)
        return out


def same_result(entry, other):
    """Whether two entries (or None) hold one key's same winner."""
    return entry is not None and other is not None and \
        entry.key == other.key and entry.same_result(other)


def _identity(stat):
    return stat.st_dev, stat.st_ino


def _set_aside(path, identity, aside):
    """Renames the file at `path` to `aside` if it is still the one of
    `identity` (a ("link", ...) identity names the link itself); False when
    another file took its place, which stays where it is."""
    if identity and identity[0] == "link":
        def current(p):
            return ("link",) + _identity(os.lstat(p))
    else:
        def current(p):
            return _identity(os.stat(p))
    try:
        if current(path) != identity:
            return False
        os.replace(path, aside)
        if current(aside) != identity:
            # Replaced between the check and the move: put it back,
            # unless yet another file took its place.
            try:
                os.link(aside, path)
                os.unlink(aside)
            except OSError:
                pass
            return False
    except FileNotFoundError:
        return False
    return True


class LoadedFile:
    __slots__ = ("path", "entries", "by_device")

    def __init__(self, path, entries):
        self.path = path
        self.entries = entries
        self.by_device = collections.Counter(e.key.device for e in entries)


class ResultsCache:
    """Memory + loaded results files + optional per-fusion directory +
    optional remote cache."""

    def __init__(self, device_key, per_fusion_dir=None, remote=None):
        self.device_key = device_key
        self.memory = {}
        self.loaded = {}
        self.sources = {}
        self.per_fusion_dir = per_fusion_dir
        self.remote = remote

    def load_file(self, path, limit=None):
        """Loads a results file (at most `limit` bytes). Two files giving
        one key different configs is an error naming both."""
        entries = codec.load_results(path, limit=limit)
        # Best configs are decoded now, at C speed for binary files: a
        # malformed one is an error at start-up, not a hit at launch time.
        codec.decode_heads(entries)
        for entry in entries:
            other = self.loaded.get(entry.key)
            if other is not None and not other.same_result(entry):
                raise CacheConflictError(
                    f"conflicting results for {entry.key.describe()}: "
                    f"{self.sources[entry.key]} has {other.best.short()}, "
                    f"{path} has {entry.best.short()}")
            self.loaded[entry.key] = entry
            self.sources.setdefault(entry.key, path)
        loaded = LoadedFile(path, entries)
        return loaded

    def usable_in(self, loaded):
        return loaded.by_device.get(self.device_key, 0)

    def lookup(self, key):
        """Returns (entry, source) or (None, None). source: "memory",
        a results file path, "per-fusion-dir" or "remote"."""
        entry = self.memory.get(key)
        if entry is not None:
            return entry, "memory"
        entry = self.loaded.get(key)
        if entry is not None:
            return entry, self.sources[key]
        if self.per_fusion_dir is not None:
            entry = self.per_fusion_dir.lookup(key)
            if entry is not None:
                return entry, "per-fusion-dir"
        if self.remote is not None:
            entry = self.remote.lookup(key)
            if entry is not None:
                if self.per_fusion_dir is not None:  # read mode: no write
                    entry = self.per_fusion_dir.store(entry)
                return entry, "remote"
        return None, None

    def remember(self, entry, key=None):
        """Keeps `entry` in memory, under `key` when it answers a key other
        than its own (an entry tuned under another Triton version)."""
        self.memory[entry.key if key is None else key] = entry

    def store(self, entry, refused=None, refuses=None):
        """Records a freshly tuned entry; returns the entry to use (another
        process may have stored the same fusion first). refused: the entry
        the lookup refused, replaced in every tier that holds it; refuses:
        None, or a test of an entry a tier holds: one it refuses is never
        returned."""
        if self.remote is not None:  # the fleet's first writer wins
            entry = self.remote.publish(entry, refused, refuses)
        if self.per_fusion_dir is not None:
            entry = self.per_fusion_dir.store(entry, refused, refuses)
        self.memory[entry.key] = entry
        return entry

    def same_kernel_entries(self, kernel, fingerprint):
        """Entries of one kernel version from every source, any device: the
        neighbours that can seed a search or serve a nearest-shape miss."""
        out = {}
        for source in (self.loaded, self.memory):
            for key, entry in source.items():
                if key.kernel == kernel and key.fingerprint == fingerprint:
                    out[key] = entry
        return list(out.values())
