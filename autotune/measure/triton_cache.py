"""Where Triton keeps compiled kernels in a process of ours.

Two rules, both applied when `autotune` is imported (before any kernel is
compiled, so they hold for plain @triton.jit kernels of the same process):

- **A writable, private Triton cache under Bazel.** Inside `bazel test` the
  account's home is read-only (the sandbox mounts it so) and often not even
  set, so Triton's default `~/.triton/cache` fails at the first compile with
  `OSError: [Errno 30] Read-only file system`. When neither
  TRITON_CACHE_DIR nor TRITON_HOME is set and TEST_TMPDIR is (a Bazel
  test, a dump target), TRITON_CACHE_DIR becomes `$TEST_TMPDIR/triton-cache`.
  A user's TRITON_CACHE_DIR or TRITON_HOME (`--test_env=...`) is kept.
  MPLCONFIGDIR, unless set, becomes `$TEST_TMPDIR/matplotlib` there too
  (matplotlib, imported by torch's and Triton's tools, otherwise warns
  that its config folder under the home is not writable).
- **Compiled kernels served read-through.** `--autotune_compiled_kernels=DIR`
  (the output of `autotune_cache compile`, handed to a load target by
  `gpu_autotuned_test(compile_for = ...)`) installs
  `ReadThroughCacheManager` as Triton's cache manager: a compile whose key
  DIR holds loads DIR's binary; everything else is compiled as always and
  written to the private cache. Files are found by name below the key's
  folder wherever DIR sits (Triton's group files store the absolute paths
  of the machine that compiled them).

A compiled-kernel directory is code: load one only from a cache you trust
(docs/trusting-caches.md).
"""
import errno
import json
import os

from autotune import log as logs

PRIVATE_CACHE_NAME = "triton-cache"
MATPLOTLIB_DIR_NAME = "matplotlib"
MANIFEST_NAME = "autotune-compiled.json"
MANAGER = "autotune.measure.triton_cache:ReadThroughCacheManager"
# The roots ReadThroughCacheManager reads, os.pathsep-separated: set by
# configure_environment, read by every manager Triton creates.
COMPILED_DIRS_ENV = "AUTOTUNE_COMPILED_KERNEL_DIRS"
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)

_log = logs.get("runtime")
_reported = set()


def _once(key, level, text):
    if key not in _reported:
        _reported.add(key)
        _log.log(level, text)


def configure_environment(compiled_dirs=(), environ=None):
    """Applies the two rules above to `environ` (os.environ by default).
    Returns the Triton cache folder chosen, or None when the user's (or
    Triton's default) is kept."""
    environ = os.environ if environ is None else environ
    chosen = None
    if not environ.get("TRITON_CACHE_DIR") and \
            not environ.get("TRITON_HOME") and environ.get("TEST_TMPDIR"):
        chosen = os.path.join(environ["TEST_TMPDIR"], PRIVATE_CACHE_NAME)
        environ["TRITON_CACHE_DIR"] = chosen
    if not environ.get("MPLCONFIGDIR") and environ.get("TEST_TMPDIR"):
        environ["MPLCONFIGDIR"] = os.path.join(environ["TEST_TMPDIR"],
                                               MATPLOTLIB_DIR_NAME)
    dirs = [os.path.abspath(d) for d in compiled_dirs if d]
    if dirs:
        manager = environ.get("TRITON_CACHE_MANAGER")
        if manager and manager != MANAGER:
            _once(("manager", manager), 30,
                  f"autotune: TRITON_CACHE_MANAGER={manager} is set: the "
                  f"compiled kernels in {', '.join(dirs)} are not served "
                  "(unset it to use them)")
        else:
            environ["TRITON_CACHE_MANAGER"] = MANAGER
            environ[COMPILED_DIRS_ENV] = os.pathsep.join(dirs)
    return chosen


def cache_dir(environ=None):
    """The folder Triton writes compiled kernels to, as Triton computes
    it."""
    environ = os.environ if environ is None else environ
    if environ.get("TRITON_CACHE_DIR"):
        return environ["TRITON_CACHE_DIR"]
    home = environ.get("TRITON_HOME") or os.path.expanduser("~/")
    return os.path.join(home, ".triton", "cache")


def unwritable_message(path, exc):
    return (f"Triton's cache {path} is not writable ({exc.strerror or exc}):"
            " every compile would fail; set TRITON_CACHE_DIR to a writable "
            "folder (under bazel test, leave TRITON_CACHE_DIR and TRITON_HOME "
            "unset to get one under TEST_TMPDIR, or add "
            "--sandbox_writable_path for a persistent one)")


def is_unwritable_cache_error(exc):
    """Whether `exc` (or what caused it) is Triton failing to write its
    cache folder: an environment problem of the whole process, not a
    failure of one config."""
    root = os.path.abspath(cache_dir())
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _UNWRITABLE:
            name = os.path.abspath(str(exc.filename)) if exc.filename \
                else ""
            if name == root or name.startswith(root + os.sep):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


# -- the manifest of a compiled-kernel directory -------------------------------

def cache_invalidating_env():
    """The cache-invalidating variables Triton reads that are set, with
    their values: Triton's keys hold them, so a build and a test must see
    the same ones."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    return dict(sorted(get_cache_invalidating_env_vars().items()))


def write_manifest(root, manifest):
    with open(os.path.join(root, MANIFEST_NAME), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def read_manifest(root):
    path = os.path.join(root, MANIFEST_NAME)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None, (f"{root} holds no {MANIFEST_NAME}: not the output of "
                      "`autotune_cache compile`")
    except (OSError, ValueError) as e:
        return None, f"{path}: unreadable manifest ({e})"
    if not isinstance(manifest, dict):
        return None, f"{path}: unreadable manifest (not a JSON object)"
    return manifest, None


def usable_root(root):
    """Whether binaries under `root` may be served in this process: built
    by this Triton with the same cache-invalidating variables. A refusal is
    logged once per root, naming what differs."""
    import triton
    manifest, problem = read_manifest(root)
    if problem is None:
        built = manifest.get("triton_version")
        if built != triton.__version__:
            problem = (f"compiled kernels in {root} were built by Triton "
                       f"{built}, this is Triton {triton.__version__}: not "
                       "served; rebuild them (`autotune_cache compile`)")
        else:
            env = manifest.get("triton_env", {})
            here = cache_invalidating_env()
            if env != here:
                differ = sorted(k for k in set(env) | set(here)
                                if env.get(k) != here.get(k))
                problem = (f"compiled kernels in {root} were built with "
                           "other Triton cache-invalidating variables ("
                           + ", ".join(f"{k}: {env.get(k, 'unset')} there, "
                                       f"{here.get(k, 'unset')} here"
                                       for k in differ)
                           + "): every key would miss; not served")
    if problem is not None:
        _once(("root", root), 30, f"autotune: {problem}")
        return False
    return True


class ServedCounts:
    """What the read-through manager found, for reports and tests."""
    served = 0
    missed = 0


def _usable_roots():
    roots = [r for r in os.environ.get(COMPILED_DIRS_ENV, "").split(
        os.pathsep) if r]
    cached = _ROOTS.get(tuple(roots))
    if cached is None:
        cached = _ROOTS[tuple(roots)] = [r for r in roots if usable_root(r)]
    return cached


_ROOTS = {}


def _manager_class():
    from triton.runtime.cache import FileCacheManager

    class ReadThroughCacheManager(FileCacheManager):
        """Triton's file cache manager, reading compiled-kernel
        directories first (see the module docstring). Writes go to
        Triton's cache folder, as FileCacheManager's do."""

        def __init__(self, key, override=False, dump=False):
            super().__init__(key, override=override, dump=dump)
            roots = [] if (override or dump) else _usable_roots()
            self._compiled = [os.path.join(root, key) for root in roots
                              if os.path.isdir(os.path.join(root, key))]
            self._serving = bool(roots)

        def get_file(self, filename):
            found = super().get_file(filename)
            if found is None:
                for folder in self._compiled:
                    path = os.path.join(folder, filename)
                    if os.path.exists(path):
                        return path
            return found

        def get_group(self, filename):
            found = super().get_group(filename)
            if found is not None:
                return found
            for folder in self._compiled:
                group = _group_in(folder, filename)
                if group is not None:
                    ServedCounts.served += 1
                    root = os.path.dirname(folder)
                    _once(("served", root), 20,
                          f"autotune: serving compiled kernels from {root}")
                    return group
            if self._serving:
                ServedCounts.missed += 1
            return None

    ReadThroughCacheManager.__module__ = __name__
    ReadThroughCacheManager.__qualname__ = "ReadThroughCacheManager"
    return ReadThroughCacheManager


def __getattr__(name):
    # Triton loads TRITON_CACHE_MANAGER's class by name: defined on first
    # use, so that importing this module (at `import autotune`) does not
    # import Triton.
    if name == "ReadThroughCacheManager":
        cls = globals()[name] = _manager_class()
        return cls
    raise AttributeError(name)


def _group_in(folder, filename):
    """The group file `filename` of one key folder, its children resolved
    by name in that folder; None if any is missing."""
    try:
        with open(os.path.join(folder, f"__grp__{filename}")) as f:
            children = json.load(f).get("child_paths")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(children, dict):
        return None
    group = {}
    for name in children:
        path = os.path.join(folder, os.path.basename(name))
        if not os.path.exists(path):
            return None
        group[name] = path
    return group
