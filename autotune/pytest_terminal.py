"""What the pytest plugin writes on pytest's terminal: the progress lines
while the tests run (TerminalProgress, the `autotune` logger's lines shown
through pytest's capture) and the plugin's section of the terminal summary
at the end (write_summary, from the session's result record). The hooks
that call them are autotune/pytest_plugin.py's."""
import logging
import os

from autotune.log import printable
from autotune.runtime.run_report import unmeasured_text
from autotune.log import redact_text  # a URL's password never shows
from autotune.binaries import triton_cache


def relative(path, config):
    """`path` as the directory pytest was started in names it."""
    try:
        return os.path.relpath(path, str(config.invocation_params.dir))
    except ValueError:
        return path


class _Escaped:
    """The terminal reporter's write_sep and write_line, the lines escaped:
    kernel names and configs read from cache files reach the terminal
    through log.printable."""

    def __init__(self, terminalreporter):
        self.write_sep = terminalreporter.write_sep
        self._reporter = terminalreporter

    def write_line(self, text, **markup):
        self._reporter.write_line(printable(text), **markup)


def _outcomes(r):
    """What became of the fusions the tests met. Under
    --autotune-update=all every one is re-measured on purpose: those are
    counted as re-measured, not as missed and tuned."""
    remote = f"{r['remote_hits']} remote hits, " if r["remote_hits"] else ""
    if not r.get("retune"):
        return (f"{r['hits']} hits, {remote}{r['tuned']} tuned, "
                f"{r['misses']} missed")
    untuned = r["misses"] - r["tuned"]
    return (f"{r['tuned']} re-measured, {r['hits']} hits, {remote}"
            + (f"{untuned} missed and not tuned" if untuned > 0 else
               "0 missed"))


def write_summary(terminalreporter, result, changes, config):
    """The plugin's section of pytest's terminal summary, from the
    session's result record (the JSON report's contents) and, after an
    update, its CacheChanges; nothing when the session did not autotune."""
    r = result
    if r is None:
        return
    tr = _Escaped(terminalreporter)
    tr.write_sep("-", "autotune")
    tr.write_line(
        f"autotune: {_outcomes(r)}; {r['candidate_benchmarks']} candidate "
        f"benchmarks, {r['tuning_seconds']:.2f} s tuning, "
        f"{r['saved_seconds']:.2f} s saved "
        f"({r['mode'] + ('=all' if r.get('retune') else '')} "
        f"{relative(r['cache'], config)})")
    if r.get("compiled_kernels"):
        tr.write_line("autotune: " + triton_cache.counts_text(
            r["compiled_kernels"]))
    if r.get("unmeasured_configs"):
        tr.write_line("autotune: " + unmeasured_text(
            r["unmeasured_configs"], r.get("unmeasured_fusions", 0))
            + ": `pytest --autotune-update` measures them")
    if r.get("drifted_entries"):
        tr.write_line(f"autotune: {r['drifted_entries']} hit(s) tuned "
                      "under another Triton, torch or CUDA version: "
                      "`pytest --autotune-update=all` refreshes them "
                      "(docs/trusting-caches.md)")
    # In load mode each line says how to fix it; an update fixes them.
    fix = "" if r["mode"] == "update" else \
        "; fix: `pytest --autotune-update`, then commit the cache"
    for miss in r["missing"] + r["stale"]:
        tr.write_line(f"  {miss['status']}: {miss['kernel']} "
                      f"[{miss['signature']}] on {miss['device']}: "
                      f"{miss['reason']}{fix}")
    if r["bypassing"]:
        tr.write_line(
            f"autotune: {len(r['bypassing'])} kernel(s) decorated with "
            f"Triton's own triton.autotune did not use the cache: "
            f"{', '.join(r['bypassing'])}; `autotune.install()` in "
            "conftest.py, `autotune_dropin = true` in the ini file or "
            "AUTOTUNE_FLAGS=--autotune_dropin routes them through it",
            yellow=True)
    for error in r.get("errors", []):
        tr.write_line(f"autotune: error: {error}", red=True)
    # A fusion whose stored candidates do not decode: named, and left
    # out of the report; the tests ran with its config all the same.
    for fusion in r.get("fusions", []):
        if fusion.get("error"):
            tr.write_line(f"autotune: bad entry: {fusion['error']} "
                          "(its candidates are left out of the "
                          "report)", red=True)
    for c in r.get("conflicts", []):
        tr.write_line(
            f"autotune: conflict: {c['kernel']} [{c['signature']}] on "
            f"{c['device']}: {c['first']['source']} has "
            f"{c['first']['best']} ({c['first']['run_time_us']:.3f} us), "
            f"{c['second']['source']} has {c['second']['best']} "
            f"({c['second']['run_time_us']:.3f} us); kept {c['kept']}")
    if r["mode"] != "update":
        return
    cache = relative(r["cache"], config)
    if "prune_refused" in r:
        tr.write_line(f"autotune: --autotune-prune-unused ignored, "
                      f"{r['prune_refused']}")
    unused = r.get("unused") or []
    if unused:
        named = "; ".join(f"{u['kernel']} [{u['signature']}]"
                          for u in unused[:5])
        more = f"; and {len(unused) - 5} more" if len(unused) > 5 else ""
        tr.write_line(f"autotune: {len(unused)} entr"
                      f"{'y' if len(unused) == 1 else 'ies'} no test of "
                      f"this run used kept in {cache}: {named}{more}; "
                      "`pytest --autotune-update --autotune-prune-unused` "
                      "on a full run drops them")
    if changes is not None:
        tr.write_line(f"autotune: {cache}: {r['entries']} entries; "
                      f"{changes.headline()}")
        for line in changes.lines(limit=20):
            tr.write_line("  " + line)
    if not r.get("written"):
        why = r.get("not_written_because", "")
        tr.write_line(f"autotune: {cache} left untouched ({why})",
                      **({} if why == "no change" else {"red": True}))


class TerminalProgress(logging.Handler):
    """The `autotune` logger's lines (a fusion's tuning starting and
    ending, each candidate with --autotune_verbosity=verbose, a wait for
    the device; when the output is no terminal, the waits alone) on
    pytest's output while pytest captures a test's output:
    written through the terminal reporter with capture suspended, as
    pytest's live logging does. When nothing is captured (-s) the logger's
    own handler reaches the terminal, and this one stays silent."""

    # A wait for the device (host/device_lock.py): shown in a CI log
    # too, where a job waiting minutes for another's tuning would else
    # print nothing.
    WAIT_LINES = ("autotune: waiting for ", "autotune: still waiting for ")

    def __init__(self, reporter, capture, waits_only=False):
        super().__init__(logging.INFO)
        self.reporter = reporter
        self.capture = capture
        self.waits_only = waits_only

    @classmethod
    def for_config(cls, config):
        """A handler unless pytest was asked to be quiet (-q): every line
        on a terminal, only the waits for the device elsewhere; else
        None."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None or \
                config.get_verbosity() < 0:
            return None
        return cls(reporter, capture,
                   waits_only=not getattr(reporter, "isatty", False))

    def emit(self, record):
        if not self.capture.is_capturing():
            return
        try:
            text = redact_text(record.getMessage())
            if self.waits_only and not text.startswith(self.WAIT_LINES):
                return
            with self.capture.global_and_fixture_disabled():
                self.reporter.write_line(text)
        except Exception:  # noqa: BLE001 -- logging's own convention
            self.handleError(record)
