"""What a session's dump (--dump_autotune_results_to) writes at exit: the
results this run used, with the compile requests of their launches,
merged into the file already there (autotune/cache/update.py). It reads
a DumpSource, the session's record of exactly what the dump needs
(autotune.runtime.session:Session.dump_source), not the session."""
import dataclasses
from typing import Mapping, Optional

from autotune import codec
from autotune.cache import update as cache_update
from autotune.errors import AutotuneError, CacheFileError
from autotune.binaries import compile_requests
from autotune.runtime.freshness import without_triton


@dataclasses.dataclass(frozen=True)
class DumpSource:
    """What the dump reads of a session."""
    # The results this run used, by key (the session's memory tier).
    memory: Mapping
    # The compile requests this run recorded: {key: {request: None}}.
    compile_requests: Mapping
    # --autotune_max_cache_bytes, for reading the file merged into.
    max_cache_bytes: Optional[int] = None


def dump_entries(source):
    """The results this run used: hits and tuned fusions, this device
    (and entries tuned under another Triton that answered its keys),
    with the compile requests of their launches."""
    return [_with_compile_requests(source, e) for e in
            {e.key: e for e in source.memory.values()}.values()]


def _with_compile_requests(source, entry):
    """`entry` holding the requests this run recorded for its winner
    when it holds none under this run's Triton (a cache written before
    they were recorded, or under another Triton: each version's requests
    sit side by side, and `autotune_cache compile` builds the running
    Triton's); an entry that holds some of this Triton's keeps them as
    they are, so a run that changes nothing writes its file back byte
    for byte."""
    held = {r.triton_version for r in entry.compile_requests}
    seen = [r for r in _recorded_for(source, entry.key)
            if r.triton_version not in held]
    if not seen:
        return entry
    try:
        return _joined_requests(entry, seen)
    except CacheFileError:
        # Its stored candidates do not decode: the update measures the
        # fusion again and records the requests then.
        return entry


def _recorded_for(source, key):
    """The requests this run recorded under `key`, or under the key it
    asked that an entry tuned under another Triton answered (the device
    key names the Triton version: the hit's key is the entry's, the
    launch's is this run's)."""
    loose = (without_triton(key.device),) + tuple(key[1:])
    found = {}
    for asked, requests in source.compile_requests.items():
        if asked == key or \
                (without_triton(asked.device),) + tuple(asked[1:]) == loose:
            found.update(requests)
    return list(found)


def _joined_requests(entry, seen):
    requests = tuple(sorted(set(entry.compile_requests) | {
        r for r in seen if compile_requests.mismatch(r, entry) is None}))
    return entry.replace(compile_requests=requests) if requests \
        else entry


def read_existing(source, path):
    """The entries of the file the dump merges into; an AutotuneError
    naming it when it cannot be read (checked at start-up too)."""
    try:
        return codec.load_results(path, limit=source.max_cache_bytes)
    except CacheFileError as e:
        raise AutotuneError(
            f"--dump_autotune_results_to: the existing file cannot be "
            f"read ({e}); the dump merges into it, so fix or remove it")


def merged_entries(source, path):
    """What the dump writes: the existing file at `path` updated with
    the entries this run used (autotune/cache/update.py): a fusion this
    run met replaces the file's entries of that fusion (an unchanged
    winner stays as the file had it), every other entry of the file is
    kept. A dump therefore never drops what it did not replace: not the
    loaded entries this run did not touch, not the fusions a failed run
    never reached. Returns (entries, number kept from the file)."""
    old = read_existing(source, path) \
        if codec.is_regular_file(path) else []  # /dev/null: nothing
    updated = cache_update.update(old, [("this run",
                                         dump_entries(source))])
    return updated.entries, len(updated.kept)
