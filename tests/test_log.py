"""The `autotune` logger (autotune/log.py): no URL's password reaches a
message, whatever the message forgot."""
import autotune

from tests_support import SECRET, assert_no_secret


def test_the_library_logger_redacts_any_url(capsys):
    autotune.log.get("test").warning(
        "autotune: about redis://bob:%s@h/0", SECRET)
    err = capsys.readouterr().err
    assert "redis://***@h/0" in err
    assert_no_secret(err)

