"""One error hierarchy: every exception class a user can meet derives from
AutotuneError and is defined in autotune/errors.py (other modules import
it from there); typed errors keep their class and path on the way up."""
import importlib
import inspect
import pathlib

import pytest

import autotune
from autotune import errors
from autotune.errors import AutotuneError, CacheFileError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def all_modules():
    names = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if "dropin" in parts:  # sitecustomize installs at import
            continue
        names.append(".".join(parts))
    return names


@pytest.mark.parametrize("name", all_modules())
def test_exception_classes_come_from_errors(name):
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if not (inspect.isclass(value) and issubclass(value, BaseException)):
            continue
        if value.__module__ != name:
            continue  # imported: checked where it is defined
        # Defined here: only private control-flow exceptions may be.
        assert attr.startswith("_") or name == "autotune.errors", (
            f"{name}.{attr}: define exception classes in autotune/errors.py")
    for attr, value in vars(module).items():
        if inspect.isclass(value) and issubclass(value, Exception) and \
                not issubclass(value, Warning) and \
                value.__module__ == "autotune.errors":
            assert issubclass(value, errors.AutotuneError), attr


def test_every_public_error_derives_from_autotune_error():
    classes = [v for v in vars(errors).values() if inspect.isclass(v)
               and issubclass(v, BaseException)
               and not issubclass(v, Warning)]
    assert len(classes) > 15
    for cls in classes:
        assert issubclass(cls, errors.AutotuneError), cls.__name__


def test_a_bad_flag_keeps_its_type_through_the_session(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_cache_mode=sometimes")
    with pytest.raises(errors.AutotuneFlagsError, match="sometimes"):
        autotune.configure()


def test_a_bad_cache_file_keeps_its_path_through_the_tools(tmp_path):
    from autotune.cache.io import read_cache
    bad = tmp_path / "bad.textproto"
    bad.write_text("entries { this is not a cache")
    with pytest.raises(errors.CacheFileError) as caught:
        read_cache(str(bad))
    assert caught.value.path == str(bad)


def test_one_error_type_for_users(session_factory, tmp_path):
    assert issubclass(CacheFileError, AutotuneError)
    assert autotune.AutotuneError is AutotuneError
    with pytest.raises(AutotuneError, match="does not exist"):
        session_factory(per_fusion_autotune_cache_dir=str(tmp_path / "no"))
    (tmp_path / "bad.pb").write_bytes(b"garbage")
    with pytest.raises(AutotuneError, match="bad.pb"):
        session_factory(load_autotune_results_from=[str(tmp_path / "bad.pb")])

