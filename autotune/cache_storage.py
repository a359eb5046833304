"""Cache storage: results loaded from files, and the per-fusion directory.

Lookup order: memory (this run) -> loaded results files -> per-fusion
directory -> remote cache (autotune/remote_cache.py). The storage knows nothing about kernels or tuning; it maps cache
keys to entries and says where each came from.
"""
import collections
import errno
import os
import sys
import time

from autotune import cache_key as keys
from autotune import codec
from autotune.errors import CacheFileError

MODES = ("update", "read")


class CacheConflictError(Exception):
    pass


class PerFusionDirectory:
    """One file per fusion, named by a hash of its cache key.

    Writes go to a temporary file and are linked into place: the first
    process to finish a fusion wins, later ones adopt its entry, so every
    process of a parallel run ends up with the same config per key.
    """

    def __init__(self, path, mode="update"):
        if mode not in MODES:
            raise ValueError(f"unknown cache mode {mode!r}; expected one of "
                             f"{', '.join(MODES)}")
        self.path = os.fspath(path)
        self.mode = mode
        if not os.path.isdir(self.path):
            raise CacheFileError(self.path, "per-fusion cache directory does "
                                 "not exist (create it, or fix the path)")
        if mode == "update" and not os.access(self.path, os.W_OK | os.X_OK):
            raise CacheFileError(self.path, "per-fusion cache directory is "
                                 "not writable (use --autotune_cache_mode=read "
                                 "to only read it)")

    def file_path(self, key):
        return os.path.join(self.path, keys.file_name(key))

    def _read(self, path, key):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        entries = codec.decode(data, path)
        if len(entries) != 1 or entries[0].key != key:
            raise CacheFileError(path, "holds a different cache key than its "
                                 "file name says")
        return entries[0]

    def lookup(self, key):
        path = self.file_path(key)
        try:
            return self._read(path, key)
        except CacheFileError as e:
            if self.mode == "read":
                raise
            self._move_aside(path, e)
            return None

    def _move_aside(self, path, error):
        aside = f"{path}.corrupt-{int(time.time())}"
        try:
            os.replace(path, aside)
        except OSError:
            aside = None
        print(f"autotune: warning: {error}; moved aside to {aside} and "
              "re-tuning", file=sys.stderr)

    def store(self, entry):
        """Stores `entry` unless another process stored this key first;
        returns the entry that is in the directory afterwards."""
        if self.mode == "read":
            return entry
        path = self.file_path(entry.key)
        data = codec.encode([entry], path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
            return entry
        except FileExistsError:
            try:
                existing = self._read(path, entry.key)
            except CacheFileError:
                existing = None
            if existing is not None:
                return existing
            os.replace(tmp, path)
            tmp = None
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
            with open(path, "rb") as f:
                entries = codec.decode(f.read(), path)
            for entry in entries:
                if keys.file_name(entry.key) != name:
                    raise CacheFileError(path, "file name does not match the "
                                         "cache key inside")
            out.extend(entries)
        return out


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
        self.files = []
        self.per_fusion_dir = per_fusion_dir
        self.remote = remote

    def load_file(self, path):
        """Loads a results file. Two files giving one key different configs
        is an error naming both."""
        entries = codec.load_results(path)
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
        self.files.append(loaded)
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

    def remember(self, entry):
        self.memory[entry.key] = entry

    def store(self, entry):
        """Records a freshly tuned entry; returns the entry to use (another
        process may have stored the same fusion first)."""
        if self.remote is not None:  # the fleet's first writer wins
            entry = self.remote.publish(entry)
        if self.per_fusion_dir is not None:
            entry = self.per_fusion_dir.store(entry)
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
