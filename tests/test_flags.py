import os
import re
import sys

import pytest

from autotune import flags
from autotune.errors import AutotuneError, AutotuneFlagsError
from autotune.runtime import session as runtime_session

from tests_support import HOSTILE_URLS, SECRET, assert_no_secret


def test_parse_all_flags():
    opts = flags.parse(
        "--per_fusion_autotune_cache_dir=/tmp/c --autotune_cache_mode=read "
        "--dump_autotune_results_to=/tmp/d.pb "
        "--load_autotune_results_from=/a.textproto,/b.pb "
        "--require_complete_autotune_results --autotune_backend=interpreter "
        "--autotune_miss_policy=nearest --autotune_expected_gpu=H200", env={})
    assert opts.per_fusion_autotune_cache_dir == "/tmp/c"
    assert opts.autotune_cache_mode == "read"
    assert opts.load_autotune_results_from == ["/a.textproto", "/b.pb"]
    assert opts.require_complete_autotune_results
    assert opts.autotune_miss_policy == "nearest"
    assert opts.autotune_expected_gpu == "H200"


# The flags users write, with their defaults: renaming one or changing a
# default breaks every AUTOTUNE_FLAGS and configure() call that uses it.
EXPECTED_DEFAULTS = {
    "per_fusion_autotune_cache_dir": None,
    "autotune_cache_mode": "update",
    "dump_autotune_results_to": None,
    "load_autotune_results_from": [],
    "autotune_max_cache_bytes": 16 << 30,
    "require_complete_autotune_results": False,
    "autotune_backend": "auto",
    "autotune_miss_policy": "tune",
    "autotune_expected_gpu": None,
    "autotune_report_to": None,
    "autotune_verbosity": "normal",
    "autotune_fail_if_sharded": False,
    "autotune_remote_cache": None,
    "autotune_compile_check": None,
    "autotune_compile_jobs": 0,
    "autotune_compiled_kernels": [],
    "require_compiled_kernels": False,
    "autotune_incumbents_from": [],
    "autotune_retune": False,
    "autotune_version_match": "loose",
    "autotune_workers": 1,
    "autotune_distributed": "auto",
    "autotune_distributed_timeout_s": 120.0,
    "autotune_dropin": False,
}


def test_every_flag_has_a_python_api_keyword():
    import inspect

    import autotune
    assert "options" in str(inspect.signature(autotune.configure))
    # Both the absl definitions and the Options fields hold every flag,
    # with its default.
    from absl import flags as absl_flags
    defined = absl_flags.FlagValues()
    flags._define(defined)
    assert {name: defined[name].default for name in defined} == \
        EXPECTED_DEFAULTS
    assert vars(flags.Options()) == EXPECTED_DEFAULTS
    assert flags.flag_names() == list(EXPECTED_DEFAULTS)
    for name in defined:
        assert defined[name].help, name


def test_list_defaults_are_not_shared():
    first = flags.Options()
    first.load_autotune_results_from.append("a.pb")
    assert flags.Options().load_autotune_results_from == []


def test_parsed_values_have_the_option_types():
    opts = flags.parse(
        "--autotune_compile_jobs=5 "
        "--autotune_distributed_timeout_s=2 --autotune_workers=2 "
        "--autotune_dropin --autotune_verbosity=quiet", env={})
    assert opts.autotune_compile_jobs == 5
    assert isinstance(opts.autotune_compile_jobs, int)
    assert opts.autotune_distributed_timeout_s == 2.0
    assert isinstance(opts.autotune_distributed_timeout_s, float)
    assert opts.autotune_workers == 2
    assert opts.autotune_dropin is True
    assert opts.autotune_verbosity == "quiet"
    with pytest.raises(flags.AutotuneFlagsError, match="compile_jobs"):
        flags.parse("--autotune_compile_jobs=-1", env={})
    with pytest.raises(flags.AutotuneFlagsError, match="verbosity"):
        flags.parse("--autotune_verbosity=loud", env={})


def test_every_path_flag_is_resolved():
    env = {"TEST_UNDECLARED_OUTPUTS_DIR": "/out"}
    opts = flags.parse(
        " ".join(f"--{n}=TEST_UNDECLARED_OUTPUTS_DIR/{n}" for n in (
            "per_fusion_autotune_cache_dir", "dump_autotune_results_to",
            "load_autotune_results_from", "autotune_report_to",
            "autotune_incumbents_from")),
        env=env)
    assert opts.per_fusion_autotune_cache_dir == \
        "/out/per_fusion_autotune_cache_dir"
    assert opts.dump_autotune_results_to == "/out/dump_autotune_results_to"
    assert opts.load_autotune_results_from == [
        "/out/load_autotune_results_from"]
    assert opts.autotune_report_to == "/out/autotune_report_to"
    assert opts.autotune_incumbents_from == ["/out/autotune_incumbents_from"]


def test_empty_flags_give_defaults():
    opts = flags.parse("", env={})
    assert opts == flags.Options()


def test_unknown_flag_is_named():
    with pytest.raises(flags.AutotuneFlagsError) as err:
        flags.parse("--dump_autotune_results_to=/x.pb --no_such_flag=1",
                    env={})
    assert "AUTOTUNE_FLAGS" in str(err.value)
    assert "--no_such_flag" in str(err.value)


def test_bad_enum_value():
    with pytest.raises(flags.AutotuneFlagsError, match="autotune_cache_mode"):
        flags.parse("--autotune_cache_mode=write", env={})


def test_positional_argument_is_rejected():
    with pytest.raises(flags.AutotuneFlagsError, match="not a flag"):
        flags.parse("cache.textproto", env={})


def test_bazel_path_prefixes():
    env = {"TEST_SRCDIR": "/runfiles", "TEST_WORKSPACE": "_main",
           "TEST_UNDECLARED_OUTPUTS_DIR": "/out"}
    opts = flags.parse(
        "--load_autotune_results_from=TEST_WORKSPACE/testdata/c.textproto "
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/d.textproto",
        env=env)
    assert opts.load_autotune_results_from == [
        "/runfiles/_main/testdata/c.textproto"]
    assert opts.dump_autotune_results_to == "/out/d.textproto"


def test_prefix_without_bazel_environment():
    with pytest.raises(flags.AutotuneFlagsError, match="TEST_SRCDIR"):
        flags.parse("--load_autotune_results_from=TEST_WORKSPACE/c.pb",
                    env={})


def _dropin_installed(value):
    import subprocess
    import sys
    code = ("import autotune; from autotune.runtime import triton_patch; "
            "print(triton_patch.installed())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, env={**os.environ, "AUTOTUNE_FLAGS": value},
                         check=True).stdout.strip()
    return out == "True"


@pytest.mark.parametrize("value,expected", [
    ("--autotune_dropin", True), ("--autotune_dropin=1", True),
    ("--autotune_dropin=true", True), ("--autotune_dropin=True", True),
    ("--autotune_dropin=0", False), ("--autotune_dropin=false", False),
    ("", False)])
def test_the_drop_in_flag_reads_as_the_session_reads_it(value, expected):
    assert _dropin_installed(value) is expected


def test_retune_from_the_environment():
    # regenerate --retune reaches a dump target, whose AUTOTUNE_FLAGS its
    # env attribute fixes, through this variable.
    assert not flags.from_environment({}).autotune_retune
    assert flags.from_environment({"AUTOTUNE_RETUNE": "1"}).autotune_retune
    assert not flags.from_environment(
        {"AUTOTUNE_RETUNE": "0"}).autotune_retune
    assert flags.from_environment(
        {"AUTOTUNE_FLAGS": "--autotune_retune"}).autotune_retune
    with pytest.raises(AutotuneFlagsError, match="AUTOTUNE_RETUNE='maybe'"):
        flags.from_environment({"AUTOTUNE_RETUNE": "maybe"})


@pytest.mark.parametrize("arg", ["--help", "-h", "--helpfull"])
def test_help_lists_every_flag_with_its_help_text(arg):
    with pytest.raises(flags.AutotuneFlagsError) as e:
        flags.parse(f"--autotune_workers=2 {arg}")
    text = str(e.value)
    assert text.startswith(f"AUTOTUNE_FLAGS={arg}: the flags are:")
    for spec in flags.FLAGS:
        assert f"  --{spec.name} (" in text
        assert " ".join(spec.help.split()[:4]) in " ".join(text.split())


def test_unknown_flag_suggests_the_closest_name():
    with pytest.raises(flags.AutotuneFlagsError,
                       match="unknown flag --autotune_worker; did you mean "
                             "--autotune_workers\\?"):
        flags.parse("--autotune_worker=2")
    with pytest.raises(flags.AutotuneFlagsError) as e:
        flags.parse("--zzz")
    assert "did you mean" not in str(e.value)


# -- bad values -----------------------------------------------------------

@pytest.mark.parametrize("options", [
    dict(autotune_miss_policy="foo"),
    dict(autotune_cache_mode="write"),
    dict(autotune_backend="tpu"),
    dict(require_complete_autotune_results="no"),
    dict(autotune_fail_if_sharded=1)])
def test_bad_option_values_are_rejected(session_factory, options):
    with pytest.raises(AutotuneError, match=next(iter(options))):
        session_factory(**options)


@pytest.mark.parametrize("flag", ["autotune_distributed_timeout_s"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_float_flags_fail_at_parse(flag, value, session_factory):
    with pytest.raises(flags.AutotuneFlagsError, match=flag):
        flags.parse(f"--{flag}={value}")
    with pytest.raises(AutotuneError, match="expected a finite number"):
        session_factory(**{flag: float(value)})


def test_every_float_flag_is_checked_for_finiteness():
    for spec in flags.FLAGS:
        if spec.kind == "float":
            with pytest.raises(flags.AutotuneFlagsError,
                               match="expected a finite number"):
                flags.parse(f"--{spec.name}=nan")



# -- no password in a flag error ------------------------------------------

@pytest.mark.parametrize("value", [
    "--autotune_remote_cache='{url}",                    # unbalanced '
    '--autotune_remote_cache="{url} --autotune_workers=2',  # unbalanced "
    "--autotune_remote_cache={url}",
    "--autotune_remote_cache='{url}' --autotune_distributed_timeout_s=nan",
    "--autotune_remote_cache=redis://bob:{secret} word@h/0",  # a space
    "--autotune_remote_cache redis://bob:{secret}@h/0",
    "--autotune_distributed_timeout_s=redis://bob:{secret}@h/0",
    # A flag of an earlier release, now a URL parameter.
    "--autotune_remote_cache_password_file=redis://bob:{secret}@h/0",
])
def test_no_password_in_autotune_flags_errors(value, monkeypatch, capsys):
    for url in HOSTILE_URLS[:6]:
        monkeypatch.setenv("AUTOTUNE_FLAGS",
                           value.format(url=url, secret=SECRET))
        monkeypatch.setattr(runtime_session, "_SESSION", None)
        with pytest.raises(AutotuneError) as info:
            runtime_session.session()
        captured = capsys.readouterr()
        assert_no_secret(str(info.value), captured.out, captured.err)
    monkeypatch.setattr(runtime_session, "_SESSION", None)


def test_unbalanced_quote_names_the_flags_not_the_value():
    with pytest.raises(flags.AutotuneFlagsError) as info:
        flags.parse(f"--autotune_workers=2 --autotune_remote_cache='"
                    f"redis://bob:{SECRET}@h/0")
    assert str(info.value) == (
        "AUTOTUNE_FLAGS: cannot split into flags (No closing quotation; "
        "check the quotes); it names --autotune_workers, "
        "--autotune_remote_cache")


# -- configure(): the flag parser's checks, one line naming the option -------

@pytest.mark.parametrize("name,value,expected", [
    ("autotune_max_cache_bytes", "16", "expected a whole number"),
    ("autotune_max_cache_bytes", 0, "expected a whole number >= 1"),
    ("autotune_max_cache_bytes", 2.5, "expected a whole number"),
    ("autotune_distributed_timeout_s", 0.0, "expected a number >= 0.001"),
    ("autotune_distributed_timeout_s", "1", "expected a finite number"),
    ("autotune_distributed_timeout_s", -1, "expected a number >= 0.001"),
    ("autotune_compile_jobs", -5, "expected a whole number >= 0"),
    ("autotune_workers", 0, "expected a whole number >= 1"),
    ("autotune_compile_jobs", True, "expected a whole number"),
    ("autotune_verbosity", "loud", "expected one of quiet, normal, "
                                   "verbose"),
    ("autotune_expected_gpu", 90, "expected a string"),
])
def test_configure_checks_values_as_the_flag_parser_does(
        session_factory, name, value, expected):
    # The flag parser refuses the same value given as text (where text
    # can be wrong: a string flag takes any).
    if not isinstance(value, (str, bool)) and name != "autotune_expected_gpu":
        with pytest.raises(AutotuneFlagsError, match=name):
            flags.parse(f"--{name}={value}")
    with pytest.raises(AutotuneFlagsError) as e:
        session_factory(**{name: value})
    assert str(e.value) == f"{name}={value!r}: {expected}"


def test_in_range_values_pass_both_ways(session_factory):
    assert flags.parse("--autotune_max_cache_bytes=16").\
        autotune_max_cache_bytes == 16
    sess = session_factory(autotune_max_cache_bytes=16,
                           autotune_distributed_timeout_s=2,
                           autotune_compile_jobs=0)
    assert sess.options.autotune_max_cache_bytes == 16


def test_help_in_the_environment_prints_the_flags_and_exits_0():
    import subprocess
    import sys
    env = dict(os.environ, AUTOTUNE_FLAGS="--autotune_workers=2 --help")
    result = subprocess.run(
        [sys.executable, "-c", "import autotune; print('went on')"],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("AUTOTUNE_FLAGS flags (also "
                                    "autotune.configure() keywords):")
    assert "  --autotune_max_cache_bytes (integer" in result.stdout
    assert "went on" not in result.stdout
    assert "Traceback" not in result.stderr


def test_a_bazel_load_target_without_its_cache_is_one_line(tmp_path):
    """Under `bazel test`, a cache to load that does not exist yet: one
    line naming it and the command that creates it, exit status 1, no
    traceback (in every shard alike)."""
    import subprocess
    import sys
    (tmp_path / "ws").mkdir()
    env = dict(os.environ, TEST_SRCDIR=str(tmp_path), TEST_WORKSPACE="ws",
               TEST_TARGET="//:kernels_test", TEST_TOTAL_SHARDS="2",
               TEST_SHARD_INDEX="1",
               AUTOTUNE_FLAGS="--load_autotune_results_from="
                              "TEST_WORKSPACE/testdata/smoke.textproto")
    code = "import autotune; autotune.session(); print('went on')"
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "autotune: autotune cache testdata/smoke.textproto does not exist "
        "yet: create it with `bazel run @rules_autotune//tools:regenerate`,"
        " then commit it"], result.stderr
    # Outside Bazel the package imports; the session says it when used.
    del env["TEST_TARGET"]
    result = subprocess.run([sys.executable, "-c", "import autotune; "
                             "print('imported')"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout == "imported\n", \
        result.stderr


# -- one registry of the environment variables --------------------------

ENV_NAME = re.compile(r"""["'](AUTOTUNE_[A-Z0-9_]+)["']""")


def variables_the_code_names():
    """{AUTOTUNE_* name: files} for every whole string literal of such a
    name in the package, its tools, benchmarks and macros: what os.environ
    reads (directly or through a constant) and what a macro sets."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = {}
    paths = [os.path.join(root, "pytest_autotune.py")]
    for folder in ("autotune", "tools", "bench", os.path.join("rules",
                                                              "private")):
        for base, _, names in os.walk(os.path.join(root, folder)):
            paths += [os.path.join(base, n) for n in names
                      if n.endswith((".py", ".sh", ".bzl"))]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for name in ENV_NAME.findall(f.read()):
                found.setdefault(name, []).append(os.path.relpath(path, root))
    return found


def test_every_variable_the_code_reads_is_in_the_registry_and_only_those():
    registered = {var.name for var in flags.ENV_VARS}
    named = variables_the_code_names()
    unregistered = {n: named[n] for n in sorted(set(named) - registered)}
    assert not unregistered, (
        f"read but not in autotune.flags.ENV_VARS: {unregistered}")
    unread = sorted(registered - set(named))
    assert not unread, f"in ENV_VARS but read nowhere: {unread}"
    for var in flags.ENV_VARS:
        assert var.group in flags.GROUPS and var.setter and var.help, var


def test_the_registry_check_can_fail(monkeypatch):
    monkeypatch.setattr(flags, "ENV_VARS", flags.ENV_VARS[1:])
    with pytest.raises(AssertionError, match="AUTOTUNE_FLAGS"):
        test_every_variable_the_code_reads_is_in_the_registry_and_only_those()


def test_flags_and_variables_are_grouped_by_who_sets_them():
    """docs/flags.md (generated) has one section per group, each flag and
    variable in its group's; the macro's flags are told apart from the
    ones a user sets."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tools"))
    import gen_docs
    text = gen_docs.render()
    sections = re.split(r"^## ", text, flags=re.M)
    titles = [gen_docs.GROUP_TITLES[g] for g in flags.GROUPS]
    by_title = {s.split("\n", 1)[0]: s for s in sections[1:]}
    assert all(t in by_title for t in titles), list(by_title)
    for group, title in zip(flags.GROUPS, titles):
        section = by_title[title]
        for spec in flags.FLAGS:
            assert (f"`--{spec.name}`" in section) == (spec.group == group), \
                (spec.name, title)
        for var in flags.ENV_VARS:
            assert (f"`{var.name}`" in section.split("| variable |")[-1]) \
                == (var.group == group), (var.name, title)
    remote = by_title[gen_docs.GROUP_TITLES[flags.REMOTE]]
    for parameter in flags.REMOTE_URL_PARAMETERS:
        assert f"`{parameter.name}`" in remote, parameter.name
