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
  folder wherever DIR sits (group files hold bare names).

Before anything is served, DIR's manifest is compared with this process
(`identity_problem`: the Python ABI, Triton's key of itself, the
variables that enter Triton's keys, the backend per target); the first
difference is said in one line and nothing of DIR is served. Each file
served is checked first (`_checked`): a regular file of a sane size, not
a link out of DIR, and the metadata's own hash and kernel name those of
the launch asking for it; anything else is named once and the launch
compiles as usual. Every launch served or compiled is counted
(`ServedCounts`, `counts_report`) for the summary line and reports, and
`--require_compiled_kernels` makes a compile an error naming the kernel.

A compiled-kernel directory is code: load one only from a cache you trust
(docs/trusting-caches.md).
"""
import errno
import functools
import hashlib
import json
import os
import re
import stat
import sys
import sysconfig

from autotune import log as logs
from autotune.errors import (CompiledKernelMissError, TritonCacheError,
                             UnservableFile)

PRIVATE_CACHE_NAME = "triton-cache"
MATPLOTLIB_DIR_NAME = "matplotlib"
MANIFEST_NAME = "autotune-compiled.json"
MANAGER = "autotune.binaries.triton_cache:ReadThroughCacheManager"
# The roots ReadThroughCacheManager reads, a JSON list (a path may hold
# os.pathsep): set by configure_environment, read by every manager Triton
# creates.
COMPILED_DIRS_ENV = "AUTOTUNE_COMPILED_KERNEL_DIRS"
# Set (to 1) by configure_environment(require=True): a compile although
# compiled kernels were given raises CompiledKernelMissError.
REQUIRE_ENV = "AUTOTUNE_REQUIRE_COMPILED_KERNELS"
# Variables that enter Triton's keys without being among its
# cache-invalidating ones: the ptxas overrides (through the backend's hash
# of `ptxas --version`) and TRITON_DEBUG (through the options' debug).
KEY_VARIABLES = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH",
                 "TRITON_DEBUG")
# What a served file may be: JSON files (manifest, group, metadata) are
# small; a binary larger than this is no kernel.
MAX_JSON_BYTES = 4 << 20
MAX_FILE_BYTES = 256 << 20
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)

_log = logs.get("runtime")
_reported = set()


def _once(key, level, text):
    if key not in _reported:
        _reported.add(key)
        _log.log(level, text)


def configure_environment(compiled_dirs=(), environ=None, require=False):
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
    for missing in [d for d in dirs if not os.path.isdir(d)]:
        _once(("missing", missing), 30,
              f"autotune: compiled kernels: {missing} is not a directory: "
              "nothing is served from it (build it with `autotune_cache "
              "compile`; --autotune_compiled_kernels separates directories "
              "with ',')")
    if dirs:
        manager = environ.get("TRITON_CACHE_MANAGER")
        if manager and manager != MANAGER:
            _once(("manager", manager), 30,
                  f"autotune: TRITON_CACHE_MANAGER={manager} is set: the "
                  f"compiled kernels in {', '.join(dirs)} are not served "
                  "(unset it to use them)")
            return chosen
        environ["TRITON_CACHE_MANAGER"] = MANAGER
        environ[COMPILED_DIRS_ENV] = json.dumps(dirs)
        if require:
            environ[REQUIRE_ENV] = "1"
        if environ.get("TRITON_INTERPRET") == "1":
            _once(("interpreter", tuple(dirs)), 20,
                  f"autotune: compiled kernels in {', '.join(dirs)} are not "
                  "used: kernels run on Triton's interpreter here, which "
                  "compiles nothing")
    return chosen


def compiled_dirs(environ=None):
    """The compiled-kernel directories this process was given."""
    environ = os.environ if environ is None else environ
    text = environ.get(COMPILED_DIRS_ENV, "")
    try:
        dirs = json.loads(text) if text else []
    except ValueError:
        dirs = []
    return [d for d in dirs if isinstance(d, str) and d] \
        if isinstance(dirs, list) else []


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


# -- reading a directory we did not write ---------------------------------------

def read_regular(path, limit):
    """The bytes of `path`, a regular file (not a link, a FIFO or a
    device: opened without following links and without blocking) of at
    most `limit` bytes; UnservableFile otherwise. FileNotFoundError as
    usual."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnservableFile("a link, not a file") from None
        raise UnservableFile(f"unreadable ({e.strerror or e})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnservableFile("not a regular file")
        if info.st_size > limit:
            raise UnservableFile(f"{info.st_size} bytes, more than the {limit} "
                             "such a file may hold")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnservableFile(f"more than the {limit} bytes such a file may "
                             "hold")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_object(path, limit=MAX_JSON_BYTES):
    """A JSON object from `path` (read_regular's checks); UnservableFile when
    it is none (garbled, nested too deep, another type)."""
    data = read_regular(path, limit)
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise UnservableFile("not valid JSON") from None
    if not isinstance(value, dict):
        raise UnservableFile(f"a JSON {type(value).__name__}, not an object")
    return value


def _checked(root, root_real, relative, limit):
    """The real path of the file `relative` (KEY/NAME) of the directory
    `root` (whose files resolve into `root_real`), if it is a regular file
    of at most `limit` bytes that resolves to exactly that place in
    `root_real`: a link out of the directory, or into another key's
    folder, is refused. FileNotFoundError when there is none."""
    given = os.path.join(root, relative)
    if not os.path.lexists(given):
        raise FileNotFoundError(errno.ENOENT, "no such file", given)
    real = os.path.realpath(given)
    if real != os.path.join(root_real, relative):
        raise UnservableFile("a link resolving outside its place in the "
                         "directory")
    try:
        info = os.stat(real)
    except OSError as e:
        raise UnservableFile(f"unreadable ({e.strerror or e})") from None
    if not stat.S_ISREG(info.st_mode):
        raise UnservableFile("not a regular file")
    if info.st_size > limit:
        raise UnservableFile(f"{info.st_size} bytes, more than the {limit} such "
                         "a file may hold")
    return real


def _root_real(root):
    """Where a compiled-kernel directory really is: the folder its
    manifest resolves into (under Bazel the directory's files are links
    into the output tree, and every file served must resolve there)."""
    return os.path.dirname(os.path.realpath(os.path.join(root,
                                                         MANIFEST_NAME)))


# -- the manifest and the build's identity ----------------------------------------

def cache_invalidating_env():
    """The cache-invalidating variables Triton reads that are set, with
    their values: Triton's keys hold them, so a build and a test must see
    the same ones."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    return dict(sorted(get_cache_invalidating_env_vars().items()))


def is_cache_invalidating(name):
    """Whether Triton's keys hold the variable `name` (asked of Triton:
    the names it reports set once `name` is set)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    saved = os.environ.get(name)
    os.environ[name] = saved if saved else "1"
    try:
        return name in get_cache_invalidating_env_vars()
    finally:
        if saved is None:
            os.environ.pop(name)


def _triton_key():
    # Triton's key of itself moved between versions.
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        from triton.compiler.compiler import triton_key
    return triton_key()


@functools.lru_cache(maxsize=None)
def _backend_hash(capability):
    # Heavy (Triton's compiler); only once compiled kernels are given.
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    return make_backend(GPUTarget("cuda", capability, 32)).hash()


def build_identity(targets):
    """This process as it enters Triton's cache keys, for the targets
    named (sm_90, ...): what a compiled directory's manifest records and
    what a test compares with it."""
    import triton  # heavy; only where compiled kernels are built or served
    hashes = {}
    for target in targets:
        try:
            hashes[target] = _backend_hash(int(target[3:].rstrip("a")))
        except Exception as e:  # no backend or ptxas here: said, compared
            hashes[target] = f"unavailable ({type(e).__name__})"
    return {
        "python": sys.implementation.cache_tag,
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
        "triton_version": triton.__version__,
        "triton_key": hashlib.sha256(_triton_key().encode()).hexdigest(),
        "triton_env": cache_invalidating_env(),
        "key_variables": {n: os.environ[n] for n in KEY_VARIABLES
                          if os.environ.get(n)},
        "backend_hash": hashes,
    }


def write_manifest(root, manifest):
    with open(os.path.join(root, MANIFEST_NAME), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def read_manifest(root):
    """The manifest of `root` and None, or None and one line saying what
    is wrong."""
    path = os.path.join(root, MANIFEST_NAME)
    if not os.path.isdir(root):
        return None, f"{root} is not a directory"
    try:
        # Followed: under Bazel the directory's files are links into the
        # output tree (read_regular still refuses FIFOs and devices).
        manifest = read_json_object(os.path.realpath(path))
    except FileNotFoundError:
        return None, (f"{root} holds no {MANIFEST_NAME}: not the output of "
                      "`autotune_cache compile`")
    except UnservableFile as e:
        return None, f"{path}: unreadable manifest ({e})"
    return manifest, None


def _pairs(there, here):
    """The variables whose values differ, as 'NAME=A there, B here'."""
    names = sorted(k for k in set(there) | set(here)
                   if there.get(k) != here.get(k))
    return "; ".join(f"{k}: {there.get(k, 'unset')} there, "
                     f"{here.get(k, 'unset')} here" for k in names)


def identity_problem(root):
    """Why this process would be served nothing from the compiled-kernel
    directory `root`, in one line naming the first difference between
    the build's identity (its manifest) and this process; None when the
    two agree. For the runtime and the doctor."""
    manifest, problem = read_manifest(root)
    if problem is not None:
        return problem
    built = manifest.get("identity")
    targets = manifest.get("targets")
    if not isinstance(built, dict) or not isinstance(targets, list) or \
            not all(isinstance(t, str) and t.startswith("sm_")
                    for t in targets):
        return (f"compiled kernels in {root} record no build identity "
                "(built by an older `autotune_cache compile`): nothing will "
                "be served; rebuild them")
    here = build_identity(targets)
    problem = _first_difference(built, here)
    if problem is None:
        return None
    return f"compiled kernels in {root} were {problem}: nothing will be served"


def _first_difference(built, here):
    for field, what in (("python", "under"), ("ext_suffix",
                                              "with extension suffix")):
        if built.get(field) != here[field]:
            return (f"built {what} {built.get(field)}, this test runs "
                    f"{here[field]}")
    if built.get("triton_version") != here["triton_version"]:
        return (f"built by Triton {built.get('triton_version')}, this test "
                f"runs Triton {here['triton_version']}")
    if built.get("triton_key") != here["triton_key"]:
        return (f"built by another build of Triton {here['triton_version']}"
                " (its key of itself differs from this one's)")
    variables = built.get("key_variables")
    for field in ("triton_env", "key_variables", "backend_hash"):
        if not isinstance(built.get(field), dict):
            return f"built with an unreadable {field} in its manifest"
    for what, there, now in (
            ("cache-invalidating variables", built["triton_env"],
             here["triton_env"]),
            ("TRITON_DEBUG", _debug(variables), _debug(here["key_variables"]))):
        pairs = _pairs(there, now)
        if pairs:
            return f"built with other {what} than this test's ({pairs})"
    for target, value in sorted(here["backend_hash"].items()):
        there = built["backend_hash"].get(target)
        if there != value:
            pairs = _pairs(_ptxas(variables), _ptxas(here["key_variables"]))
            return (f"built with ptxas {_release(there)} for {target}, this "
                    f"test's is {_release(value)}"
                    + (f" ({pairs})" if pairs else ""))
    return None


def _debug(variables):
    return {k: v for k, v in variables.items() if k == "TRITON_DEBUG"}


def _ptxas(variables):
    return {k: v for k, v in variables.items() if k != "TRITON_DEBUG"}


def _release(backend_hash):
    """`ptxas --version` in a backend hash, in a few words."""
    text = str(backend_hash)
    found = re.search(r"release ([0-9.]+), V([0-9.]+)", text)
    return f"V{found.group(2)}" if found else \
        text.splitlines()[0][:60] if text else "(none)"


def usable_root(root):
    """Whether binaries under `root` may be served in this process (see
    identity_problem). A refusal is logged once per root."""
    problem = identity_problem(root)
    if problem is not None:
        _once(("root", root), 30, f"autotune: {problem}")
        return False
    return True


# -- what was served ---------------------------------------------------------------

class ServedCounts:
    """What the read-through manager found in this process: launches
    served from a compiled directory, launches compiled although one was
    given (by kernel name)."""
    served = 0
    missed = 0
    missed_kernels = {}


def counts_report(environ=None):
    """Served and compiled counts for a run's reports; None when no
    compiled kernels were given."""
    dirs = compiled_dirs(environ)
    if not dirs:
        return None
    return {"directories": dirs, "served": ServedCounts.served,
            "compiled": ServedCounts.missed,
            "compiled_kernels": sorted(ServedCounts.missed_kernels)}


def merged_counts(reports):
    """One counts_report of several processes' (pytest-xdist workers');
    None when none was given compiled kernels."""
    reports = [r for r in reports if r]
    if not reports:
        return None
    return {"directories": sorted({d for r in reports
                                   for d in r["directories"]}),
            "served": sum(r["served"] for r in reports),
            "compiled": sum(r["compiled"] for r in reports),
            "compiled_kernels": sorted({k for r in reports
                                        for k in r["compiled_kernels"]})}


def counts_text(report):
    """The summary line's part for counts_report's `report`."""
    text = (f"compiled kernels: {report['served']} served, "
            f"{report['compiled']} compiled")
    if report["compiled_kernels"]:
        text += " (" + ", ".join(report["compiled_kernels"][:5]) + \
            (", ..." if len(report["compiled_kernels"]) > 5 else "") + ")"
    return text


def _usable_roots():
    roots = compiled_dirs()
    cached = _ROOTS.get(tuple(roots))
    if cached is None:
        cached = _ROOTS[tuple(roots)] = [(r, _root_real(r)) for r in roots
                                         if usable_root(r)]
    return roots, cached


_ROOTS = {}


def _base32_key(hash_text):
    """The key folder Triton names after a metadata's hash."""
    from triton.runtime import cache
    encode = getattr(cache, "_base32", None)
    return encode(hash_text) if encode else hash_text


def served_group(root, root_real, key, filename):
    """The group `filename` (NAME.json) of key folder `key` in a usable
    compiled directory, every file checked; None when the key is not
    there; UnservableFile (naming the file) when something of it may not be
    served."""
    folder = os.path.join(root, key)
    grp = os.path.join(key, f"__grp__{filename}")
    try:
        real = _checked(root, root_real, grp, MAX_JSON_BYTES)
    except FileNotFoundError:
        return None
    except UnservableFile as e:
        raise UnservableFile(f"{os.path.join(root, grp)}: {e}") from None
    try:
        children = read_json_object(real).get("child_paths")
    except UnservableFile as e:
        raise UnservableFile(f"{os.path.join(root, grp)}: {e}") from None
    if not isinstance(children, dict) or filename not in children:
        raise UnservableFile(f"{os.path.join(root, grp)}: no child_paths "
                         f"naming {filename}")
    group = {}
    for name in children:
        if not isinstance(name, str) or os.path.basename(name) != name or \
                name in ("", ".", ".."):
            raise UnservableFile(f"{os.path.join(root, grp)}: a child named "
                             f"{name!r}, not a file name")
        limit = MAX_JSON_BYTES if name.endswith(".json") else MAX_FILE_BYTES
        try:
            group[name] = _checked(root, root_real, os.path.join(key, name),
                                   limit)
        except FileNotFoundError:
            raise UnservableFile(f"{os.path.join(folder, name)}: missing") \
                from None
        except UnservableFile as e:
            raise UnservableFile(f"{os.path.join(folder, name)}: {e}") from None
    path = os.path.join(folder, filename)
    try:
        metadata = read_json_object(group[filename])
    except UnservableFile as e:
        raise UnservableFile(f"{path}: {e}") from None
    kernel = filename[:-len(".json")]
    own = metadata.get("hash")
    if not isinstance(own, str) or _base32_key(own) != key:
        raise UnservableFile(f"{path}: its metadata's hash is not this key's "
                         "(a binary of another launch)")
    if metadata.get("name") != kernel:
        raise UnservableFile(f"{path}: its metadata names kernel "
                         f"{metadata.get('name')!r}, the launch asks for "
                         f"{kernel!r}")
    return group


def _manager_class():
    from triton.runtime.cache import FileCacheManager

    class ReadThroughCacheManager(FileCacheManager):
        """Triton's file cache manager, reading compiled-kernel
        directories first (see the module docstring). Writes go to
        Triton's cache folder, as FileCacheManager's do."""

        def __init__(self, key, override=False, dump=False):
            try:
                super().__init__(key, override=override, dump=dump)
            except OSError as e:
                if is_unwritable_cache_error(e):
                    raise TritonCacheError(unwritable_message(
                        cache_dir(), e)) from e
                raise
            given, roots = ([], []) if (override or dump) \
                else _usable_roots()
            self._roots = roots
            self._serving = bool(given)

        def get_file(self, filename):
            # Only a group's files are served (through get_group); the
            # driver's own stubs are Triton's to build.
            return super().get_file(filename)

        def get_group(self, filename):
            found = super().get_group(filename)
            if found is not None:
                return found
            for root, root_real in self._roots:
                try:
                    group = served_group(root, root_real, self.key, filename)
                except UnservableFile as e:
                    _once(("unservable", str(e)), 30,
                          f"autotune: not served: {e}; the launch compiles")
                    continue
                if group is not None:
                    ServedCounts.served += 1
                    _once(("served", root), 20,
                          f"autotune: serving compiled kernels from {root}")
                    return group
            if self._serving:
                kernel = filename[:-len(".json")] \
                    if filename.endswith(".json") else filename
                ServedCounts.missed += 1
                ServedCounts.missed_kernels[kernel] = \
                    ServedCounts.missed_kernels.get(kernel, 0) + 1
                if os.environ.get(REQUIRE_ENV) == "1":
                    problems = [p for p in (identity_problem(r)
                                            for r in compiled_dirs()) if p]
                    raise CompiledKernelMissError(
                        f"autotune: kernel {kernel} is compiled although "
                        "compiled kernels were given "
                        f"({', '.join(compiled_dirs())}) and "
                        "--require_compiled_kernels is set"
                        + (f": {problems[0]}" if problems else
                           ": no binary for this launch's key there"))
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
