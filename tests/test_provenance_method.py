"""How an entry was measured (Provenance.method) and what tuning bought
(Provenance.default_run_time_us): carried by both formats, refused when
malformed, and kept apart by the merge rule."""
import pytest

from autotune import codec
from autotune.cache import merge
from autotune.codec import text
from autotune.errors import CacheFileError
from autotune.records import Provenance
from autotune.report import summary

from test_results_io import make_entries

GPU = "gpu do_bench(warmup_ms=25, rep_ms=100, quantiles=0.25/0.5/0.75) " \
    "l2_flush cuda_graphs=no; rule min=0.05 incumbent=0.08"


def with_method(entries, method=GPU, default=12.5):
    return [e.replace(provenance=e.provenance._replace(
        method=method, default_run_time_us=default)) for e in entries]


@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_both_formats_carry_the_method_and_the_default_time(tmp_path, ext):
    entries = with_method(make_entries(5))
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, str(path))
    loaded = codec.load_results(str(path), parse_all=True)
    assert [e.provenance for e in loaded] == [e.provenance for e in entries]
    # Written again unchanged, byte for byte.
    assert codec.encode(loaded, str(path)) == path.read_bytes()


def test_the_text_fast_path_and_protobufs_parser_agree(tmp_path):
    entries = with_method(make_entries(3))
    data = codec.encode(entries, "c.textproto").decode()
    fast = text.decode_text(data, "c.textproto")
    slow = text.decode_text_slow(data, "c.textproto")
    assert [e.provenance for e in fast] == [e.provenance for e in slow] == \
        [e.provenance for e in entries]


@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_a_negative_default_time_is_refused_naming_the_entry(tmp_path, ext):
    entries = with_method(make_entries(2), default=-3.0)
    path = tmp_path / ("c" + ext)
    path.write_bytes(codec.encode(entries, str(path)))
    with pytest.raises(CacheFileError, match=r"entry for kernel matmul "
                       r"\[M=\d+,N=128;dtypes=a:float16\]: "
                       r"default_run_time_us is -3\.0"):
        codec.load_results(str(path))


def test_speedup_is_the_default_time_over_the_winners():
    assert Provenance(default_run_time_us=30.0).speedup(10.0) == 3.0
    assert Provenance().speedup(10.0) is None


def test_entries_measured_differently_are_not_compared_head_to_head():
    [first] = with_method(make_entries(1))
    second = first.replace(best=first.candidates[1].config,
                           run_time_us=first.run_time_us / 2,
                           provenance=first.provenance._replace(
                               method="interpreter wall-clock reps=3"))
    merged, conflicts = merge.merge([("a", [first]), ("b", [second])],
                                    "measured")
    assert merged == [first]  # the first met is kept, not the "faster"
    [conflict] = conflicts
    assert "measured differently" in conflict.line()
    # The same method: decided by the times, as before.
    same = second.replace(provenance=first.provenance)
    merged, _ = merge.merge([("a", [first]), ("b", [same])], "measured")
    assert merged == [same]


def test_a_tuned_entry_records_its_method_and_what_tuning_bought(
        session_factory, tmp_path):
    import tiny_kernels as tk
    from autotune.cli import cache_show
    dump = tmp_path / "c.textproto"
    sess = session_factory(dump_autotune_results_to=str(dump))
    tk.run(tk.make_tuner(tk.GOOD), 40)
    sess.finish()
    [entry] = codec.load_results(str(dump), parse_all=True)
    prov = entry.provenance
    assert prov.method.startswith("interpreter wall clock, warmup 0, "
                                  "3 repetitions, median; rule ")
    first = next(c for c in entry.candidates if c.config == tk.GOOD[0])
    assert prov.default_run_time_us == first.run_time_us
    lines = cache_show.candidate_table(summary.fusion_record(entry.key,
                                                             entry))
    assert any(line.strip().endswith("the first offered config (an untuned "
                                     "launch)") for line in lines), lines


def test_the_rules_retired_fields_do_not_set_entries_apart():
    """Entries tuned while the selection rule still named screen_margin and
    max_duels (which never changed a measurement) are measured the same
    way as entries tuned after they went."""
    old = ("interpreter wall-clock reps=3; rule min_improvement=0.05 "
           "incumbent_improvement=0.08 screen_margin=0.1 min_rounds=4 "
           "max_rounds=12 max_duels=3")
    new = ("interpreter wall-clock reps=3; rule min_improvement=0.05 "
           "incumbent_improvement=0.08 min_rounds=4 max_rounds=12")
    [first] = with_method(make_entries(1), method=old)
    second = first.replace(provenance=first.provenance._replace(method=new))
    assert not merge.methods_differ(first, second)
    other = first.replace(provenance=first.provenance._replace(
        method=new.replace("max_rounds=12", "max_rounds=8")))
    assert merge.methods_differ(first, other)
