"""What tuning says while it runs: a line when a fusion starts tuning, one
per candidate measured (verbose), and one when it ends, through the
`autotune.tuning` logger.

--autotune_verbosity picks what is logged at INFO (the logger's default
level): quiet nothing, normal the start and end lines, verbose the
candidate lines too. What it leaves out is still logged at DEBUG, so
`logging.getLogger("autotune.tuning").setLevel(logging.DEBUG)` shows every
line, and a level above INFO silences them all.

On a terminal (stderr a TTY, the logger's own handler in place) the
candidate lines of normal verbosity become one line updated in place; in a
Bazel test log (not a TTY) nothing is written between the start and end
lines but plain lines.
"""
import collections
import logging
import sys
import time

from autotune import log as logs
from autotune.measure import selection

log = logs.get("tuning")

VERBOSITIES = ("quiet", "normal", "verbose")


def _ms(us):
    return f"{us / 1000.0:.3f} ms" if us < 100_000 else \
        f"{us / 1e6:.3f} s"


def _stderr_is_terminal():
    """An updating line only makes sense on a terminal that gets the
    logger's lines unchanged: not when a user redirected the logger."""
    if not getattr(sys.stderr, "isatty", lambda: False)():
        return False
    handlers = logging.getLogger(logs.ROOT).handlers
    return bool(handlers) and all(
        type(h).__name__ == "_CurrentStderr" for h in handlers)


class TuningProgress:
    """The progress of one fusion's tuning. The autotuner calls start()
    and finish(); the tuner calls measured() for every candidate."""

    def __init__(self, kernel, signature, candidates, verbosity="normal",
                 budget=None, search="exhaustive", terminal=None):
        self.kernel = kernel
        self.signature = signature
        self.total = candidates
        self.budget = budget
        self.search = search
        self.verbosity = verbosity if verbosity in VERBOSITIES else "normal"
        self.count = 0
        self.started = None
        self.terminal = _stderr_is_terminal() if terminal is None \
            else terminal
        self._live = False  # an updating line is on the terminal

    def _level(self, needs):
        """INFO when the verbosity asks for this kind of line, else DEBUG."""
        wanted = VERBOSITIES.index(self.verbosity) >= VERBOSITIES.index(needs)
        return logging.INFO if wanted else logging.DEBUG

    def _emit(self, needs, text):
        level = self._level(needs)
        if not log.isEnabledFor(level):
            return
        self._clear_live()
        # Kernel names, config values and failure details can come from a
        # cache file: never let one drive the terminal.
        log.log(level, logs.printable(text))

    def _clear_live(self):
        if self._live:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._live = False

    def start(self):
        self.started = time.perf_counter()
        planned = f"{self.total} candidates" if self.budget is None else \
            f"{self.search} search over {self.total} candidates, budget " \
            f"{self.budget}"
        self._emit("normal", f"autotune: tuning {self.kernel} "
                   f"[{self.signature}]: {planned}")

    def measured(self, candidate, timing=None):
        self.count += 1
        of = self.budget if self.budget is not None else self.total
        head = f"[{self.count}/{of}] {candidate.config.short()}"
        if candidate.ok:
            spread = ""
            if timing is not None and getattr(timing, "spread", 0.0):
                spread = f" (spread {timing.spread * 100:.1f}%)"
            text = f"{head} ... {_ms(candidate.run_time_us)}{spread}"
        else:
            text = f"{head} ... {candidate.failure}: " \
                   f"{candidate.failure_detail[:80]}"
        if self._level("verbose") == logging.INFO:
            self._emit("verbose", "  " + text)
        elif self.terminal and self.verbosity == "normal" and \
                log.isEnabledFor(logging.INFO):
            sys.stderr.write(f"\r\x1b[K  {logs.printable(text)[:150]}")
            sys.stderr.flush()
            self._live = True
        else:
            self._emit("verbose", "  " + text)

    def finish(self, result):
        """The end line: winner, its time, the runner-up and the margin,
        failures by kind, seconds."""
        seconds = time.perf_counter() - self.started if self.started \
            else result.seconds
        best = result.best
        ok = sorted((c for c in result.candidates if c.ok and
                     c.config != best.config), key=lambda c: c.run_time_us)
        parts = [f"winner {best.config.short()} {_ms(best.run_time_us)}"]
        if ok and best.run_time_us:
            margin = (ok[0].run_time_us / best.run_time_us - 1.0) * 100.0
            parts.append(f"runner-up {ok[0].config.short()} "
                         f"{_ms(ok[0].run_time_us)} ({margin:+.1f}%)")
        if len(result.candidates) > 1:
            # The selection's own reason (measure/selection.py), the words
            # `autotune_cache show --candidates` prints for the entry.
            parts.append("why: " + selection.reason_of(result).text())
        failures = collections.Counter(c.failure for c in result.candidates
                                       if not c.ok)
        if failures:
            parts.append("failed: " + ", ".join(
                f"{n} {kind}" for kind, n in sorted(failures.items())))
        parts.append(f"{len(result.candidates)} measured in "
                     f"{seconds:.2f} s")
        self._emit("normal", f"autotune: tuned {self.kernel} "
                   f"[{self.signature}]: " + "; ".join(parts))

    def failed(self, error):
        self._emit("normal", f"autotune: tuning {self.kernel} "
                   f"[{self.signature}] failed: {error}")
