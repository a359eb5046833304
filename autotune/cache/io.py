"""Reading and writing whole caches, for the tools: results files (text or
binary, by extension or by content), per-fusion directories, stdin and
remote namespaces, behind one read_cache and one write_cache."""
import collections
import os
import sys

from autotune import codec
from autotune.cache.remote_namespace import read_remote
from autotune.cache.remote import is_remote_url, redact
from autotune.cache.tiers import PerFusionDirectory
from autotune.errors import CacheFileError, ToolError


class ReadEntries(list):
    """Entries read from a stream that has no size of its own (stdin, a
    pipe): `size` is the number of bytes read."""

    size = None


BINARY_EXTENSIONS = (".pb", ".binpb", ".binarypb", ".bin")


def looks_like_text(data):
    """Text files start with a comment or a field name; binary ones with a
    field tag (a control byte for every field of the schema)."""
    head = data[:256].lstrip()
    return head[:1] == b"#" or head[:1].isalpha()


# The largest cache the tools read (--max_cache_bytes).
max_cache_bytes = codec.MAX_CACHE_BYTES


def _read_sniffed(path, data, parse_all):
    """Entries of bytes whose format the name does not tell (stdin, a
    pipe such as bash's <(git show ...), an unknown extension)."""
    as_name = "input.textproto" if looks_like_text(data) else "input.pb"
    try:
        entries = ReadEntries(codec.decode(data, as_name, parse_all=parse_all,
                                           check_crc=True))
    except CacheFileError as e:
        raise CacheFileError(path, e.reason) from None
    entries.size = len(data)
    return entries


def read_cache(path, parse_all=False, warn=None):
    """Entries of a results file or a per-fusion directory. parse_all: parse
    every field of a binary file now (verify, show); otherwise candidates
    and provenance are parsed when used, and copied unparsed when written
    in the same format. `-` reads stdin; when the extension does not say
    text or binary, the content does. A remote namespace's values that are
    not entries are skipped and given to `warn` (default: a warning)."""
    if is_remote_url(path):
        return read_remote(path, warn)
    if path == "-":
        try:
            data = codec.read_stream(sys.stdin.buffer, "-", max_cache_bytes)
            entries = _read_sniffed(path, data, parse_all)
            codec.decode_heads(entries)
        except OSError as e:
            raise ToolError(f"-: cannot read stdin: {e.strerror or e}")
        return entries
    if not os.path.exists(path):
        raise ToolError(f"{path}: no such file or directory")
    try:
        if os.path.isdir(path):
            entries = PerFusionDirectory(path, "read").entries()
        elif not codec.is_text_path(path) and \
                not path.endswith(BINARY_EXTENSIONS):
            entries = _read_sniffed(
                path, codec.read_bytes(path, max_cache_bytes), parse_all)
        else:
            # Every tool read checks a binary file's crc32: a copy must not
            # give a damaged file a fresh, matching one.
            entries = codec.load_results(path, parse_all=parse_all,
                                         limit=max_cache_bytes,
                                         check_crc=True)
        # Every subcommand reads the best configs: a malformed one is bad
        # input, reported before anything else happens.
        codec.decode_heads(entries)
        return entries
    except OSError as e:
        raise ToolError(f"{path}: {e.strerror}")


def materialize(entries, path, everything=False):
    """Decodes lazily decoded fields now, so a bad line is reported as bad
    input before anything is written. Entries of canonical text files are
    checked by one pattern match and then copied as they are. Entries of
    binary files were framed by protobuf's parser when loaded; their
    candidates and provenance are copied as they are, unparsed.
    everything (verify): decode every field of every entry."""
    try:
        codec.decode_heads(entries)
        for entry in entries:
            if everything:
                entry.candidates  # noqa: B018
                entry.provenance  # noqa: B018
                continue
            if codec.is_message_backed(entry):
                continue  # best decoded in bulk above; the rest is copied
            entry.best  # noqa: B018
            if codec.copyable_rest(entry) is None:
                entry.candidates  # noqa: B018
    except (ValueError, IndexError) as e:
        raise ToolError(f"{path}: {e}")


def write_cache(entries, path, inputs=()):
    """Writes a results file, or a per-fusion directory when `path` is a
    directory or ends with a slash."""
    if is_remote_url(path):
        raise ToolError(f"{redact(path)}: a remote cache is written with "
                        "`push` "
                        "(its policies decide conflicts with the server's "
                        "entries), not as an output file")
    real = os.path.realpath(path)
    for source in inputs:
        if os.path.realpath(source) == real:
            raise ToolError(f"{path}: is also an input; inputs are never "
                            "modified (write elsewhere, then move)")
    try:
        if path.endswith(os.sep) or os.path.isdir(path):
            _write_directory(entries, path)
        else:
            codec.dump_results(entries, path)
    except OSError as e:
        raise ToolError(f"{path}: {e.strerror or e}")


def _write_directory(entries, path):
    """One atomic file per entry; a directory this call created is removed
    again when a write fails."""
    created = not os.path.lexists(path)
    os.makedirs(path, exist_ok=True)
    written = []
    try:
        directory = PerFusionDirectory(path, "update")
        for entry in entries:
            target = directory.file_path(entry.key)
            codec.atomic_write(target, codec.encode([entry], target))
            written.append(target)
    except BaseException:
        if created:
            for target in written:
                os.unlink(target)
            os.rmdir(path)
        raise


def stats(entries, path):
    by_device = collections.Counter(e.key.device for e in entries)
    by_kernel = collections.Counter(e.key.kernel for e in entries)
    by_triton = collections.Counter(e.provenance.triton_version or "?"
                                    for e in entries)
    stamps = sorted(e.provenance.timestamp for e in entries
                    if e.provenance.timestamp)
    remote = getattr(entries, "info", None)
    dangling = 0
    if remote is not None:
        size = remote["bytes"]
    elif getattr(entries, "size", None) is not None:
        size = entries.size
    elif os.path.isdir(path):
        size, dangling = _directory_bytes(path)
    else:
        size = os.path.getsize(path)
    return {"path": path, "entries": len(entries), "bytes": size,
            "by_device": dict(sorted(by_device.items())),
            "by_kernel": dict(sorted(by_kernel.items())),
            "by_triton_version": dict(sorted(by_triton.items())),
            "oldest": stamps[0] if stamps else None,
            "newest": stamps[-1] if stamps else None,
            **({"remote": remote} if remote is not None else {}),
            **({"dangling_links": dangling} if dangling else {})}


def _directory_bytes(path):
    """(bytes of the files in a per-fusion directory, dangling links
    skipped). The runtime moves a bad entry aside as NAME.corrupt-*; when
    the entry was a symbolic link, the link is moved and may name nothing."""
    size = dangling = 0
    for name in os.listdir(path):
        full = os.path.join(path, name)
        try:
            size += os.path.getsize(full)
        except FileNotFoundError:
            # A link to nothing, or a file gone since the listing (a
            # temporary file renamed into place).
            dangling += os.path.islink(full)
    return size, dangling
