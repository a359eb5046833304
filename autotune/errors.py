"""The errors rules_autotune raises for users.

Everything a user can get wrong (flags, cache files, cache directories,
spaces, search settings, a fusion no config of which runs, a backend the
machine lacks, a remote cache setting) raises an AutotuneError or a
subclass of it, so one `except autotune.AutotuneError` catches them all;
CacheFileError adds the path of the file at fault.
"""


class AutotuneError(Exception):
    """A configuration or cache problem that stops the run."""


class CacheFileError(AutotuneError):
    """A cache file that cannot be used; the message names the file."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ToolError(AutotuneError):
    """Bad input or usage of a command-line tool: exit 2, one line."""


class RemoteToolError(ToolError):
    """A remote namespace a tool cannot read or write: exit 2, one line."""
