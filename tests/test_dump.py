"""What the dump at exit writes (autotune/runtime/dump.py), from a
DumpSource built by hand: the results the run used, with the compile
requests it recorded, merged into the file there."""
import pytest

from autotune import codec
from autotune.errors import AutotuneError
from autotune.runtime import dump

from test_e2e_tools import entry


def test_the_dump_writes_the_results_the_run_used(tmp_path):
    used = [entry(1), entry(2)]
    source = dump.DumpSource(memory={e.key: e for e in used},
                             compile_requests={})
    assert codec.sort_entries(dump.dump_entries(source)) == \
        codec.sort_entries(used)
    # Nothing there yet (or /dev/null): the run's entries alone.
    entries, kept = dump.merged_entries(source, str(tmp_path / "new.pb"))
    assert codec.sort_entries(entries) == codec.sort_entries(used)
    assert kept == 0


def test_an_unreadable_file_to_merge_into_is_named(tmp_path):
    path = tmp_path / "dump.textproto"
    path.write_text("garbage {")
    source = dump.DumpSource(memory={}, compile_requests={})
    with pytest.raises(AutotuneError, match=r"^--dump_autotune_results_to: "
                       r"the existing file cannot be read \(.*dump"):
        dump.merged_entries(source, str(path))


def test_the_file_merged_into_is_read_within_the_size_limit(tmp_path):
    path = tmp_path / "dump.textproto"
    codec.dump_results([entry(n) for n in range(1, 30)], path)
    source = dump.DumpSource(memory={}, compile_requests={},
                             max_cache_bytes=100)
    with pytest.raises(AutotuneError, match="cannot be read"):
        dump.read_existing(source, str(path))
    unlimited = dump.DumpSource(memory={}, compile_requests={})
    assert len(dump.read_existing(unlimited, str(path))) == 29


def test_the_source_is_a_frozen_record():
    source = dump.DumpSource(memory={}, compile_requests={})
    with pytest.raises(AttributeError):
        source.memory = {1: 2}
