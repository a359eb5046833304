"""What each winner achieves against the device's roof: the work an entry
records (autotune/runtime/work.py), its field in every file format, the
figures and advice (autotune/report/roofline.py) and where they are shown
(show --candidates, the reports, the page, the GPU check)."""
import json
import os
import sys
import warnings

import pytest
import torch
from google.protobuf import text_format

import autotune
from autotune import codec
from autotune.codec import text as text_codec
from autotune.errors import AutotuneWarning, CacheFileError
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import (NO_WORK, Candidate, CacheKey, Config, Entry,
                              Provenance, Work)
from autotune.report import page, roofline, summary

import tiny_kernels as tk
from test_results_io import make_entries
from tests_support import ROOT, one_line_error, tool

H100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"
INTERPRETER = "cpu/triton-interpreter/triton-3.9.0"


def with_work(entries, **fields):
    work = Work(**{"bytes": 3.0 * (1 << 20), "source": "arguments",
                   **fields})
    return [e.replace(work=work) for e in entries]


# -- the field in every format ----------------------------------------------

@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_work_round_trips_in_text_and_binary(tmp_path, ext):
    entries = make_entries(6)
    entries[1:4] = with_work(entries[1:4], flops=2.5e9, precision="bf16",
                             copy_bandwidth=2.9e12)
    path = tmp_path / ("c" + ext)
    codec.dump_results(entries, path)
    loaded = codec.load_results(path)
    assert loaded == codec.sort_entries(entries)
    assert sum(e.work != NO_WORK for e in loaded) == 3
    # Written back from what was read (copied lines or messages): the
    # same bytes.
    again = tmp_path / ("again" + ext)
    codec.dump_results(loaded, again)
    assert again.read_bytes() == path.read_bytes()


def test_canonical_text_is_what_text_format_and_binary_say(tmp_path):
    entries = with_work(make_entries(3), flops=1e9, precision="tf32")
    codec.dump_results(entries, tmp_path / "c.textproto")
    codec.dump_results(entries, tmp_path / "c.pb")
    parsed = pb.AutotuneResults()
    text_format.Parse((tmp_path / "c.textproto").read_text(), parsed)
    binary = pb.AutotuneResults()
    binary.ParseFromString((tmp_path / "c.pb").read_bytes())
    assert parsed.entries[0].work.bytes == 3.0 * (1 << 20)
    assert parsed.entries[0].work.source == "arguments"
    parsed.ClearField("crc32")
    binary.ClearField("crc32")
    assert parsed == binary
    # The JSON form of the schema carries it too.
    from google.protobuf import json_format
    as_json = json.loads(json_format.MessageToJson(binary.entries[0]))
    assert as_json["work"]["precision"] == "tf32"


def test_the_fast_text_reader_takes_work_lines(tmp_path):
    entries = with_work(make_entries(4), flops=1e9, precision="bf16")
    path = tmp_path / "c.textproto"
    codec.dump_results(entries, path)
    text = path.read_text()
    _, _, fast = text_codec._parse_text_fast(text, str(path))
    assert all(text_codec.copyable_rest(e) is not None for e in fast)
    assert [e.work for e in fast] == [e.work for e in
                                      codec.sort_entries(entries)]
    assert [e.provenance for e in fast] == [e.provenance for e in
                                            codec.sort_entries(entries)]


def test_a_cache_without_work_loads_and_stays_byte_identical(tmp_path):
    path = tmp_path / "old.textproto"
    codec.dump_results(make_entries(5), path)
    before = path.read_bytes()
    assert b"work" not in before
    loaded = codec.load_results(path)
    assert all(e.work == NO_WORK for e in loaded)
    codec.dump_results(loaded, path)
    assert path.read_bytes() == before


def test_a_bad_work_number_is_an_error_naming_the_entry(tmp_path, capsys):
    path = tmp_path / "c.textproto"
    codec.dump_results(with_work(make_entries(1)), path)
    bad = path.read_text().replace("bytes: 3145728.0", "bytes: nan")
    path.write_text(bad)
    entry, = codec.load_results(path)
    with pytest.raises(CacheFileError) as info:
        entry.work  # noqa: B018
    assert str(path) in str(info.value) and "work bytes" in str(info.value)
    assert tool("show", "--candidates", path) == 2
    one_line_error(capsys, str(path), "work bytes")


def test_a_tuned_entry_records_its_work(session_factory):
    session_factory()
    tuned = autotune.autotune(
        configs=tk.GOOD, key=["n"],
        work_model=lambda n, **_: {"flops": 2.0 * n})(tk.axpb_kernel)
    tk.run(tuned, 64)
    entry, = autotune.session().cache.memory.values()
    assert entry.work == Work(512.0, 128.0, "arguments", "tf32", 0.0)


def test_the_run_report_gives_each_fusion_its_figures(session_factory):
    from autotune.runtime import run_report
    sess = session_factory()
    tuned = autotune.autotune(configs=tk.GOOD, key=["n"])(tk.axpb_kernel)
    tk.run(tuned, 64)
    fusion, = json.loads(json.dumps(run_report.report(sess.run_record()))
                         )["fusions"]
    f = fusion["roofline"]
    assert (f["bytes"], f["flops"], f["bytes_counted"]) == (
        512.0, None, roofline.LOWER_BOUND)
    assert f["note"] == roofline.NOT_GPU and f["bytes_per_s"] > 0
    assert f["bytes_per_s"] == pytest.approx(512.0 / (
        fusion["run_time_us"] * 1e-6))


def test_triton_style_prune_configs_by_carries_a_work_model(
        session_factory):
    session_factory()
    tuned = autotune.autotune(
        configs=tk.GOOD, key=["n"],
        prune_configs_by={"work_model": lambda **_: {"bytes": 77.0}},
    )(tk.axpb_kernel)
    tk.run(tuned, 64)
    entry, = autotune.session().cache.memory.values()
    assert entry.work == Work(77.0, 0.0, "model", "", 0.0)


def test_the_drop_in_takes_the_work_model_triton_ignores(session_factory):
    import triton
    from autotune.runtime import triton_patch
    model = {"work_model": lambda n, **_: {"flops": 3.0 * n}}
    # Triton's own autotuner takes the decoration as it is.
    theirs = triton.autotune(configs=tk.GOOD, key=["n"],
                             prune_configs_by=dict(model))(tk.axpb_kernel)
    assert not isinstance(theirs, autotune.runtime.autotuner.Autotuner)
    session_factory()
    assert not triton_patch.installed()
    autotune.install()
    try:
        ours = triton.autotune(configs=tk.GOOD, key=["n"],
                               prune_configs_by=dict(model))(tk.axpb_kernel)
        tk.run(ours, 64)
    finally:
        autotune.uninstall()
    entry, = autotune.session().cache.memory.values()
    assert entry.work.flops == 192.0


def test_a_failing_model_warns_and_records_the_arguments(session_factory):
    session_factory()
    tuned = autotune.autotune(configs=tk.GOOD, key=["n"],
                              work_model=lambda **_: {"flops": -1})(
        tk.axpb_kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tk.run(tuned, 64)
    said = [str(w.message) for w in caught
            if issubclass(w.category, AutotuneWarning)]
    assert any("work_model returned flops=-1" in s for s in said), said
    entry, = autotune.session().cache.memory.values()
    assert entry.work == Work(512.0, 0.0, "arguments", "", 0.0)


def test_work_model_must_be_callable():
    with pytest.raises(autotune.AutotuneArgumentError, match="work_model"):
        autotune.autotune(configs=tk.GOOD, key=["n"],
                          prune_configs_by={"work_model": 3})(tk.axpb_kernel)


# -- figures, roof and advice ---------------------------------------------------

def gpu_entry(work, device=H100, times=(10.0, 20.0, 40.0), blocks=(64, 128,
                                                                    256),
              failed=()):
    configs = [Config({"BLOCK": b}, num_warps=4) for b in blocks]
    cands = [Candidate(c, t) for c, t in zip(configs, times)]
    cands += [Candidate(Config({"BLOCK": b}, num_warps=4), 0.0,
                        "OUT_OF_RESOURCES") for b in failed]
    best = min((c for c in cands if c.ok), key=lambda c: c.run_time_us)
    return Entry(CacheKey(device, "softmax", "00ff00ff00ff00ff", "n=1"),
                 best.config, best.run_time_us, cands,
                 Provenance(tuner="exhaustive"), work=work)


def record_of(entry):
    return summary.fusion_record(entry.key, entry)


def test_memory_bound_figures_against_the_measured_bandwidth():
    # 10 MB in 10 us: 1 TB/s, against 2.5 TB/s measured: 40 %.
    entry = gpu_entry(Work(1e7, 1e7, "arguments", "bf16", 2.5e12),
                      blocks=(256, 128, 64))
    rec = record_of(entry)
    f = rec["roofline"]
    assert f["bytes_per_s"] == pytest.approx(1e12)
    assert f["flops_per_s"] == pytest.approx(1e12)
    assert f["arithmetic_intensity"] == 1.0
    assert f["bound"] == "memory" and f["share_of_roof"] == pytest.approx(0.4)
    assert f["share_of"] == "copy bandwidth measured when tuned"
    assert f["roof_peak_source"] == "NVIDIA H100 SXM datasheet dense bf16 peak"
    assert f["gpu_figures"] and f["note"] is None
    assert rec["advice"] == (
        "memory-bound at 40 % of copy bandwidth measured when tuned: the "
        "winner is the largest BLOCK offered; try larger blocks or more "
        "warps")
    assert [r["bytes_per_s"] for r in rec["candidates"]] == pytest.approx(
        [1e12, 5e11, 2.5e11])


def test_compute_bound_against_the_datasheet_peak():
    # 1 GFLOP a kB: far past the ridge; 1e10 FLOP in 20 us = 500 TFLOP/s.
    entry = gpu_entry(Work(1e7, 1e10, "model", "bf16", 0.0),
                      times=(40.0, 20.0, 30.0))
    f = record_of(entry)["roofline"]
    assert f["roof_bandwidth_source"] == \
        "NVIDIA H100 SXM datasheet memory bandwidth"
    assert f["bound"] == "compute"
    assert f["share_of_roof"] == pytest.approx(5e14 / 989.4e12)
    assert f["bytes_counted"] == roofline.MODELLED
    assert record_of(entry)["advice"] is None  # above half its roof


def test_advice_names_larger_configs_that_failed():
    entry = gpu_entry(Work(1e6, 0.0, "arguments", "", 3e12),
                      times=(10.0, 20.0), blocks=(128, 64), failed=(256,))
    rec = record_of(entry)
    assert rec["roofline"]["bound"] is None
    assert rec["advice"] == (
        "bytes only (no work model): at 3 % of copy bandwidth measured "
        "when tuned: larger BLOCK failed (OUT_OF_RESOURCES)")


def test_advice_for_a_winner_inside_the_offered_range():
    entry = gpu_entry(Work(1e6, 0.0, "arguments", "", 3e12),
                      times=(20.0, 10.0, 30.0))
    assert "inside the offered range" in record_of(entry)["advice"]


def test_interpreter_figures_are_labelled_and_held_against_no_roof():
    entry = gpu_entry(Work(1e6, 0.0, "arguments", "", 0.0),
                      device=INTERPRETER)
    rec = record_of(entry)
    f = rec["roofline"]
    assert f["bytes_per_s"] == pytest.approx(1e11)
    assert not f["gpu_figures"] and f["note"] == roofline.NOT_GPU
    assert f["roof_bandwidth"] is None and f["share_of_roof"] is None
    assert rec["advice"] is None


def test_an_unknown_gpu_gets_the_measured_bandwidth_and_no_peak():
    entry = gpu_entry(Work(1e6, 1e6, "arguments", "bf16", 1e12),
                      device="NVIDIA H100 PCIe/sm_90/sms=114/triton-3.9.0")
    f = record_of(entry)["roofline"]
    assert f["roof_peak_flops"] is None and f["bound"] is None
    assert f["share_of_roof"] == pytest.approx(0.1)


def test_an_entry_without_work_has_no_figures():
    rec = record_of(gpu_entry(NO_WORK))
    assert rec["roofline"] is None and rec["advice"] is None
    assert all(r["bytes_per_s"] is None for r in rec["candidates"])


def test_known_gpus_match_cuda_names_only():
    assert roofline.known_gpu(H100).name == "H100 SXM"
    assert roofline.known_gpu("NVIDIA H200/sm_90/sms=132").name == "H200"
    assert roofline.known_gpu("NVIDIA L4").peaks["bf16"] == 121e12
    assert roofline.known_gpu("NVIDIA H200 NVL/sm_90") is None


# -- where it is shown -----------------------------------------------------------

def test_show_candidates_has_the_column_and_the_lines(tmp_path, capsys):
    path = tmp_path / "c.textproto"
    codec.dump_results([gpu_entry(Work(1e7, 1e7, "arguments", "bf16",
                                       2.5e12), blocks=(256, 128, 64))],
                       path)
    assert tool("show", "--candidates", path) == 0
    out = capsys.readouterr().out
    assert "bytes/s" in out and "1 TB/s" in out and "500 GB/s" in out
    assert ("moves 10 MB (tensor arguments, each counted once: a lower "
            "bound), 10 MFLOP at bf16, 1 FLOP/B") in out
    assert ("achieves 1 TB/s, 1 TFLOP/s: 40 % of copy bandwidth measured "
            "when tuned (2.5 TB/s), memory-bound") in out
    assert "advice: memory-bound at 40 %" in out
    assert tool("show", "--candidates", "--json", path) == 0
    rec, = json.loads(capsys.readouterr().out)["fusions"]
    assert rec["roofline"]["share_of_roof"] == pytest.approx(0.4)
    assert rec["candidates"][0]["bytes_per_s"] == pytest.approx(1e12)


def test_the_page_draws_the_roofline_section():
    entries = [gpu_entry(Work(1e7, 1e10, "model", "bf16", 2.5e12)),
               gpu_entry(Work(1e7, 0.0, "arguments", "", 2.5e12)).replace(
                   key=CacheKey(H100, "copy", "00", "n=2"))]
    html = page.build_page([("c.textproto", entries)])
    assert '<h2 id="roofline">Achieved against the roof</h2>' in html
    section = html[html.index('id="roofline"'):
                   html.index("<h2>Candidates per fusion")]
    assert section.count("<svg") == 1 and "arithmetic intensity" in section
    assert "bf16 peak 989 TFLOP/s (NVIDIA H100 SXM datasheet" in section
    assert "copy bandwidth measured when tuned" in section
    # Nothing recorded, no section.
    assert 'id="roofline"' not in page.build_page(
        [("c", [gpu_entry(NO_WORK)])])


def test_gpu_check_gives_matmul_its_share_of_the_bf16_peak(monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import gpu_check
    peak, source = gpu_check._bf16_peak(None, dry_run=True)
    assert peak is None and "dry run" in source
    monkeypatch.setattr(torch.cuda, "get_device_name",
                        lambda dev: "NVIDIA H100 80GB HBM3")
    assert gpu_check._bf16_peak("cuda", dry_run=False) == (
        989.4e12, "NVIDIA H100 SXM datasheet dense bf16 peak")
    monkeypatch.setattr(torch.cuda, "get_device_name",
                        lambda dev: "NVIDIA H100 PCIe")
    assert gpu_check._bf16_peak("cuda", dry_run=False) == (
        None, "NVIDIA H100 PCIe: not in the datasheet table")
    report = {"dry_run": False, "device": "H100", "seconds": 1.0,
              "limit_s": 2.0, "ok": True, "sections": {"kernels": {
                  "status": "ok", "seconds": 1.0, "budget_s": 2,
                  "results": {
                      "matmul": [{"kernel": "matmul_bias_relu",
                                  "dtype": "torch.bfloat16",
                                  "shape": "4096x4096x4096",
                                  "tuned_tflops": 620.0,
                                  "torch_tflops": 650.0,
                                  "share_of_bf16_peak": 0.6266,
                                  "bf16_peak_source": source}],
                      "rows": [{"kernel": "softmax",
                                "dtype": "torch.bfloat16",
                                "shape": "16384x2048", "tuned_gbps": 2900.0,
                                "torch_gbps": 2800.0,
                                "share_of_copy": 0.91}]}}}}
    text = gpu_check.markdown(report)
    assert "| TFLOP/s | 0.6266 of bf16 peak |" in text
    assert "| GB/s | 0.91 of copy |" in text
