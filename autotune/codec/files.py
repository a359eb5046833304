"""Results files on disk: the format by extension, the crc32 line of text
files, duplicate keys, and one atomic writer for every cache file."""
import contextlib
import errno
import gc
import os
import re
import secrets
import stat
import zlib

from autotune.codec import binary, schema, text, text_writer
from autotune.codec.columns import KEY_OF
from autotune.errors import CacheFileError
from autotune.flags import DEFAULT_MAX_CACHE_BYTES
from autotune.log import printable


@contextlib.contextmanager
def no_gc():
    """Bulk decoding creates millions of small acyclic objects; the cyclic
    collector would rescan the growing heap again and again (measured: half
    of the load time of a 100,000-entry file)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sort_entries(entries):
    return sorted(entries, key=KEY_OF)


CRC_PREFIX = b"# crc32: "


def encode_chunks(entries, path):
    """The bytes of a results file for `entries`, in chunks: text or
    binary by the extension of `path`. Runs with the cyclic collector
    paused (see no_gc)."""
    with no_gc():
        entries = sort_entries(entries)
        if not text.is_text_path(path):
            yield from binary.encode_binary_chunks(entries)
            return
        crc = 0
        for chunk in text_writer.encode_text_chunks(entries):
            crc = zlib.crc32(chunk, crc)
            yield chunk
        # A comment to parsers; to our readers, proof that no line was
        # edited since the writer produced it.
        yield CRC_PREFIX + b"%08x\n" % crc


def encode(entries, path):
    return b"".join(encode_chunks(entries, path))


def crc_matches(data):
    """Whether text `data` ends with a crc32 line matching the rest."""
    end = data.rfind(b"\n", 0, len(data) - 1) + 1
    line = data[end:]
    if not line.startswith(CRC_PREFIX) or len(line) != len(CRC_PREFIX) + 9:
        return False
    try:
        return int(line[len(CRC_PREFIX):-1], 16) == zlib.crc32(
            memoryview(data)[:end])
    except ValueError:
        return False


# git's conflict markers, at the start of a line (a merge without the
# cache's merge driver leaves them in a text cache).
_CONFLICT_MARKER = re.compile(rb"^(<<<<<<<|>>>>>>>)(?: |$)", re.M)


def conflict_marker_line(data):
    """The line number of the first git conflict marker in `data`, or
    None when there is none."""
    match = _CONFLICT_MARKER.search(data)
    return None if match is None else data.count(b"\n", 0, match.start()) + 1


def decode(data, path, parse_all=False, check_crc=False):
    """Entries of a results file's bytes. parse_all: parse all of a binary
    file now instead of leaving candidates and provenance for their first
    use. check_crc: check a binary file's crc32 (parse_all does too)."""
    try:
        return _decode(data, path, parse_all, check_crc)
    except CacheFileError:
        # Looked for only when the file does not decode: a valid cache
        # holds no such line.
        line = conflict_marker_line(data)
        if line is None:
            raise
        raise CacheFileError(
            path, f"holds git conflict markers (line {line}): a git merge "
            "without the cache's merge driver left them; set the driver up "
            "(docs/cache-tool.md#git-merges) and merge again, or take one "
            "side and regenerate") from None


def _decode(data, path, parse_all=False, check_crc=False):
    with no_gc():
        if text.is_text_path(path):
            try:
                decoded = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CacheFileError(
                    path, f"not UTF-8 text ({e}); binary files must not use "
                    f"a text extension ({', '.join(text.TEXT_EXTENSIONS)})")
            # A matching crc32 line (a few ms to check) shows that no line
            # was edited since the writer produced the file.
            entries = text.decode_text(decoded, path,
                                       trusted=crc_matches(data))
        else:
            entries = binary.decode_binary(data, path, parse_all, check_crc)
        check_duplicates(entries, path)
        check_durations(entries, data, path)
        return entries


# Where a provenance duration that is not a finite number >= 0 may be: in
# text, a value that is signed, holds a letter other than an exponent's e
# (nan, inf) or has a 3-digit positive exponent; in
# binary, a duration's tag then a double with the sign bit set or all
# exponent bits set. Most files match nowhere; a match (-0.0, or a tag
# byte inside a string) only costs a check of every entry's provenance.
_SUSPECT_TEXT = re.compile(
    rb"(?:timing_spread|tuning_seconds|default_run_time_us): (?:[-+]|[^ \n}]*?"
    rb"(?:[a-df-zA-DF-Z]|[eE]\+?[0-9]{3}))")
_DURATION_TAGS = (schema.PROVENANCE.timing_spread,
                  schema.PROVENANCE.tuning_seconds,
                  schema.PROVENANCE.default_run_time_us)


_SUSPECT_BINARY = re.compile(
    b"[" + b"".join(re.escape(tag) for tag in _DURATION_TAGS) + b"]"
    + rb".{6}(?:[\xf0-\xff][\x7f\xff]|.[\x80-\xff])", re.DOTALL)


def _binary_suspect(data):
    if len(data) < 1 << 20:  # not worth importing numpy for
        return _SUSPECT_BINARY.search(data) is not None
    import numpy as np  # a vector scan: the pattern's is 5x slower
    view = np.frombuffer(data, dtype=np.uint8)
    tag = np.zeros(len(view) - 8, dtype=bool)
    for code in _DURATION_TAGS:  # one byte each
        tag |= view[:-8] == code[0]
    top, below = view[8:], view[7:-1]
    return bool(np.any(tag & ((top >= 0x80) | ((top == 0x7F)
                                                & (below >= 0xF0)))))


def check_durations(entries, data, path):
    """A provenance duration (tuning_seconds, timing_spread) that is not a
    finite number >= 0 is an error at load naming the entry, as a run
    time is: it must not load, then fail at the first hit or be copied
    out by a tool. A fast scan of the bytes first: provenance is otherwise
    decoded only when used."""
    if text.is_text_path(path):
        if _SUSPECT_TEXT.search(data) is None:
            return
    elif not _binary_suspect(data):
        return
    for entry in entries:
        try:
            entry.provenance  # noqa: B018
        except CacheFileError as e:
            if not entry.key.kernel:  # the decoder named it by its index
                raise CacheFileError(path, e.reason) from None
            # The decoder may not know the key.
            raise CacheFileError(
                path, f"entry for kernel {entry.key.kernel} "
                f"[{entry.key.signature}]: "
                f"{binary.without_entry_name(e.reason)}") from None


def check_duplicates(entries, path):
    keys = list(map(KEY_OF, entries))
    if len(set(keys)) == len(keys):
        return
    seen = {}
    for entry in entries:
        other = seen.get(entry.key)
        if other is not None:
            verdict = ("different configs" if not other.same_result(entry)
                       else "the same config")
            raise CacheFileError(
                path, f"duplicate key with {verdict}: "
                f"{printable(entry.key.describe())}")
        seen[entry.key] = entry


# The largest cache read, unless a caller says (--autotune_max_cache_bytes,
# the tool's --max_cache_bytes).
MAX_CACHE_BYTES = DEFAULT_MAX_CACHE_BYTES
_CHUNK = 1 << 20


def _kind(mode):
    for test, name in ((stat.S_ISCHR, "a character device"),
                       (stat.S_ISFIFO, "a pipe"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def too_large(path, size, limit, at_least=False):
    return CacheFileError(
        path, f"{'more than ' if at_least else ''}{size} bytes, over the "
        f"limit of {limit} bytes for a cache (raise it with "
        "--autotune_max_cache_bytes, or --max_cache_bytes for the tool)")


def read_stream(f, path, limit=None):
    """All bytes of an open file, at most `limit` (default MAX_CACHE_BYTES).
    A regular file is read at once after its size is checked; anything
    else (a pipe, stdin, a device) in chunks, stopping at the limit or at
    the first chunk that no cache starts with (a NUL byte: /dev/zero)."""
    limit = MAX_CACHE_BYTES if limit is None else limit
    info = os.fstat(f.fileno())
    if stat.S_ISREG(info.st_mode):
        if info.st_size > limit:
            raise too_large(path, info.st_size, limit)
        return f.read()
    chunks, size = [], 0
    while True:
        chunk = f.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        if not chunks and chunk[:1] == b"\0":
            # Field tag 0 does not exist and text has no NUL bytes.
            kind = _kind(info.st_mode)
            raise CacheFileError(path, f"not a cache file ({kind} that "
                                 "starts with a NUL byte)")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise too_large(path, limit, limit, at_least=True)


def read_bytes(path, limit=None):
    """The bytes of a cache file, at most `limit` (see read_stream);
    CacheFileError naming it if unreadable."""
    try:
        with open(path, "rb") as f:
            return read_stream(f, path, limit)
    except FileNotFoundError:
        raise CacheFileError(path, "no such file") from None
    except IsADirectoryError:
        raise CacheFileError(path, "is a directory, not a cache file") \
            from None
    except OSError as e:
        raise CacheFileError(path, f"cannot read: {e.strerror}") from None


def load_results(path, parse_all=False, limit=None, check_crc=False):
    """Reads a results file; raises CacheFileError naming it on any problem.
    parse_all, check_crc: see decode(); limit: see read_stream()."""
    return decode(read_bytes(path, limit), path, parse_all, check_crc)


def is_regular_file(path):
    """Whether `path` is a regular file or a link to one."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _write_chunks(f, data):
    if isinstance(data, bytes):
        f.write(data)
        return
    chunks = iter(data)
    try:
        for chunk in chunks:
            f.write(chunk)
    finally:  # an encoder stopped halfway runs its clean-up now
        if hasattr(chunks, "close"):
            chunks.close()


def write_temp(path, data, mode=None):
    """Writes `data` (bytes, or an iterable of bytes chunks written as they
    come) to a new temporary file next to `path`, synced to disk, and
    returns its name. The file is created with the user's umask, as any
    file a program creates, or given `mode`; on any failure nothing is
    left behind and an OSError (or the encoder's exception) propagates."""
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory,
                       f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_chunks(f, data)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _unless_unchanged(data, old):
    """None when `data` (bytes or chunks) is exactly the content of the
    open file `old`; else the chunks of `data`. The comparison runs as the
    chunks come, holding none of them: at the first difference, the part
    already compared equal is read back from `old`."""
    chunks = iter((data,) if isinstance(data, bytes) else data)
    same = 0
    for chunk in chunks:
        if old.read(len(chunk)) == chunk:
            same += len(chunk)
            continue
        return _changed(old, same, chunk, chunks)
    if old.read(1) == b"":
        if hasattr(chunks, "close"):
            chunks.close()
        return None
    return _changed(old, same, b"", chunks)


def _changed(old, same, chunk, rest):
    old.seek(0)
    while same:
        part = old.read(min(_CHUNK, same))
        same -= len(part)
        yield part
    yield chunk
    yield from rest


def atomic_write(path, data):
    """Writes via a temporary file in the same directory and a rename: a
    reader, or a crash, sees the old file or the new one, never a mix.
    data: bytes, or an iterable of bytes chunks (written as they come).
    Returns False, leaving the file as it was (its time stamps too), when
    it already holds exactly `data`; True when it was written.

    An existing file keeps its mode; a new one gets the user's umask. A
    symlink at `path` is written through: its target is replaced and the
    link stays. What stands at `path` is replaced only when it is a regular
    file: a character device or a pipe is written through (/dev/null
    discards, /dev/full fails), anything else is refused, so that no
    device or special file is ever replaced by a regular one. Failures
    raise CacheFileError naming `path`, and leave the old file as it was.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheFileError(path, "is a symbolic link loop; not "
                                 "written") from None
        raise CacheFileError(path, f"cannot write: {e.strerror or e}") \
            from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        if stat.S_ISDIR(info.st_mode):
            raise CacheFileError(path, "is a directory")
        if stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode):
            _write_through(path, data)
            return True
        raise CacheFileError(path, f"is {_kind(info.st_mode)}, not a "
                             "regular file; not replaced")
    target = os.path.realpath(path) if os.path.islink(path) else path
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise CacheFileError(path, f"directory {directory} does not exist")
    mode = None if info is None else stat.S_IMODE(info.st_mode)
    try:
        with contextlib.ExitStack() as stack:
            if info is not None:
                try:
                    old = stack.enter_context(open(target, "rb"))
                except OSError:  # write-only: written without comparing
                    pass
                else:
                    data = _unless_unchanged(data, old)
                    if data is None:
                        return False
            tmp = write_temp(target, data, mode)
    except OSError as e:
        raise CacheFileError(path, f"cannot write: {e.strerror or e}") \
            from None
    try:
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CacheFileError(path, f"cannot write: {e.strerror or e}") \
            from None
    return True


def _write_through(path, data):
    """Writes into a character device or a pipe as it is (no temporary
    file, no rename: there is nothing to replace atomically)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        with os.fdopen(fd, "wb") as f:
            _write_chunks(f, data)
    except OSError as e:
        raise CacheFileError(path, f"cannot write: {e.strerror or e}") \
            from None


def dump_results(entries, path):
    """Writes a results file (see atomic_write); False when it already
    held exactly these entries and was left as it was."""
    return atomic_write(path, encode_chunks(list(entries), path))
