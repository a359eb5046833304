"""One record per fusion, with every stored candidate and why the winner
won: the schema that `autotune_cache show --candidates --json`, the Bazel
JSON report (runtime/session.py), the pytest plugin's --autotune-report
and the report page all use, built by fusion_record() alone.

Why the winner won is measure/selection.py's explain over the stored
candidates, the same function that gives select_winner's reason when the
entry is tuned; the stored times are those the selection saw (candidates
timed again carry the median of all their timings).
"""
import collections
import re

from autotune.codec import binary
from autotune.errors import CacheFileError
from autotune.log import printable
from autotune.measure import selection
from autotune.records import hardware_of
from autotune.report import roofline

REASONS = selection.REASONS


def winner_reason(entry, incumbent=selection.UNKNOWN, incumbent_config=None):
    """(kind, text) of why the entry's winner won: selection.explain over
    the stored candidates, the function select_winner's own reason comes
    from. incumbent: what the run knows of the fusion's incumbent
    (selection.KEPT / REPLACED / NONE; UNKNOWN for an entry read from a
    file). kind is one of REASONS; config values in the text are escaped."""
    reason = selection.explain(entry.candidates, entry.best, incumbent,
                               incumbent_config,
                               tuner=entry.provenance.tuner,
                               spread=entry.provenance.timing_spread)
    return reason.kind, reason.text()


def candidate_rows(entry):
    """Every stored candidate, fastest first, failures last. Each measured
    one's achieved bytes/s where the entry records its launch's bytes
    (every candidate moves the same bytes: the launch's)."""
    best = entry.best
    best_time = entry.run_time_us
    spread = entry.provenance.timing_spread
    moved = entry.work.bytes
    rows = []
    for cand in entry.candidates:
        ok = cand.ok
        rows.append({
            "config": cand.config.short(),
            "run_time_us": cand.run_time_us if ok else None,
            "ratio": round(cand.run_time_us / best_time, 4)
            if ok and best_time else None,
            # The schema stores the spread of the winner's timing only.
            "spread": spread if cand.config == best and spread else None,
            "failure": None if ok else cand.failure,
            "failure_detail": cand.failure_detail or None,
            "winner": cand.config == best,
            "bytes_per_s": moved / (cand.run_time_us * 1e-6)
            if ok and moved and cand.run_time_us else None,
        })
    rows.sort(key=lambda r: (r["failure"] is not None,
                             r["run_time_us"] or 0.0))
    return rows


def fusion_record(key, entry=None, **extra):
    """The record of one fusion. key: its CacheKey; entry: the Entry that
    answers it (None for a fusion that missed); extra: what a run knows
    beside the cache (status, source, incumbent)."""
    record = {"kernel": key.kernel, "signature": key.signature,
              "device": key.device, "fingerprint": key.fingerprint}
    record.update(extra)
    if entry is None:
        record.update(best=None, candidates=[])
        return record
    try:
        # Candidates and provenance are decoded here, on first use: a
        # malformed one is reported on the record, for the run's summary to
        # name, instead of failing a run whose kernels all worked.
        kind, text = (extra["reason"], extra["reason_text"]) \
            if "reason" in extra else \
            winner_reason(entry, *_incumbent_of(entry, extra))
        prov = entry.provenance
        rows = candidate_rows(entry)
        figures = roofline.figures(key.device, entry.work, entry.run_time_us)
    except CacheFileError as e:
        record.update(best=entry.best.short(), run_time_us=entry.run_time_us,
                      candidates=[], error=entry_error(key, e))
        return record
    record.update(
        best=entry.best.short(), run_time_us=entry.run_time_us,
        timing_spread=prov.timing_spread or None,
        tuner=prov.tuner or None,
        tuning_seconds=prov.tuning_seconds or None,
        timestamp=prov.timestamp or None,
        reason=kind, reason_text=text,
        # What tuning bought: the first offered config's time over the
        # winner's (None for entries that did not record it).
        speedup_over_default=_rounded(prov.speedup(entry.run_time_us)),
        method=prov.method or None,
        candidates=rows,
        # What the winner achieves against the device's roof
        # (report/roofline.py); None where the entry recorded no work.
        roofline=figures)
    record["advice"] = roofline.advice(record)
    return record


def _incumbent_of(entry, extra):
    """What a run's record says of the fusion's incumbent, as
    winner_reason takes it: a replaced incumbent that did not run
    correctly (or was not offered) lost no duel, the contest decided."""
    state = extra.get("incumbent")
    if state == selection.KEPT:
        return state, None
    if state == selection.REPLACED:
        name = extra.get("incumbent_config")
        held = next((c.config for c in entry.candidates
                     if c.ok and c.config.short() == name), None)
        return (state, held) if held is not None else (selection.NONE, None)
    return (selection.NONE if extra.get("status") == "tuned"
            else selection.UNKNOWN), None


def _rounded(value):
    return None if value is None else round(value, 3)


def entry_error(key, error):
    """One line naming the file and the entry a CacheFileError is about
    (the codec names an entry without a kernel name by its index)."""
    if not key.kernel:
        return f"{error.path}: {error.reason}"
    # The codec names the entry by the fields of the message it decodes; a
    # lazily decoded part holds no key fields.
    reason = binary.without_entry_name(str(error.reason))
    return (f"{error.path}: entry {key.kernel} [{key.signature}] on "
            f"{key.device}: {reason}")


def fusion_records(entries, kernel=None):
    """Records of the entries (of one kernel name when given), sorted
    naturally (numbers by value)."""
    chosen = [e for e in entries if kernel is None or e.key.kernel == kernel]
    chosen.sort(key=entry_sort_key)  # n=50 before n=100
    return [fusion_record(e.key, e) for e in chosen]


# -- natural order --------------------------------------------------------

_NUMBER = re.compile(r"(\d+)")


def natural_key(text):
    """Sorts numbers inside text by value: n_cols=50 before n_cols=100.
    The text split at its digit runs, each run a number: text, number,
    text, ... (a text part may be empty), so that two keys never compare
    a number with a text."""
    parts = _NUMBER.split(str(text))
    parts[1::2] = map(int, parts[1::2])
    return tuple(parts)


class _Memo(dict):
    """function(x), computed once per x: for values that repeat across a
    cache's entries (devices, kernels, fingerprints)."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def __missing__(self, x):
        value = self[x] = self.function(x)
        return value


def _device_versions(old, new):
    """"triton-3.6.0 -> triton-3.9.0": the versions the device keys of one
    hardware name, or "" when the keys are the same."""
    if old.key.device == new.key.device:
        return ""

    def versions(device):
        return device[len(hardware_of(device)):].lstrip("/")
    return f"{versions(old.key.device)} -> {versions(new.key.device)}"


def retune_reason(old, new):
    """Why a fusion whose winner stayed was tuned again: "kernel changed",
    the device key's versions ("triton-3.6.0 -> triton-3.9.0"), or both."""
    reasons = []
    if (old.key.fingerprint, old.key.key_version) != \
            (new.key.fingerprint, new.key.key_version):
        reasons.append("kernel changed")
    if old.key.device != new.key.device:
        reasons.append(_device_versions(old, new))
    return "; ".join(reasons)


def key_change(old, new):
    """retune_reason with what changed in the key: "kernel changed
    (fingerprint 5d75f7cd8a91d167 -> 0123456789abcdef)", a key version's
    change too, and the device key's versions; "" for one key."""
    reasons, kernel = [], []
    if old.key.fingerprint != new.key.fingerprint:
        kernel.append(f"fingerprint {old.key.fingerprint} -> "
                      f"{new.key.fingerprint}")
    if old.key.key_version != new.key.key_version:
        kernel.append(f"key version {old.key.key_version} -> "
                      f"{new.key.key_version}")
    if kernel:
        reasons.append(f"kernel changed ({', '.join(kernel)})")
    if old.key.device != new.key.device:
        reasons.append(_device_versions(old, new))
    return "; ".join(reasons)


def fusion_sort_key(fusion):
    return tuple(natural_key(part) for part in fusion)


def entry_sort_key(entry):
    return fusion_sort_key(entry.key.fusion)


# -- what changed between two caches ----------------------------------------

def format_time(us):
    if us is None:
        return "-"
    return f"{us / 1000.0:.3f} ms" if us < 1e6 else f"{us / 1e6:.3f} s"


NOT_OFFERED_REASON = "config no longer offered"  # runtime/offers.py


def not_offered_fusions(records):
    """(device, kernel, signature) of the fusion records (fusion_record)
    tuned because the cached winner was no longer offered."""
    return {(r["device"], r["kernel"], r["signature"]) for r in records
            if r.get("miss_reason") == NOT_OFFERED_REASON}


def winner_change(old, new):
    """The new winner of a fusion against the old one: measured in the same
    run when the new entry's candidates hold the old winner (the incumbent
    is measured under --retune and in every update where it is a
    candidate), else the old winner's stored time, from another run (and
    another load). Returns {"pct", "same_run", "old_now_us",
    "old_stored_us", "new_us", "text"}."""
    stored, now = old.run_time_us, new.run_time_us
    try:
        measured = [c.run_time_us for c in new.candidates
                    if c.ok and c.config == old.best and c.run_time_us]
    except CacheFileError:
        measured = []
    if measured:
        old_now = measured[0]
        pct = (now - old_now) / old_now * 100.0
        text = (f"{pct:+.1f}% in one run (stored {format_time(stored)} "
                f"then; old {format_time(old_now)} -> new "
                f"{format_time(now)} now)")
        return {"pct": pct, "same_run": True, "old_now_us": old_now,
                "old_stored_us": stored, "new_us": now, "text": text}
    pct = (now - stored) / stored * 100.0 if stored else None
    text = ((f"{pct:+.1f}% " if pct is not None else "")
            + f"across runs (old {format_time(stored)} stored then -> new "
            f"{format_time(now)} now; the old winner was not measured in "
            "this run)")
    return {"pct": pct, "same_run": False, "old_now_us": None,
            "old_stored_us": stored, "new_us": now, "text": text}


def _kernel_tag(key):
    return f"{key.fingerprint}/v{key.key_version}"


def pair_fusions(old, new):
    """Old and new entries by fusion id: (device, kernel, signature, the
    kernel fingerprint and key version), the same id on both sides for an
    entry of one key and for an edited kernel's fusion. Kernels of one name
    (functions of two modules) are told apart by their fingerprints: an
    entry keeps its own id while its key is on both sides; of the rest of
    one fusion, one old and one new entry are one kernel edited (a new
    fingerprint or key version), and any other is added or removed on its
    own. Returns ({id: old entry}, {id: new entry})."""
    olds = {e.key: e for e in old}
    news = {e.key: e for e in new}
    hardware = _Memo(hardware_of)

    def fusion_of(k):  # CacheKey.fusion, each device's hardware found once
        return hardware[k.device], k.kernel, k.signature
    old_ids, new_ids = {}, {}
    # A key on both sides is its own fusion id; only the rest is paired.
    for k in olds.keys() & news.keys():
        fid = fusion_of(k) + (_kernel_tag(k),)
        old_ids[fid], new_ids[fid] = olds[k], news[k]
    groups = {}
    for side, entries, other in ((0, olds, news), (1, news, olds)):
        for k, e in entries.items():
            if k not in other:
                groups.setdefault(fusion_of(k), ([], []))[side].append(e)
    for fusion, (left_old, left_new) in groups.items():
        # The same kernel re-measured under another Triton (the device
        # key's version): its fingerprint is its id.
        tags = collections.Counter(_kernel_tag(e.key) for e in left_new) \
            if len(left_old) > 1 and left_new else {}
        for e in list(left_old) if tags else ():
            tag = _kernel_tag(e.key)
            twin = [n for n in left_new if _kernel_tag(n.key) == tag]
            if len(left_old) > 1 and tags[tag] == 1 and len(twin) == 1:
                old_ids[fusion + (tag,)], new_ids[fusion + (tag,)] = \
                    e, twin[0]
                left_old.remove(e)
                left_new.remove(twin[0])
        if len(left_old) == 1 and len(left_new) == 1:
            fid = fusion + (_kernel_tag(left_new[0].key),)
            old_ids[fid], new_ids[fid] = left_old[0], left_new[0]
            continue
        for e in left_old:
            old_ids[fusion + (_kernel_tag(e.key),)] = e
        for e in left_new:
            new_ids[fusion + (_kernel_tag(e.key),)] = e
    return old_ids, new_ids


class CacheChanges:
    """A cache against its earlier contents, by fusion (pair_fusions: ids
    whose first three parts are device, kernel and signature): added,
    removed, winner changed, and re-tuned (a new kernel fingerprint or key
    version, the same winner). Lists in natural order."""

    def __init__(self, old, new, not_offered=()):
        """not_offered: (device, kernel, signature) of the new entries whose
        fusion the run re-tuned because the old winner was no longer
        offered (a fusion record's miss_reason NOT_OFFERED)."""
        self.old, self.new = pair_fusions(old, new)
        self.not_offered = set(not_offered)
        both = self.old.keys() & self.new.keys()
        # fusion_sort_key, each part's key made once: devices, kernels and
        # fingerprints repeat across fusions.
        parts = _Memo(natural_key)

        def order(fusion):
            return tuple(map(parts.__getitem__, fusion))
        self.added = sorted(self.new.keys() - self.old.keys(), key=order)
        self.removed = sorted(self.old.keys() - self.new.keys(), key=order)
        self.changed = sorted((f for f in both
                               if self.old[f].best != self.new[f].best),
                              key=order)
        self.retuned = sorted((f for f in both
                               if self.old[f].best == self.new[f].best and
                               self.old[f].key != self.new[f].key),
                              key=order)

    def __bool__(self):
        return bool(self.added or self.removed or self.changed or
                    self.retuned)

    def headline(self):
        """"A added, R removed, C changed" and, when fusions were tuned
        again for an edited kernel and kept their winners, how many."""
        line = (f"{len(self.added)} added, {len(self.removed)} removed, "
                f"{len(self.changed)} changed")
        if self.retuned:
            n = len(self.retuned)
            reasons = collections.Counter(
                retune_reason(self.old[f], self.new[f]) for f in self.retuned)
            line += "; " + ", ".join(
                f"{count} re-tuned ({reason})"
                for reason, count in sorted(reasons.items())) + \
                f", {'winners' if n > 1 else 'winner'} unchanged"
        return line

    def change(self, fusion):
        old, new = self.old[fusion], self.new[fusion]
        if (new.key.device, new.key.kernel, new.key.signature) in \
                self.not_offered:
            # No regression: the old winner could not run any more.
            return {"pct": None, "same_run": False, "old_now_us": None,
                    "old_stored_us": old.run_time_us,
                    "new_us": new.run_time_us,
                    "text": "the old winner is no longer offered (new "
                            f"{format_time(new.run_time_us)}; old "
                            f"{format_time(old.run_time_us)} stored then)"}
        return winner_change(old, new)

    def lines(self, limit=None):
        """One line per added, removed, changed and re-tuned fusion (a
        fusion's key change named: an edited kernel's fingerprints); past
        `limit`, a last line counting the rest."""
        # Kernels of one name and signature: each line names its own.
        shared = collections.Counter(
            f[:3] for f in self.old.keys() | self.new.keys())

        def name(f):
            entry = self.new.get(f) or self.old[f]
            return f"{f[1]} [{f[2]}] on {entry.key.device}" + (
                f" (kernel fingerprint {entry.key.fingerprint})"
                if shared[f[:3]] > 1 else "")

        def generate():
            for f in self.added:
                yield f"+ {name(f)}: {self.new[f].best.short()}"
            for f in self.removed:
                yield f"- {name(f)}: {self.old[f].best.short()}"
            for f in self.changed:
                old, new = self.old[f], self.new[f]
                moved = key_change(old, new)
                yield (f"~ {name(f)}: {old.best.short()} -> "
                       f"{new.best.short()} ({self.change(f)['text']})"
                       + (f"; re-tuned: {moved}" if moved else ""))
            for f in self.retuned:
                yield (f"= {name(f)}: {self.new[f].best.short()} (re-tuned: "
                       f"{key_change(self.old[f], self.new[f])}, winner "
                       "unchanged)")
        # Names and configs from the caches, escaped for a terminal.
        return at_most(map(printable, generate()), self.count(), limit)

    def count(self):
        """How many fusions the changes name."""
        return (len(self.added) + len(self.removed) + len(self.changed) +
                len(self.retuned))

    def as_dict(self):
        """The changes as plain data (`autotune_cache diff --json`, the
        pytest report's "changes"): "added" and "removed" entries; the
        "changed" winners, each against the old one (change()); the
        "retuned" fusions whose winner stayed. A changed or re-tuned
        fusion names its new key and, as old_*, the old key's device,
        fingerprint and key version, with the key's change in words."""
        def entry(e):
            return {**describe_key(e.key), "best": e.best.short(),
                    "run_time_us": e.run_time_us}

        def paired(f):
            old, new = self.old[f], self.new[f]
            return {**describe_key(new.key), "old_device": old.key.device,
                    "old_fingerprint": old.key.fingerprint,
                    "old_key_version": old.key.key_version,
                    "old_run_time_us": old.run_time_us,
                    "new_run_time_us": new.run_time_us,
                    "retune_reason": retune_reason(old, new),
                    "key_change": key_change(old, new)}

        def changed(f):
            change = self.change(f)
            pct = change["pct"]
            return {**paired(f), "old": self.old[f].best.short(),
                    "new": self.new[f].best.short(),
                    "run_time_change_pct": round(pct, 2) if pct is not None
                    else None,
                    "same_run": change["same_run"],
                    "old_measured_now_us": change["old_now_us"],
                    "change": change["text"]}

        return {"added": [entry(self.new[f]) for f in self.added],
                "removed": [entry(self.old[f]) for f in self.removed],
                "changed": [changed(f) for f in self.changed],
                "retuned": [{**paired(f), "best": self.new[f].best.short()}
                            for f in self.retuned]}


def describe_key(key):
    """A cache key as plain data."""
    return {"device": key.device, "kernel": key.kernel,
            "signature": key.signature, "fingerprint": key.fingerprint,
            "key_version": key.key_version}


def at_most(lines, total, limit=None):
    """The first `limit` of `total` lines (an iterable), then "... and N
    more" for the rest; every line when limit is None."""
    out = []
    for line in lines:
        if limit is not None and len(out) >= limit:
            out.append(f"... and {total - limit} more")
            break
        out.append(line)
    return out
