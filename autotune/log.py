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
import re
import sys

ROOT = "autotune"
# Names of URL parameters shown as they are; any other parameter's value
# (a ?password=, say) is shown as ***.
_SHOWN_PARAMETERS = ("prefix",)
_PARAMETER_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,32}$")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"]*")


def printable(text):
    """`text` as it may be printed on a terminal: every character that is
    not printable (str.isprintable: the C0 and C1 controls, ESC among them,
    so no ANSI or OSC sequence; bidirectional overrides; line and paragraph
    separators; unassigned code points) shown as a Python escape
    (\\x1b, \\u202e). Names and config values read from a cache file or a
    remote namespace go through it before they reach a terminal: the file
    may come from anyone."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def _escape_char(char):
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def redact_url(url):
    """The URL as it may be printed, whatever its shape: everything between
    `://` and the last `@` (user, password, and any `/`, `@` or `:` a
    password holds) is ***, and so is the value of every query parameter
    other than prefix, and any fragment. For a URL that parsed, print the
    parsed form (RemoteURL) instead; this is for the ones that did not."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, sep, rest = text.partition(":")
    at = rest.rfind("@")
    if at >= 0:
        rest = "***" + rest[at:]
    else:
        # No @, but a port that is no number: a password cut off by a
        # space or a quote ("redis://user:pass word@host").
        end = min([i for i in map(rest.find, "/?#") if i >= 0] or
                  [len(rest)])
        host, colon, port = rest[:end].rpartition(":")
        if colon and not port.isdigit() and not port.endswith("]"):
            rest = f"{host}:***{rest[end:]}"
    rest, hash_sign, _ = rest.partition("#")
    base, question, query = rest.partition("?")
    shown = []
    for item in query.split("&") if question else ():
        name, equals, value = item.partition("=")
        if not equals or not _PARAMETER_NAME.match(name):
            shown.append("***")
        elif name in _SHOWN_PARAMETERS:
            shown.append(item)
        else:
            shown.append(f"{name}=***")
    return (scheme + sep + base + question + "&".join(shown)
            + ("#***" if hash_sign else ""))


def redact_text(text):
    """`text` with every URL in it redacted (redact_url): for messages that
    quote what a user or a server said."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), str(text))


class _Redacting(logging.Filter):
    """A last guard: no message of the library prints a URL's password,
    even one a future message forgets to redact."""

    def filter(self, record):
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = redact_text(message), ()
        return True


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
        handler.addFilter(_Redacting())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger._autotune_configured = True
    return logger


def get(area):
    """The logger of one area of the library: autotune.<area>."""
    _root()
    return logging.getLogger(f"{ROOT}.{area}")
