import pytest

from autotune import flags


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


def test_every_flag_has_a_python_api_keyword():
    import inspect

    import autotune
    assert "options" in str(inspect.signature(autotune.configure))
    # The absl definitions and the Options fields are written apart: the
    # same names, and the same defaults.
    from absl import flags as absl_flags
    defined = absl_flags.FlagValues()
    flags._define(defined)
    defaults = {name: defined[name].default for name in defined}
    options = vars(flags.Options())
    assert set(defaults) == set(options)
    assert {n: v for n, v in defaults.items() if v not in (None, [])} == \
        {n: v for n, v in options.items() if v not in (None, [])}


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
