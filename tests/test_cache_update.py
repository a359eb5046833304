"""Updating a cache file with a run's results (autotune/cache/update.py),
and that its three users, the dump at exit, the pytest plugin's update and
regenerate, write what it says."""
import types

from autotune import codec
from autotune.cache import update
from autotune.cli import regenerate
from autotune.pytest_plugin import AutotunePlugin
from autotune.pytest_result import PluginResult
from autotune.records import Candidate, Config
from autotune.runtime import dump

from test_e2e_tools import CPU, GPU, entry


def keys(entries):
    return sorted((e.key.device, e.key.fingerprint, e.key.signature,
                   e.best.kwargs["BLOCK"]) for e in entries)


def test_a_run_supersedes_every_fingerprint_of_its_fusions():
    stale, other = entry(1, fingerprint="0ld"), entry(2)
    updated = update.update([stale, other], [("run", [entry(1)])])
    assert keys(updated.entries) == keys([entry(1), other])
    assert updated.removed == [stale]
    assert updated.kept == [other]


def test_an_unchanged_winner_keeps_the_files_entry_verbatim():
    in_file = entry(1, time_us=10.0, stamp="2026-01-01T00:00:00Z")
    rerun = entry(1, time_us=12.5, stamp="2026-12-01T00:00:00Z")
    updated = update.update([in_file], [("run", [rerun])])
    assert updated.entries == [in_file]
    assert updated.kept == [] and updated.removed == []
    # A new winner replaces it.
    faster = entry(1, block=128, time_us=5.0)
    assert update.update([in_file], [("run", [faster])]).entries == [faster]


def test_an_unchanged_winner_with_configs_measured_anew_takes_the_runs():
    """Configs added to a list and measured by an update: the winner
    stayed, but the entry carries their times (else every update measures
    them again)."""
    in_file = entry(1, time_us=10.0, stamp="2026-01-01T00:00:00Z")
    added = Candidate(Config({"BLOCK": 16}, num_warps=4), 30.0)
    rerun = in_file.replace(candidates=in_file.candidates + (added,))
    assert update.update([in_file], [("run", [rerun])]).entries == [rerun]
    assert {c.config for c in update.update(
        [in_file], [("run", [rerun])]).entries[0].candidates} == \
        {in_file.best, added.config}


def test_the_rest_is_kept_or_pruned_on_the_given_devices_only():
    old = [entry(1), entry(2), entry(2, device=GPU)]
    run = [("run", [entry(1)])]
    assert keys(update.update(old, run).entries) == keys(old)
    pruned = update.update(old, run, prune_devices={CPU})
    assert keys(pruned.entries) == keys([entry(1), entry(2, device=GPU)])
    assert pruned.removed == [entry(2)]
    assert pruned.kept == [entry(2, device=GPU)]


def test_runs_that_disagree_are_decided_by_the_merge_rule():
    in_file = entry(2, block=64, time_us=9.5, stamp="2026-01-01T00:00:00Z")
    updated = update.update([in_file], [
        ("a", [entry(2, block=128, time_us=8.5)]),
        ("b", [entry(2, block=64, time_us=9.0)])])
    (conflict,) = updated.conflicts
    # The file's config is the incumbent: inside its margin, it stays, as
    # the file had it.
    assert conflict.kept_source == "b"
    assert updated.entries == [in_file]


OLD_GPU = GPU.replace("triton-3.9.0", "triton-3.6.0")


def test_a_fusion_re_measured_under_a_new_triton_replaces_the_old_versions():
    """The device key names the Triton version: an update that re-measured
    a fusion after an upgrade replaces the old version's entry (one entry
    per fusion and device); a fusion it did not reach keeps its entry, and
    another GPU's entries stay."""
    old = [entry(1, device=OLD_GPU), entry(2, device=OLD_GPU),
           entry(3, device=OLD_GPU), entry(1, device=CPU)]
    run = [entry(1, device=GPU), entry(2, device=GPU, block=128)]
    updated = update.update(old, [("run", run)])
    assert keys(updated.entries) == keys(
        run + [entry(3, device=OLD_GPU), entry(1, device=CPU)])
    assert keys(updated.removed) == keys(old[:2])
    merged = regenerate.merge_dumps(old, [("//:t_autotune_dump", run, GPU)])
    assert keys(merged.entries) == keys(updated.entries)


def test_an_entry_re_measured_under_a_new_torch_takes_the_runs():
    """torch is not in the device key: the same key, the same winner, but
    measured under torch 2.14, so the next load counts no drift."""
    in_file = entry(1)
    rerun = in_file.replace(provenance=in_file.provenance._replace(
        torch_version="2.14.0", timestamp="2026-12-01T00:00:00Z"))
    assert update.update([in_file], [("run", [rerun])]).entries == [rerun]
    # A patch release is no drift: the file's entry stays verbatim.
    patch = in_file.replace(provenance=in_file.provenance._replace(
        torch_version="2.13.1"))
    assert update.update([in_file], [("run", [patch])]).entries == [in_file]


def test_an_upgrade_reads_as_fusions_re_tuned():
    from autotune.report import summary
    old = [entry(1, device=OLD_GPU), entry(2, device=OLD_GPU)]
    new = [entry(1, device=GPU), entry(2, device=GPU, block=128)]
    changes = summary.CacheChanges(old, new)
    assert changes.headline() == (
        "0 added, 0 removed, 1 changed; 1 re-tuned (triton-3.6.0 -> "
        "triton-3.9.0), winner unchanged")
    assert changes.lines()[-1] == (
        f"= k [n=1] on {GPU}: BLOCK=64 num_warps=4 num_stages=3 (re-tuned: "
        "triton-3.6.0 -> triton-3.9.0, winner unchanged)")

    # Two kernels of one name and signature: each is paired with its own.
    two = [entry(1, device=OLD_GPU), entry(1, device=OLD_GPU, block=128,
                                           fingerprint="00000000bbbb")]
    again = [e.replace(key=e.key._replace(device=GPU)) for e in two]
    assert summary.CacheChanges(two, again).headline() == (
        "0 added, 0 removed, 0 changed; 2 re-tuned (triton-3.6.0 -> "
        "triton-3.9.0), winners unchanged")


# -- the three users ---------------------------------------------------------

OLD = [entry(1, fingerprint="0ld"), entry(2, time_us=7.0), entry(3),
       entry(3, device=GPU)]
RUN = [entry(1), entry(2, time_us=8.0), entry(4, block=32)]


def test_regenerate_prunes_the_dumps_device():
    merged = regenerate.merge_dumps(OLD, [("//:t_autotune_dump", RUN, CPU)])
    expected = update.update(OLD, [("run", RUN)], prune_devices={CPU})
    assert merged.entries == expected.entries
    assert keys(merged.removed) == keys([entry(1, fingerprint="0ld"),
                                         entry(3)])


def test_the_dump_at_exit_keeps_what_it_did_not_replace(tmp_path):
    path = tmp_path / "dump.textproto"
    codec.dump_results(OLD, path)
    source = dump.DumpSource(memory={e.key: e for e in RUN},
                             compile_requests={}, max_cache_bytes=None)
    entries, kept = dump.merged_entries(source, str(path))
    expected = update.update(OLD, [("this run", RUN)])
    assert codec.sort_entries(entries) == codec.sort_entries(
        expected.entries)
    assert kept == 2  # entry(3) on both devices
    assert entry(2, time_us=7.0) in entries  # as the file had it


def test_the_plugins_update_prunes_only_the_devices_it_ran_on(tmp_path):
    path = tmp_path / "cache.textproto"
    plugin = types.SimpleNamespace(
        settings=types.SimpleNamespace(cache=str(path), prune=True),
        narrowed=[], sessions=[], worker_outputs=[], old_entries=OLD,
        result=PluginResult(mode="update", retune=False, cache=str(path)),
        _fusions=[])
    AutotunePlugin._finish_update(
        plugin, types.SimpleNamespace(testsfailed=0), 0, [("gw0", RUN)])
    expected = update.update(OLD, [("gw0", RUN)], prune_devices={CPU})
    assert plugin.result.written is True
    assert codec.load_results(path) == codec.sort_entries(expected.entries)
    assert entry(3, device=GPU) in codec.load_results(path)
