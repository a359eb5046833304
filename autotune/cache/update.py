"""What a cache file holds after a run: the one rule for updating a file
with a run's results, used by the dump at exit
(autotune/runtime/session.py), the pytest plugin's update
(autotune/pytest_plugin.py) and regenerate (autotune/cli/regenerate.py).

1. The runs (a process's results, xdist workers, dump targets) become one
   entry per key by the merge rule (merge.py, policy "measured", the file's
   entries as the incumbents); two runs with different winners for a key
   are a conflict, reported by the caller.
2. A fusion (device, kernel, signature) a run produced supersedes the
   file's entries of that fusion, whatever their fingerprint and whatever
   Triton version their device key names (an upgrade re-measured under
   the new version replaces the old version's entry); where the
   key and the winner are the same, the file's entry stays verbatim (its
   times, candidates and timestamp too), so that a run that changed
   nothing leaves the file byte-identical; unless the run measured
   configs the file's entry never did (configs added to a list), whose
   times the run's entry carries, or measured it under another Triton,
   torch or CUDA major.minor (its provenance records the new ones).
3. The file's other entries are kept, except on the devices given as
   `prune_devices`: there, an entry no run produced any more (a kernel
   that changed, a shape no test uses) is removed. Another device's
   entries are never removed: a run cannot tell what that device needs.
"""
from typing import NamedTuple

from autotune.cache import merge
from autotune.records import major_minor, undecodable


class Update(NamedTuple):
    """The outcome of update()."""
    entries: list    # what the file holds now
    kept: list       # the file's entries no run superseded, carried over
    removed: list    # the file's entries whose key the file loses
    conflicts: list  # [merge.Conflict] between the runs


def _measured_more(entry, previous):
    """Whether `entry` holds candidates of configs `previous` never
    measured."""
    return bool({c.config for c in entry.candidates}
                - {c.config for c in previous.candidates})


def _versions(entry):
    """The Triton, torch and CUDA major.minor an entry was tuned with: an
    entry re-measured under others (a torch upgrade keeps the device key)
    replaces the file's, whose versions every load would count as drift."""
    p = entry.provenance
    return tuple(major_minor(v) for v in (p.triton_version, p.torch_version,
                                          p.cuda_version))


def _carrying_requests(entry, runs_by_key):
    """`entry` with the compile requests the runs recorded for the same key
    and winner, when it holds none: an entry of a cache written before
    they were recorded learns how its binary is built, once; one that holds
    some stays as it is (a run that changes nothing leaves the file byte
    for byte)."""
    if entry.compile_requests:
        return entry
    requests = set()
    for e in runs_by_key.get(entry.key, ()):
        if e.best == entry.best:
            requests.update(e.compile_requests)
    if not requests:
        return entry
    requests = tuple(sorted(requests))
    if requests == tuple(entry.compile_requests):
        return entry
    return entry.replace(compile_requests=requests)


def update(old_entries, runs, prune_devices=()):
    """old_entries: the file's entries ([] for a new file). runs: [(source
    name, entries)], in order. prune_devices: devices whose entries no run
    produced are removed (see the module docstring)."""
    old_entries = list(old_entries)
    tuned, conflicts = merge.merge(runs, "measured", old_entries)
    runs_by_key = {}
    for _, run_entries in runs:
        for e in run_entries:
            runs_by_key.setdefault(e.key, []).append(e)
    old_by_key = {e.key: e for e in old_entries}
    entries = []
    for entry in tuned:
        previous = old_by_key.get(entry.key)
        # Same key, same winner: the file's entry stays as it is, unless
        # the run measured configs it never did (configs added to the
        # decoration's list: their times join it, and the next update
        # finds nothing left to measure).
        keep = previous is not None and undecodable(previous) is None and \
            previous.best == entry.best and \
            not _measured_more(entry, previous) and \
            _versions(previous) == _versions(entry)
        entries.append(_carrying_requests(previous, runs_by_key)
                       if keep else _carrying_requests(entry, runs_by_key))
    superseded = {e.key.fusion for e in tuned}
    new_keys = {e.key for e in tuned}
    prune_devices = set(prune_devices)
    kept, removed = [], []
    for entry in old_entries:
        if entry.key.fusion in superseded:
            if entry.key not in new_keys:
                removed.append(entry)  # another fingerprint of the fusion
        elif entry.key.device in prune_devices:
            removed.append(entry)
        else:
            kept.append(entry)
    return Update(entries + kept, kept, removed, conflicts)
