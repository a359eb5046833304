"""What a pytest session that autotuned did, as one record: the JSON
report's contents (PluginResult.as_dict, `--autotune-report`) and the
plugin's lines of pytest's terminal summary (PluginResult.lines). The
plugin (autotune/pytest_plugin.py) fills it in at the end of the session;
autotune/pytest_terminal.py writes its lines."""
import dataclasses
from typing import NamedTuple, Optional

from autotune.binaries import triton_cache
from autotune.runtime.run_report import unmeasured_text

# The session statistics the run adds up over its sessions (and, under
# xdist, over its workers); each is a field of PluginResult.
STAT_FIELDS = ("hits", "remote_hits", "tuned", "misses", "nearest",
               "candidate_benchmarks", "tuning_seconds", "saved_seconds",
               "unmeasured_configs", "unmeasured_fusions", "drifted_entries")

# Fields an update run sets at its end (or a failed report write): the
# JSON report has their keys only once they are set.
_SET_AT_THE_END = ("conflicts", "unused", "prune_refused", "changes",
                   "entries", "written", "not_written_because", "errors")


class SummaryLine(NamedTuple):
    """One line of the terminal summary; color is pytest's markup name
    ("red", "yellow") or None."""
    text: str
    color: Optional[str] = None


@dataclasses.dataclass
class PluginResult:
    mode: str                       # "load" or "update"
    retune: bool                    # --autotune-update=all
    cache: str                      # the cache file's path
    hits: int = 0
    remote_hits: int = 0
    tuned: int = 0
    misses: int = 0
    nearest: int = 0
    candidate_benchmarks: int = 0
    tuning_seconds: float = 0.0
    saved_seconds: float = 0.0
    unmeasured_configs: int = 0
    unmeasured_fusions: int = 0
    drifted_entries: int = 0
    fusions: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    stale: list = dataclasses.field(default_factory=list)
    bypassing: list = dataclasses.field(default_factory=list)
    compiled_kernels: Optional[dict] = None
    # Set at the end of an update (None: not set, no key in the report).
    conflicts: Optional[list] = None
    unused: Optional[list] = None   # kept, though no test used them
    prune_refused: Optional[str] = None
    changes: object = None          # report.summary.CacheChanges
    entries: Optional[int] = None   # how many the cache holds now
    written: Optional[bool] = None
    not_written_because: Optional[str] = None
    errors: Optional[list] = None   # the report could not be written

    def add_error(self, text):
        self.errors = (self.errors or []) + [text]

    def as_dict(self):
        """The JSON report's contents."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in _SET_AT_THE_END:
                continue
            out[field.name] = value
        if self.changes is not None:
            out["changes"] = self.changes.as_dict()
        return out

    def outcomes(self):
        """What became of the fusions the tests met. Under
        --autotune-update=all every one is re-measured on purpose: those
        are counted as re-measured, not as missed and tuned."""
        remote = f"{self.remote_hits} remote hits, " if self.remote_hits \
            else ""
        if not self.retune:
            return (f"{self.hits} hits, {remote}{self.tuned} tuned, "
                    f"{self.misses} missed")
        untuned = self.misses - self.tuned
        return (f"{self.tuned} re-measured, {self.hits} hits, {remote}"
                + (f"{untuned} missed and not tuned" if untuned > 0 else
                   "0 missed"))

    def lines(self, cache_name=None):
        """The plugin's lines of pytest's terminal summary
        ([SummaryLine]); cache_name: the cache as the user names it (its
        path relative to where pytest started), the path by default."""
        cache = self.cache if cache_name is None else cache_name
        out = [SummaryLine(
            f"autotune: {self.outcomes()}; {self.candidate_benchmarks} "
            f"candidate benchmarks, {self.tuning_seconds:.2f} s tuning, "
            f"{self.saved_seconds:.2f} s saved "
            f"({self.mode + ('=all' if self.retune else '')} {cache})")]
        if self.compiled_kernels:
            out.append(SummaryLine("autotune: " + triton_cache.counts_text(
                self.compiled_kernels)))
        if self.unmeasured_configs:
            out.append(SummaryLine("autotune: " + unmeasured_text(
                self.unmeasured_configs, self.unmeasured_fusions)
                + ": `pytest --autotune-update` measures them"))
        if self.drifted_entries:
            out.append(SummaryLine(
                f"autotune: {self.drifted_entries} hit(s) tuned under "
                "another Triton, torch or CUDA version: `pytest "
                "--autotune-update=all` refreshes them "
                "(docs/trusting-caches.md)"))
        # In load mode each line says how to fix it; an update fixes them.
        fix = "" if self.mode == "update" else \
            "; fix: `pytest --autotune-update`, then commit the cache"
        for miss in self.missing + self.stale:
            out.append(SummaryLine(
                f"  {miss['status']}: {miss['kernel']} "
                f"[{miss['signature']}] on {miss['device']}: "
                f"{miss['reason']}{fix}"))
        if self.bypassing:
            out.append(SummaryLine(
                f"autotune: {len(self.bypassing)} kernel(s) decorated with "
                f"Triton's own triton.autotune did not use the cache: "
                f"{', '.join(self.bypassing)}; `autotune.install()` in "
                "conftest.py, `autotune_dropin = true` in the ini file or "
                "AUTOTUNE_FLAGS=--autotune_dropin routes them through it",
                "yellow"))
        for error in self.errors or ():
            out.append(SummaryLine(f"autotune: error: {error}", "red"))
        # A fusion whose stored candidates do not decode: named, and left
        # out of the report; the tests ran with its config all the same.
        for fusion in self.fusions:
            if fusion.get("error"):
                out.append(SummaryLine(
                    f"autotune: bad entry: {fusion['error']} (its "
                    "candidates are left out of the report)", "red"))
        for c in self.conflicts or ():
            out.append(SummaryLine(
                f"autotune: conflict: {c['kernel']} [{c['signature']}] on "
                f"{c['device']}: {c['first']['source']} has "
                f"{c['first']['best']} ({c['first']['run_time_us']:.3f} "
                f"us), {c['second']['source']} has {c['second']['best']} "
                f"({c['second']['run_time_us']:.3f} us); kept {c['kept']}"))
        if self.mode == "update":
            out.extend(self._update_lines(cache))
        return out

    def _update_lines(self, cache):
        out = []
        if self.prune_refused is not None:
            out.append(SummaryLine(f"autotune: --autotune-prune-unused "
                                   f"ignored, {self.prune_refused}"))
        unused = self.unused or []
        if unused:
            named = "; ".join(f"{u['kernel']} [{u['signature']}]"
                              for u in unused[:5])
            more = f"; and {len(unused) - 5} more" if len(unused) > 5 \
                else ""
            out.append(SummaryLine(
                f"autotune: {len(unused)} entr"
                f"{'y' if len(unused) == 1 else 'ies'} no test of this run "
                f"used kept in {cache}: {named}{more}; `pytest "
                "--autotune-update --autotune-prune-unused` on a full run "
                "drops them"))
        if self.changes is not None:
            out.append(SummaryLine(f"autotune: {cache}: {self.entries} "
                                   f"entries; {self.changes.headline()}"))
            out.extend(SummaryLine("  " + line)
                       for line in self.changes.lines(limit=20))
        if not self.written:
            why = self.not_written_because or ""
            out.append(SummaryLine(f"autotune: {cache} left untouched "
                                   f"({why})",
                                   None if why == "no change" else "red"))
        return out
