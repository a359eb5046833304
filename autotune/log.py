"""The `autotune` logger: every message the library gives goes through it
(children per area: autotune.runtime, autotune.cache, autotune.remote,
autotune.tuning, ...), so that users silence or redirect it the usual way:

    logging.getLogger("autotune").setLevel(logging.ERROR)   # quiet
    logging.getLogger("autotune").handlers[:] = [my_handler]  # elsewhere

By default messages go to the process's current stderr as plain lines (the
stream is looked up at each message, so pytest's capture and redirected
stderr see them), and they do not propagate to the root logger, so that a
program that configures logging does not print them twice.
"""
import logging
import sys

ROOT = "autotune"


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a message is logged."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it
        pass


def _root():
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, _CurrentStderr) for h in logger.handlers) \
            and not getattr(logger, "_autotune_configured", False):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger._autotune_configured = True
    return logger


def get(area):
    """The logger of one area of the library: autotune.<area>."""
    _root()
    return logging.getLogger(f"{ROOT}.{area}")
