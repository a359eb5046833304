"""The one rule for two entries of one cache key: which wins.

Every place that meets two results for one fusion calls merge() or
choose(): regenerate (dumps of several targets), the pytest plugin (xdist
workers of one session), the cache tool's merge and pull, and push to a
remote cache. Conflicts are reported with one formatter, Conflict.line().

Policies:
  measured       what a single tuning run would keep, by the selection
                 rule's margins (records.SelectionRule): the entry holding
                 the incumbent's config (the checked-in or cached winner)
                 stays unless the other is faster by more than
                 incumbent_improvement; with no incumbent among them, the
                 smaller config stays unless the other is faster by more
                 than min_improvement. The recorded timing spread of either
                 entry widens the bar (a faster time inside the noise does
                 not win). Entries measured differently (Provenance.method)
                 are not compared: the incumbent's stays, else the first
                 met, and the conflict says so.
  prefer-faster  the lower run time, ties to the smaller config
  prefer-newer   the later provenance timestamp
  prefer-first   the entry met first (the order of the sources)
  fail           like prefer-first, and the caller stops on any conflict
"""
import sys
from typing import NamedTuple

from autotune.errors import AutotuneError
from autotune.log import printable
from autotune.records import DEFAULT_RULE, RETIRED_RULE_FIELDS

POLICIES = ("fail", "measured", "prefer-faster", "prefer-newer",
            "prefer-first")


class Conflict(NamedTuple):
    """Two sources with different winners for one key, and which was kept."""
    key: object
    first_source: str
    first: object   # Entry
    second_source: str
    second: object  # Entry
    kept_source: str

    def as_dict(self):
        return {**describe(self.key),
                "first": {"source": self.first_source,
                          "best": self.first.best.short(),
                          "run_time_us": self.first.run_time_us},
                "second": {"source": self.second_source,
                           "best": self.second.best.short(),
                           "run_time_us": self.second.run_time_us},
                "kept": self.kept_source}

    def line(self, resolved=True):
        text = (f"conflict: {self.key.kernel} [{self.key.signature}] on "
                f"{self.key.device}: {self.first_source} has "
                f"{self.first.best.short()} ({self.first.run_time_us:.3f} us),"
                f" {self.second_source} has {self.second.best.short()} "
                f"({self.second.run_time_us:.3f} us)")
        if methods_differ(self.first, self.second):
            text += (f"; measured differently ({self.first.provenance.method}"
                     f" vs {self.second.provenance.method}): times not "
                     "compared")
        # Names and configs from the caches, escaped for a terminal.
        return printable(text + (f"; kept {self.kept_source}'s" if resolved
                                 else ""))


def describe(key):
    return {"device": key.device, "kernel": key.kernel,
            "fingerprint": key.fingerprint, "signature": key.signature,
            "key_version": key.key_version}


def check_policy(policy):
    if policy not in POLICIES:
        raise AutotuneError(f"unknown merge policy {policy!r}; expected one "
                            f"of {', '.join(POLICIES)}")
    return policy


def methods_differ(first, second):
    """Whether two entries were measured differently (both record how):
    their times are not comparable head to head."""
    a, b = (_current_method(e.provenance.method) for e in (first, second))
    return bool(a and b and a != b)


def _current_method(method):
    """A timing method without the selection rule's retired fields
    (records.RETIRED_RULE_FIELDS), which entries tuned before they went
    still name."""
    return " ".join(word for word in method.split()
                    if word.split("=", 1)[0] not in RETIRED_RULE_FIELDS)


def by_measurement(first, second, incumbent=None, rule=DEFAULT_RULE):
    """The 'measured' policy (see the module docstring)."""
    if methods_differ(first, second):
        # Times from different timing methods say nothing about each
        # other: the incumbent's config stays, else the entry met first.
        if incumbent is not None and second.best == incumbent.best:
            return second
        return first
    if incumbent is not None and second.best == incumbent.best:
        holder, challenger, bar = second, first, rule.incumbent_improvement
    elif incumbent is not None and first.best == incumbent.best:
        holder, challenger, bar = first, second, rule.incumbent_improvement
    else:
        holder, challenger = sorted(
            (first, second), key=lambda e: e.best.sort_key)
        bar = rule.min_improvement
    noise = max(holder.provenance.timing_spread,
                challenger.provenance.timing_spread)
    if challenger.run_time_us < holder.run_time_us * (1.0 - max(bar, noise)):
        return challenger
    return holder


def choose(first, second, policy, incumbent=None, rule=DEFAULT_RULE):
    """The entry `policy` keeps of two entries of one key (first: the one
    met first)."""
    if policy == "measured":
        return by_measurement(first, second, incumbent, rule)
    if policy == "prefer-faster":
        return min((first, second),
                   key=lambda e: (e.run_time_us, e.best.sort_key))
    if policy == "prefer-newer":
        return second if second.provenance.timestamp > \
            first.provenance.timestamp else first
    check_policy(policy)
    return first


def merge(sources, policy="fail", incumbents=()):
    """sources: [(name, entries)], in order. One entry per key; two sources
    with different best configs for a key are a Conflict, resolved by
    `policy` (incumbents: entries whose configs are the incumbents of the
    'measured' policy). Returns (entries, conflicts); the entries keep the
    order in which their keys were first met."""
    check_policy(policy)
    incumbent_of = {e.key: e for e in incumbents}
    chosen, origin, conflicts = {}, {}, []
    for name, entries in sources:
        for entry in entries:
            current = chosen.get(entry.key)
            if current is None:
                chosen[entry.key], origin[entry.key] = entry, name
                continue
            if current.best == entry.best:
                continue
            kept = choose(current, entry, policy, incumbent_of.get(entry.key))
            kept_source = name if kept is entry else origin[entry.key]
            conflicts.append(Conflict(entry.key, origin[entry.key], current,
                                      name, entry, kept_source))
            if kept is entry:
                chosen[entry.key], origin[entry.key] = entry, name
    return list(chosen.values()), conflicts


def report(command, conflicts, policy, out=None):
    """A command's conflict lines; True when it must stop and write nothing
    (policy fail)."""
    out = out or sys.stderr
    for conflict in conflicts:
        print(conflict.line(resolved=policy != "fail"), file=out)
    if conflicts and policy == "fail":
        print(f"{command}: {len(conflicts)} conflict(s); nothing written. "
              "Choose --policy=" + ", ".join(
                  p for p in POLICIES if p != "fail"), file=out)
        return True
    return False
