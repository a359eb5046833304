"""The pytest plugin's settings, read from a stand-in for pytest's config:
where the cache is, what is asked for, and the one-line usage error of
each bad value. (tests/test_pytest_plugin.py runs them through pytest.)"""
import types

import pytest

from autotune.pytest_settings import INI_KEY, Settings

INI = types.SimpleNamespace(
    cache="autotune_cache", require="autotune_require_complete",
    backend="autotune_backend", dropin="autotune_dropin",
    version_match="autotune_version_match", compiled="autotune_compiled",
    keys=["autotune_cache", "autotune_require_complete", "autotune_backend",
          "autotune_dropin", "autotune_version_match", "autotune_compiled"])


def _config(tmp_path, ini_values=None, **options):
    """A config whose ini file (in tmp_path) sets ini_values, run from
    tmp_path/sub with these command-line options."""
    ini_values = dict(ini_values or {})
    ini = types.SimpleNamespace(
        **vars(INI), file_keys=lambda config: list(ini_values),
        override_names=lambda option: [])
    here = tmp_path / "sub"
    here.mkdir(exist_ok=True)
    option = dict(autotune_cache=None, autotune_update=False,
                  autotune_update_all=False, autotune_prune_unused=False,
                  autotune_require_complete=None, autotune_report=None,
                  autotune_compiled=None)
    option.update(options)
    return types.SimpleNamespace(
        stash={INI_KEY: ini}, option=types.SimpleNamespace(**option),
        getini=lambda name: ini_values.get(name, ""),
        inipath=tmp_path / "pytest.ini", rootpath=tmp_path,
        invocation_params=types.SimpleNamespace(dir=here))


def test_the_ini_files_cache_is_found_from_the_ini_files_folder(tmp_path):
    (tmp_path / "c.textproto").write_text("")
    settings = Settings.from_config(_config(
        tmp_path, {"autotune_cache": "c.textproto",
                   "autotune_require_complete": "yes"}))
    assert settings.cache == str(tmp_path / "c.textproto")
    # Outside where pytest started: named by its whole path.
    assert settings.shown == str(tmp_path / "c.textproto")
    assert settings.require_complete is True and settings.update is False
    assert settings.backend == "auto" and settings.version_match is None


def test_the_command_lines_cache_is_found_from_where_pytest_started(
        tmp_path):
    config = _config(tmp_path, autotune_cache="new/c.textproto",
                     autotune_update_all=True)
    settings = Settings.from_config(config)
    assert settings.cache == str(tmp_path / "sub" / "new" / "c.textproto")
    # --autotune-update=all is an update, for conftests that ask.
    assert settings.update and settings.retune and \
        config.option.autotune_update
    assert (tmp_path / "sub" / "new").is_dir()  # created for the update


def test_without_a_cache_autotuning_is_off_unless_asked_for(tmp_path):
    assert Settings.from_config(_config(tmp_path)) is None
    with pytest.raises(pytest.UsageError, match=r"^autotune: "
                       r"--autotune-update needs a cache: set "
                       r"autotune_cache in the ini file"):
        Settings.from_config(_config(tmp_path, autotune_update=True))


@pytest.mark.parametrize("ini_values, options, message", [
    ({"autotune_cahce": "c"}, {},
     "unknown ini key 'autotune_cahce' in {ini}; did you mean "
     "autotune_cache?"),
    ({"autotune_cache": "c", "autotune_backend": "tpu"}, {},
     "ini autotune_backend = 'tpu' in {ini}: expected one of auto, gpu, "
     "interpreter"),
    ({"autotune_cache": "c", "autotune_require_complete": "maybe"}, {},
     "ini autotune_require_complete = 'maybe' in {ini}: expected true or "
     "false"),
    ({"autotune_cache": "redis://u:secret@h/0"}, {},
     "redis://***@h/0: the cache is a results file"),
    ({"autotune_cache": "c"}, {"autotune_prune_unused": True},
     "--autotune-prune-unused only works with --autotune-update"),
    ({"autotune_cache": "c"}, {},
     "{root}/c does not exist; run `pytest --autotune-update` to create "
     "it"),
])
def test_a_bad_setting_is_one_line_naming_where_it_came_from(
        tmp_path, ini_values, options, message):
    with pytest.raises(pytest.UsageError) as raised:
        Settings.from_config(_config(tmp_path, ini_values, **options))
    text = str(raised.value)
    assert text.startswith("autotune: " + message.format(
        ini=tmp_path / "pytest.ini", root=tmp_path)), text
    assert "\n" not in text and "secret" not in text
