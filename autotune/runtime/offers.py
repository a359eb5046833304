"""What a decoration offers now, held against a cached entry.

Results are shared by kernel, source and key, not by the config list: two
decorations of one kernel may offer different configs, and a config can
be deleted from a list after it won. A cached winner is used only if the
current decoration offers it (its config list after pruning, as Triton
prunes, or its search space); otherwise the entry is stale and re-tuned.
Configs added to a list leave the entry a hit, with the added configs
counted as never measured, per fusion (an update measures those, beside
the winner, its runner-up and the first offered config, so that the
figures the entry shows compare times of one run).
"""
from autotune.errors import CacheFileError

NOT_OFFERED = "config no longer offered"


def _names(config):
    return set(config.kwargs)


class Offer:
    """The configs one call of a decoration offers: `configs_fn()` (its
    list after pruning, computed on first use: a miss or a fresh lookup
    needs it, a memoized hit does not) or `space` (a search space)."""

    def __init__(self, configs_fn=None, space=None):
        self._configs_fn = configs_fn
        self._pruned = None
        self.space = space

    @property
    def pruned(self):
        """The list as pruned, computed once: a miss of the same call tunes
        it (pruning may run the user's perf_model)."""
        if self._pruned is None and self._configs_fn is not None:
            self._pruned = list(self._configs_fn())
        return self._pruned

    def pruned_to_one(self):
        """Whether the list, as pruned for this call, holds one config (as
        Triton's autotuner sees it: nothing to benchmark). Answered from a
        pruning already done only: asking never runs the user's pruning."""
        return self._pruned is not None and len(set(self._pruned)) == 1

    @property
    def configs(self):
        """The configs offered, each once."""
        pruned = self.pruned
        return None if pruned is None else list(dict.fromkeys(pruned))

    def why_not(self, config):
        """None when `config` is offered; else why it is not, in words."""
        if self.space is not None:
            return None if self.space.offers(config) else \
                f"{NOT_OFFERED} ({config.short()} is outside the search space)"
        if config in self.configs:
            return None
        names = set().union(*map(_names, self.configs))
        if _names(config) != names:
            return (f"config parameters changed (cached {config.short()}; "
                    f"the decoration's configs set "
                    f"{', '.join(sorted(names)) or 'no parameters'})")
        return f"{NOT_OFFERED} ({config.short()})"

    def unmeasured(self, entry):
        """Offered configs the entry never measured (a search space is
        explored in part by design: none)."""
        if self.configs is None:
            return []
        try:
            candidates = entry.candidates
        except (CacheFileError, ValueError):
            # A candidate that does not decode: the hit stands (its winner
            # decoded); the report names the bad entry.
            return []
        measured = {c.config for c in candidates}
        measured.add(entry.best)
        return [c for c in self.configs if c not in measured]

