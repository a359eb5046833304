"""A compile's result held against its target's limits
(autotune/binaries/compile_results.py): what a launch there would refuse
is OUT_OF_RESOURCES with each limit named, and a failed compile is a
compile error with the exception's last line. (tests/test_compile_check.py:
real compiles for sm_80 and sm_90 held against these limits.)"""
import time

from autotune.binaries import compile_results
from autotune.binaries.compile_results import Result, Target

SM_90 = Target("sm_90", 90)


def _result(**fields):
    return Result(target="sm_90", kernel="k", signature="x:*fp32",
                  config="BLOCK=16", ok=True, **fields)


def test_a_compile_within_the_limits_stays_ok():
    result = compile_results.apply_limits(
        _result(shared=SM_90.shared_limit, registers=64), SM_90, 32)
    assert result.ok and result.failure == "NONE" and result.reason == ""


def test_each_limit_passed_is_named_in_the_reason():
    result = compile_results.apply_limits(
        _result(shared=SM_90.shared_limit + 1, registers=255), SM_90, 64)
    assert not result.ok and result.failure == "OUT_OF_RESOURCES"
    assert result.reason.split("; ") == [
        f"shared memory {SM_90.shared_limit + 1} B > "
        f"{SM_90.shared_limit} B per block",
        "2048 threads > 1024 per block",
        "255 registers x 2048 threads > 65536 per block"]
    # A smaller limit than the target's, as a caller may hold it to.
    small = compile_results.apply_limits(_result(shared=100), SM_90, 4,
                                         shared_limit=99)
    assert small.reason == "shared memory 100 B > 99 B per block"


def test_an_unknown_capability_gets_the_portable_shared_memory():
    assert SM_90.shared_limit == 232448
    assert Target("sm_80", 80).shared_limit == 166912
    assert Target("sm_61", 61).shared_limit == 49152


def test_a_failed_compile_is_a_compile_error_with_its_last_line():
    start = time.perf_counter()
    result = compile_results._failed(
        _result(), RuntimeError("lowering failed\n  at line 3: bad cast\n"),
        start)
    assert not result.ok and result.failure == "COMPILE_ERROR"
    assert result.reason == "RuntimeError: at line 3: bad cast"
    assert result.seconds >= 0
    # A compile that ran out of memory stays out of resources.
    result = compile_results._failed(
        _result(), RuntimeError("CUDA error: out of memory"), start)
    assert result.failure == "OUT_OF_RESOURCES"
