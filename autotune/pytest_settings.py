"""The pytest plugin's settings: what the command line and the ini file
ask for (the cache, update or load, require-complete, the report, the
backend, the version rule, the compiled kernels), checked before any test
runs, each bad value a one-line usage error naming where it came from.
The ini key names come from the entry point (pytest_autotune), which
autotune/pytest_plugin.py's configure stores under INI_KEY."""
import difflib
import os
import tempfile

import pytest

from autotune import flags
from autotune.log import redact_text  # a URL's password never shows
from autotune.binaries import triton_cache

BACKENDS = ("auto", "gpu", "interpreter")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
# The entry point's ini key names and readers (pytest_autotune.INI).
INI_KEY = pytest.StashKey()


def _compiled_dir(config, ini, ini_dir):
    """--autotune-compiled / the ini key: an existing directory, made the
    compiled kernels Triton's cache reads first
    (autotune/binaries/triton_cache.py); None when not given."""
    given = config.option.autotune_compiled
    if given:
        path = os.path.join(str(config.invocation_params.dir), given)
        source = "--autotune-compiled"
    else:
        value = str(config.getini(ini.compiled) or "").strip()
        if not value:
            return None
        path = os.path.join(ini_dir, value)
        source = f"ini {ini.compiled} {_ini_source(config, ini.compiled)}"
    if not os.path.isdir(path):
        raise usage_error(f"{source}: {given or value} is not a directory (build "
                     "it with `autotune_cache compile CACHE --target sm_90 "
                     "-o DIR`)")
    # AUTOTUNE_FLAGS=--require_compiled_kernels holds here too.
    triton_cache.configure_environment(
        [path], require=flags.import_time_choices()[3])
    return path


def usage_error(message):
    """A usage error pytest prints as one line, without a traceback."""
    return pytest.UsageError(f"autotune: {redact_text(message)}")


class Settings:
    """What the command line and the ini file ask for, checked."""

    def __init__(self, cache, update, prune, require_complete, report,
                 backend, retune=False):
        self.cache = cache
        self.update = update
        self.retune = retune  # --autotune-update=all: re-measure every fusion
        self.prune = prune
        self.require_complete = require_complete
        self.report = report
        self.backend = backend

    @classmethod
    def from_config(cls, config):
        _check_ini_keys(config)
        ini = config.stash[INI_KEY]
        opt = config.option
        if getattr(opt, "autotune_update_all", False):
            # An update too, for conftests that ask
            # config.getoption("--autotune-update").
            opt.autotune_update = True
        ini_dir = str(config.inipath.parent) if config.inipath \
            else str(config.rootpath)
        cache = opt.autotune_cache
        given = cache or str(config.getini(ini.cache) or "").strip()
        if "://" in given:
            raise usage_error(f"{given}: the cache is a results file; a remote "
                         "cache is set with AUTOTUNE_FLAGS="
                         "--autotune_remote_cache=URL")
        if cache:
            cache = os.path.join(str(config.invocation_params.dir), cache)
        else:
            ini_cache = str(config.getini(ini.cache) or "").strip()
            if not ini_cache and _ini_given(config, ini.cache):
                raise usage_error(f"ini {ini.cache} is blank "
                             f"{_ini_source(config, ini.cache)}: give a "
                             "results file, or remove the key")
            cache = os.path.join(ini_dir, ini_cache) if ini_cache else None
        require = opt.autotune_require_complete
        if require is None:
            require = _ini_bool(config, ini.require)
        _ini_bool(config, ini.dropin)  # acted on before the conftest files
        backend = (config.getini(ini.backend) or "auto").strip()
        if backend not in BACKENDS:
            raise usage_error(f"ini {ini.backend} = {backend!r} "
                         f"{_ini_source(config, ini.backend)}: expected one "
                         f"of {', '.join(BACKENDS)}")
        version_match = (config.getini(ini.version_match) or "").strip()
        choices = flags.VERSION_MATCHES
        if version_match and version_match not in choices:
            raise usage_error(f"ini {ini.version_match} = {version_match!r} "
                         f"{_ini_source(config, ini.version_match)}: expected "
                         f"one of {', '.join(choices)}")
        report = opt.autotune_report
        if report:
            report = os.path.join(str(config.invocation_params.dir), report)
        if cache is None:
            asked = [name for name, on in (
                ("--autotune-update", opt.autotune_update),
                ("--autotune-prune-unused", opt.autotune_prune_unused),
                ("--autotune-require-complete",
                 opt.autotune_require_complete),
                ("--autotune-report", report)) if on]
            if asked:
                raise usage_error(f"{asked[0]} needs a cache: set {ini.cache} in "
                             "the ini file or pass --autotune-cache=PATH")
            return None
        cache = os.path.normpath(cache)
        shown = os.path.relpath(cache, str(config.invocation_params.dir))
        if shown.startswith(".."):
            shown = cache
        if opt.autotune_prune_unused and not opt.autotune_update:
            raise usage_error("--autotune-prune-unused only works with "
                         "--autotune-update")
        settings = cls(cache, opt.autotune_update, opt.autotune_prune_unused,
                       require and not opt.autotune_update, report, backend,
                       retune=bool(getattr(opt, "autotune_update_all",
                                           False)))
        settings.shown = shown
        settings.version_match = version_match or None
        settings.compiled = _compiled_dir(config, ini, ini_dir)
        if not hasattr(config, "workerinput"):
            settings.check_paths()
        return settings

    def check_paths(self):
        """Bad paths stop the run before any test (and any tuning)."""
        if not self.update:
            if not os.path.exists(self.cache):
                raise usage_error(f"{self.shown} does not exist; run `pytest "
                             "--autotune-update` to create it")
            return
        directory = os.path.dirname(self.cache) or "."
        if not os.path.isdir(directory) and not os.path.lexists(directory):
            try:  # a first update creates the cache's directory
                os.makedirs(directory)
            except OSError as e:
                raise usage_error(f"--autotune-update: cannot create the "
                             f"directory of {self.shown}: {e.strerror or e}")
        if not os.path.isdir(directory):
            raise usage_error(f"--autotune-update: cannot write {self.shown}: "
                         f"{directory} is not a directory")
        if os.path.isdir(self.cache):
            raise usage_error(f"--autotune-update: {self.shown} is a directory, "
                         "not a results file")
        problem = _write_problem(directory)
        if problem is None and os.path.exists(self.cache) and \
                not os.access(self.cache, os.W_OK):
            problem = "the file is read-only"
        if problem:
            raise usage_error(f"--autotune-update: cannot write {self.shown}: "
                         f"{problem}; nothing was tuned or written")


def _check_ini_keys(config):
    """A misspelt autotune ini key would silently do nothing."""
    ini = config.stash[INI_KEY]
    for name in ini.file_keys(config):
        if name.startswith("autotune") and name not in ini.keys:
            close = difflib.get_close_matches(name, ini.keys, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise usage_error(f"unknown ini key {name!r} in {config.inipath}; "
                         f"{hint}known keys: {', '.join(ini.keys)}")


def _ini_given(config, name):
    """Whether the ini file or -o sets `name` (read from the file itself:
    config.inicfg is deprecated from pytest 9.2)."""
    ini = config.stash[INI_KEY]
    return name in ini.file_keys(config) or \
        name in ini.override_names(config.option)


def _ini_source(config, name):
    """Where an ini value came from, for messages: -o beats the file."""
    if name in config.stash[INI_KEY].override_names(config.option):
        return "(given with -o/--override-ini)"
    if config.inipath:
        return f"in {config.inipath}"
    return "in the ini file"


def _ini_bool(config, name):
    raw = config.getini(name)
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise usage_error(f"ini {name} = {raw!r} {_ini_source(config, name)}: "
                 "expected true or "
                 "false")


def _write_problem(directory):
    """Why a file cannot be created in `directory` (None: it can). Tries for
    real: permission bits do not bind every user or file system."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".autotune-probe.",
                                     dir=directory)
    except OSError as e:
        return f"directory {directory} is not writable ({e.strerror})"
    os.close(fd)
    os.unlink(probe)
    return None
