"""pytest's entry point for rules_autotune. Installed, pytest loads it by
itself; from a checkout, `-p pytest_autotune`; `-p no:pytest_autotune`
turns it off. (The entry point has the module's name so that `-p
pytest_autotune` on an installed copy names the same plugin instead of
registering the module a second time.)

It declares the options, the ini keys and the `autotune` marker, and imports
the plugin itself (autotune.pytest_plugin) only for a session that asks for
autotuning: a cache configured, an --autotune-* option given or an
autotune* ini key set. Importing the `autotune` package selects Triton's
interpreter on a machine without a GPU and, on one with a driver, imports
torch to ask whether the GPU is usable: a project that merely has the
package installed must neither see the one nor wait for the other.
"""
import os
import types

import iniconfig  # pytest's own ini reader, one of its dependencies
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

INI_CACHE = "autotune_cache"
INI_REQUIRE = "autotune_require_complete"
INI_BACKEND = "autotune_backend"
INI_DROPIN = "autotune_dropin"
INI_VERSION_MATCH = "autotune_version_match"
INI_COMPILED = "autotune_compiled"
INI_KEYS = (INI_CACHE, INI_REQUIRE, INI_BACKEND, INI_DROPIN,
            INI_VERSION_MATCH, INI_COMPILED)
INI_TRUE = ("1", "true", "yes", "on")
_PATH = dict(metavar="PATH", default=None)
_SWITCH = dict(action="store_true", default=False)
# (flag, argparse keywords, help), in the order --help lists them.
_OPTIONS = (
    ("--autotune-cache", _PATH,
     f"results file the session loads (overrides the {INI_CACHE} ini key; "
     "relative to the current directory)"),
    ("--autotune-update", _SWITCH,
     "tune the fusions the selected tests meet that are missing or stale "
     "in the cache (hits are kept as they are, not measured) and rewrite "
     "the cache at the end, keeping the entries of fusions not run"),
    # Its own option string, not a value of --autotune-update: argparse
    # matches a whole argument first, and an optional value would swallow
    # a test path given after the switch (`--autotune-update tests/`).
    ("--autotune-update=all", dict(_SWITCH, dest="autotune_update_all"),
     "like --autotune-update, but re-measure every fusion, the cached "
     "configs kept unless beaten (a new GPU, driver or Triton version)"),
    ("--autotune-prune-unused", _SWITCH,
     "with --autotune-update on a full run: drop entries no test used"),
    # None, not False: unset lets the ini key decide.
    ("--autotune-require-complete", dict(_SWITCH, default=None),
     "fail every test that misses the cache, naming the fusion (stale or "
     "missing)"),
    ("--autotune-report", _PATH,
     "write the session's autotune report (JSON) to PATH"),
    ("--autotune-compiled", dict(metavar="DIR", default=None),
     "kernels compiled ahead (`autotune_cache compile`): Triton loads a "
     f"binary from DIR when its key matches (overrides the {INI_COMPILED} "
     "ini key); DIR is code: only one you trust"),
)
# Their destinations on config.option.
OPTIONS = tuple(keywords.get("dest", flag[2:].replace("-", "_"))
                for flag, keywords, _ in _OPTIONS)


def pytest_addoption(parser):
    group = parser.getgroup("autotune", "persisted Triton autotuning")
    for flag, keywords, text in _OPTIONS:
        group.addoption(flag, help=text, **keywords)
    parser.addini(INI_CACHE, "autotune results file, relative to the ini "
                  "file (text: .textproto/.pbtxt/.txt; otherwise binary)",
                  default=None)
    parser.addini(INI_REQUIRE, "true: fail every test that misses the cache",
                  default="false")
    parser.addini(INI_BACKEND, "auto | gpu | interpreter", default="auto")
    parser.addini(INI_VERSION_MATCH, "loose | strict: an entry tuned under "
                  "another Triton, torch or CUDA major.minor is a counted hit "
                  "(loose) or stale (strict)", default="")
    parser.addini(INI_COMPILED, "directory of kernels compiled ahead "
                  "(`autotune_cache compile`), relative to the ini file",
                  default=None)
    parser.addini(INI_DROPIN, "true: route unedited @triton.autotune "
                  "kernels through the cache (as AUTOTUNE_FLAGS="
                  "--autotune_dropin)", default="false")


def asks_for_autotune(config, options=None):
    """Whether the session names a cache, gives an --autotune-* option or
    sets any autotune* ini key (a misspelt one included: the plugin reports
    it rather than letting it do nothing). `options`: the parsed options,
    config.option by default."""
    options = config.option if options is None else options
    if any(getattr(options, name, None) not in (None, False)
           for name in OPTIONS):
        return True
    # -o autotune_cache=...: pytest 8 keeps these out of inicfg.
    if any(name.startswith("autotune")
           for name in override_ini_names(options)):
        return True
    return any(name.startswith("autotune") for name in ini_file_keys(config))


_INI_FILE_KEYS = pytest.StashKey()


def ini_file_keys(config):
    """The keys of the pytest section of the session's ini file
    (config.inipath), misspelt ones included: getini answers only for
    declared keys, and Config.inicfg, which listed them all, is deprecated
    from pytest 9.2 on. Read once per session; an ini file pytest read
    but this cannot is taken as naming no key."""
    keys = config.stash.get(_INI_FILE_KEYS, None)
    if keys is None:
        try:
            keys = _read_ini_keys(config.inipath) if config.inipath else ()
        except (OSError, ValueError, iniconfig.ParseError):
            keys = ()
        config.stash[_INI_FILE_KEYS] = keys = tuple(keys)
    return keys


def _read_ini_keys(path):
    """The pytest section's keys, wherever each file kind keeps them:
    [pytest] (pytest.ini, tox.ini, pytest.toml), [tool:pytest] (setup.cfg),
    [tool.pytest.ini_options] or pytest 9's [tool.pytest] (pyproject.toml)."""
    if str(path).endswith(".toml"):
        with open(path, "rb") as f:
            document = tomllib.load(f)
        tool_pytest = document.get("tool", {}).get("pytest", {})
        keys = list(document.get("pytest", {}))
        keys += [k for k in tool_pytest if k != "ini_options"]
        return keys + list(tool_pytest.get("ini_options", {}))
    document = iniconfig.IniConfig(str(path))
    return [key for section in ("pytest", "tool:pytest")
            if section in document for key, _ in document[section].items()]


def override_ini_names(options):
    """The ini keys given with -o/--override-ini."""
    return [str(item).split("=", 1)[0].strip()
            for item in getattr(options, "override_ini", None) or ()]


# What the plugin needs of this module, handed to it by pytest_configure:
# the plugin does not import this module (the entry point loads the
# plugin, never the other way round).
INI = types.SimpleNamespace(
    cache=INI_CACHE, require=INI_REQUIRE, backend=INI_BACKEND,
    dropin=INI_DROPIN, version_match=INI_VERSION_MATCH, keys=INI_KEYS,
    compiled=INI_COMPILED,
    file_keys=ini_file_keys,
    override_names=override_ini_names)


def pytest_load_initial_conftests(early_config, parser, args):
    """A session that uses autotuning imports the package before the
    project's conftest files: a conftest that imports kernels decorates
    them, and Triton decides then whether they run on its interpreter,
    which the package's import selects where there is no GPU, and which
    `autotune_backend = interpreter` asks for anywhere."""
    options = early_config.known_args_namespace
    if not asks_for_autotune(early_config, options):
        return
    if getattr(options, "autotune_cache", None) or \
            early_config.getini(INI_CACHE):
        backend = str(early_config.getini(INI_BACKEND) or "").strip()
        if backend == "interpreter" and \
                os.environ.get("TRITON_INTERPRET") is None:
            os.environ["TRITON_INTERPRET"] = "1"
    # The package, only now: for a session that asks for autotuning.
    import autotune
    # Before the conftest files too: kernels they decorate with
    # triton.autotune get this project's autotuner.
    if str(early_config.getini(INI_DROPIN)).strip().lower() in INI_TRUE:
        autotune.install()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "autotune(**options): run this test in its own autotune "
        "session; options are autotune.configure() keywords (flag names), "
        "for example require_complete_autotune_results=False")
    if config.option.help or config.option.version:
        return
    if asks_for_autotune(config):
        # The package, only for a session that asks for autotuning.
        from autotune import pytest_plugin
        pytest_plugin.configure(config, INI)


@pytest.fixture
def autotune_stats(request):
    """The current autotuning session's statistics (hits, tuned, misses,
    candidate_benchmarks, tuning_seconds, saved_seconds)."""
    # The package, only for a test that asks for the fixture.
    from autotune import pytest_plugin
    return pytest_plugin.stats_view(request)
