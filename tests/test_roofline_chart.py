"""The report page's roofline section (autotune/report/roofline_chart.py):
which records it shows, one chart and table per device, the roof each
caption names, and the SVG it draws."""
import pytest

from autotune.records import Work
from autotune.report import page, roofline, roofline_chart

H100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"
A100 = "NVIDIA A100-SXM4-80GB/sm_80/sms=108/triton-3.9.0"
UNKNOWN = "Some Future GPU/sm_100/sms=4/triton-3.9.0"
INTERPRETER = "cpu/triton-interpreter/triton-3.9.0"


def record(kernel, work, device=H100, us=20.0, advice=None,
           signature="n=1024"):
    return {"device": device, "kernel": kernel, "signature": signature,
            "roofline": roofline.figures(device, work, us), "advice": advice}


MATMUL = Work(1e7, 1e10, "model", "bf16", 2.5e12)
COPY = Work(1e7, 0.0, "arguments", "", 0.0)


class Charts:
    """chart_svg_text stand-in: records each call, draws nothing."""

    def __init__(self):
        self.salts, self.draws = [], []

    def __call__(self, draw, salt):
        self.salts.append(salt)
        self.draws.append(draw)
        return f"<svg id=\"{salt}\"></svg>"


def section(records):
    charts = Charts()
    return roofline_chart.section_html(records, charts), charts


def test_no_section_without_achieved_figures():
    untimed = record("copy", COPY, us=0.0)
    assert untimed["roofline"]["bytes_per_s"] is None
    html, charts = section([record("old", Work()), untimed])
    assert html == "" and charts.salts == []


def test_one_chart_and_table_per_device_in_device_order():
    html, charts = section([record("matmul", MATMUL),
                            record("copy", COPY, device=A100),
                            record("copy", COPY)])
    assert html.startswith('<h2 id="roofline">Achieved against the roof</h2>')
    assert charts.salts == ["roofline-0", "roofline-1"]
    assert html.count("<figure") == 2 and html.count("<table") == 2
    a100, h100 = (html.index(f'data-device="{d}"') for d in (A100, H100))
    assert a100 < h100
    # The H100's table holds both of its fusions.
    h100_table = html[h100:]
    assert h100_table.count("<td>matmul</td>") == 1
    assert h100_table.count("<td>copy</td>") == 1


def test_the_caption_names_the_roof_and_where_each_part_comes_from():
    html, _ = section([record("matmul", MATMUL), record("copy", COPY)])
    assert ("2.5 TB/s (copy bandwidth measured when tuned); bf16 peak "
            "989 TFLOP/s (NVIDIA H100 SXM datasheet dense bf16 peak)"
            "</figcaption>") in html


@pytest.mark.parametrize("device,caption", [
    (INTERPRETER, "interpreter timings: not GPU figures; no roof"),
    (UNKNOWN, "no roof known for this device"),
])
def test_a_device_without_a_roof_says_why(device, caption):
    html, _ = section([record("copy", COPY, device=device)])
    assert f"<figcaption>{device}: {caption}</figcaption>" in html


def test_the_table_gives_each_figure_and_escapes_names():
    html, _ = section([record("add<T>", COPY, signature="dtype=a&b",
                              advice="try BLOCK > 1024")])
    assert "<td>add&lt;T&gt;</td><td><code>dtype=a&amp;b</code></td>" in html
    assert '<td class="num">10 MB</td>' in html
    assert "<td>tensor arguments, each counted once: a lower bound</td>" \
        in html
    assert '<td class="num">500 GB/s</td>' in html
    # No model: no FLOPs, FLOP/s or intensity.
    assert html.count('<td class="num">-</td>') == 3
    assert ("<td>15 % of NVIDIA H100 SXM datasheet memory bandwidth</td>"
            "<td>try BLOCK &gt; 1024</td>") in html


def test_the_share_names_the_bound_where_there_is_one():
    html, _ = section([record("matmul", MATMUL)])
    assert ("<td>51 % of NVIDIA H100 SXM datasheet dense bf16 peak, "
            "compute-bound</td>") in html
    assert '<td class="num">1e+03</td>' in html  # FLOP/byte


def test_the_drawing_has_a_roofline_panel_only_for_modelled_fusions():
    long_name = "k" * 60
    _, charts = section([record("matmul", MATMUL),
                         record(long_name, COPY)])
    svg = page.inline_svg(charts.draws[0], salt="roofline-0")
    assert svg.lstrip().startswith("<svg")
    assert "arithmetic intensity (FLOP/byte)" in svg
    assert "roof (bf16)" in svg
    assert "achieved bytes/s (dashed: bandwidth roof)" in svg
    assert svg.count("stroke-dasharray") == 1  # the bandwidth line
    # Bar labels are cut at 48 characters.
    assert "k" * 45 + "..." in svg and "k" * 46 not in svg

    _, charts = section([record("copy", COPY, device=UNKNOWN)])
    svg = page.inline_svg(charts.draws[0], salt="roofline-0")
    assert "arithmetic intensity" not in svg
    assert "achieved bytes/s<" in svg or "achieved bytes/s</text>" in svg
    assert "dashed" not in svg and "stroke-dasharray" not in svg
