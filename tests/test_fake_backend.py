"""The backend interface's test double: a full backend (every method the
package calls), timed by the clock it is given."""
import pytest
import torch

from autotune.host import device_lock
from autotune.measure import backends
from autotune.measure.fake_backend import FAKE_VERSIONS, FakeBackend
from autotune.runtime.timing_request import TimingRequest


def test_the_interface_cannot_be_half_implemented():
    class NoTiming(backends.Backend):
        def device_key(self):
            return "x"
    with pytest.raises(TypeError, match="time"):
        NoTiming()


def test_it_times_by_its_clock_with_the_setup_untimed():
    now = [0.0]
    calls = []
    backend = FakeBackend(clock=lambda: now[0], repetitions=4)

    def setup():
        calls.append("setup")
        now[0] += 1.0  # never part of the time

    def run():
        calls.append("run")
        now[0] += 0.002
    timing = backend.time(run, setup)
    assert calls == ["setup", "run"] * 4
    assert timing.median_us == pytest.approx(2000.0)
    assert timing.repetitions == 4 and backend.timed == 1
    assert backend.timing_ledger().calls == 1


def test_it_answers_the_rest_of_the_interface_from_its_arguments():
    backend = FakeBackend()
    assert backend.name == "fake" and backend.device_key() == "fake/device"
    assert backend.device == torch.device("cpu")
    assert backend.versions() == FAKE_VERSIONS
    assert not backend.scalable and backend.ignored_config_fields == ()
    backend.synchronize()
    gpu = FakeBackend(name="gpu", device="cuda:1", device_key="H100/sm_90",
                      versions={"triton_version": "3.6.0"})
    assert (gpu.name, gpu.device, gpu.device_key()) == \
        ("gpu", "cuda:1", "H100/sm_90")
    assert gpu.versions() == {"triton_version": "3.6.0"}


def test_the_package_takes_it_as_any_backend():
    # The device lock names a non-GPU backend's host; the timing in an
    # entry's provenance is the backend's own words.
    assert device_lock.device_identity(FakeBackend()).startswith("host-")
    method = TimingRequest().method(FakeBackend(repetitions=2))
    assert method.startswith("fake (fake clock, 2 repetitions); rule ")
