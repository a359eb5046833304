"""A Triton upgrade, as a user of the pytest plugin meets it: the checked-in
cache was tuned under an older Triton (its device key names that version),
a load run serves its entries as hits and says how to refresh them, and
`pytest --autotune-update=all` refreshes them in place: the file keeps one
entry per fusion and device, and the next load run has nothing to advise."""
import pytest

from autotune import codec

from test_pytest_plugin import (CACHE, PLUGIN, run_pytest, triton_version,
                                tuned, write_project)

pytest_plugins = ["pytester"]
__all__ = ["tuned"]  # the tuned project: a fixture shared with the plugin's tests

OLD_TRITON = "3.1.0"


def _as_if_tuned_under(entries, version):
    """The entries with the Triton of their device key and provenance set
    to `version` (a cache tuned before an upgrade)."""
    running = f"/triton-{triton_version()}"
    out = []
    for e in entries:
        assert e.key.device.endswith(running), e.key.device
        device = e.key.device[:-len(running)] + f"/triton-{version}"
        out.append(e.replace(
            key=e.key._replace(device=device),
            provenance=e.provenance._replace(triton_version=version)))
    return out


@pytest.fixture
def upgraded(pytester, tuned):
    write_project(pytester.path)
    cache = pytester.path / CACHE
    cache.write_bytes(tuned[1])
    old = _as_if_tuned_under(codec.load_results(str(cache), parse_all=True),
                             OLD_TRITON)
    assert len(old) == 3
    codec.dump_results(old, str(cache))
    return pytester


def test_update_all_after_an_upgrade_replaces_the_entries(upgraded):
    cache = upgraded.path / CACHE
    result = run_pytest(upgraded, *PLUGIN)
    assert result.returncode == 0, result.output
    advice = "tuned under another Triton, torch or CUDA version"
    assert f"3 hit(s) {advice}" in result.output
    assert "--autotune-update=all" in result.output

    # The load line counts them among the usable entries, said apart.
    assert "usable on cpu/triton-interpreter/triton-" \
        f"{triton_version()}: 3 (0 tuned under this Triton, 3 under " \
        "another: hits" in result.output, result.output

    result = run_pytest(upgraded, *PLUGIN, "--autotune-update=all")
    assert result.returncode == 0, result.output
    # A deliberate re-measure reads as one, not as misses.
    assert "autotune: 3 re-measured, 0 hits, 0 missed;" in result.output, \
        result.output
    entries = codec.load_results(str(cache))
    assert len(entries) == 3, [e.key for e in entries]
    assert {e.key.device for e in entries} == {
        f"cpu/triton-interpreter/triton-{triton_version()}"}
    # The upgrade reads as the same fusions re-tuned (or, where a winner
    # moved, changed), not as 3 added and 3 removed.
    assert "3 entries; 0 added, 0 removed" in result.output, result.output
    assert f"re-tuned (triton-{OLD_TRITON} -> triton-{triton_version()})" \
        in result.output or "3 changed" in result.output, result.output
    assert advice not in result.output

    result = run_pytest(upgraded, *PLUGIN)
    assert result.returncode == 0, result.output
    assert advice not in result.output
    assert "another Triton" not in result.output
    assert "0 candidate benchmarks" in result.output
