"""What the pytest plugin writes on pytest's terminal: the progress lines
while the tests run (TerminalProgress, the `autotune` logger's lines shown
through pytest's capture) and the plugin's section of the terminal summary
at the end (write_summary, the lines of the session's result record,
autotune/pytest_result.py). The hooks that call them are
autotune/pytest_plugin.py's."""
import logging
import os

from autotune.log import printable
from autotune.log import redact_text  # a URL's password never shows


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


def write_summary(terminalreporter, result, config):
    """The plugin's section of pytest's terminal summary: the lines of the
    session's result record (autotune.pytest_result:PluginResult), the
    cache named as the user names it; nothing when the session did not
    autotune."""
    if result is None:
        return
    tr = _Escaped(terminalreporter)
    tr.write_sep("-", "autotune")
    for line in result.lines(relative(result.cache, config)):
        tr.write_line(line.text, **({line.color: True} if line.color
                                    else {}))


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
