"""The doctor's answer lines and the checks that need no machine stand-in
(autotune/cli/doctor_checks.py); each check against stand-ins for the
machine is in tests/test_doctor.py."""
from autotune.cli import doctor_checks


def test_a_line_is_one_line_with_status_name_found_and_fix():
    line = doctor_checks.Line(doctor_checks.FAIL, "libcuda", "no\nlibcuda",
                              "install it")
    assert line.text() == "FAIL  libcuda        no libcuda  fix: install it"
    assert "fix:" not in doctor_checks.Line(doctor_checks.OK, "gpus",
                                            "2 GPUs").text()


def test_the_lock_folders_client_env_argument_keeps_what_it_compares():
    # The --test_arg the doctor prints passes exactly the client
    # variables the doctor reads back.
    for prefix in doctor_checks.CLIENT_ENV_PREFIXES:
        assert prefix.rstrip("=") in doctor_checks.CLIENT_ENV_ARG
