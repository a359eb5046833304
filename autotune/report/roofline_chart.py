"""The report page's roofline section (report/page.py calls
section_html): per device, a roofline chart (each fusion with a FLOP
count at its arithmetic intensity against its achieved FLOP/s, under the
device's roof where it is known) beside the achieved bytes/s of every
fusion against the bandwidth roof, then a table with each figure's
source and the advice for a fusion far below its roof."""
import html
import io

from autotune.report import roofline

_rate = roofline.format_rate


def _esc(text):
    return html.escape(str(text), quote=True)


def _with_figures(records):
    """{device: [records]} of the records whose winner has achieved
    figures."""
    by_device = {}
    for rec in records:
        f = rec.get("roofline")
        if f and f.get("bytes_per_s"):
            by_device.setdefault(rec["device"], []).append(rec)
    return by_device


def _label(rec):
    text = f"{rec['kernel']} [{rec['signature']}]"
    return text if len(text) <= 48 else text[:45] + "..."


def _roof_of(recs):
    """(bandwidth, its source, {precision: (peak, source)}) of a device's
    records: one device, one roof (the first figure each record gives)."""
    bandwidth, source, peaks = None, None, {}
    for rec in recs:
        f = rec["roofline"]
        if bandwidth is None and f.get("roof_bandwidth"):
            bandwidth, source = f["roof_bandwidth"], f["roof_bandwidth_source"]
        if f.get("roof_peak_flops") and f["precision"] not in peaks:
            peaks[f["precision"]] = (f["roof_peak_flops"],
                                     f["roof_peak_source"])
    return bandwidth, source, peaks


def _draw(device, recs):
    """The SVG text of one device's charts."""
    from matplotlib import ticker
    from matplotlib.figure import Figure
    modelled = [r for r in recs if r["roofline"].get("flops_per_s")]
    bandwidth, _, peaks = _roof_of(recs)
    labels = [_label(r) for r in recs]
    # Inches: the roofline panel (with its tick labels), then the bars
    # with room for their labels at 7 pt (about 0.075 in a character).
    label_in = 0.075 * max(map(len, labels)) + 0.2
    roof_in = 4.6 if modelled else 0.0
    width = roof_in + label_in + 3.6
    height = max(2.6, 0.9 + 0.22 * len(recs))
    fig = Figure(figsize=(width, height))
    bottom, top = 0.55 / height, 1.0 - 0.25 / height
    plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    if modelled:
        ax = fig.add_axes([1.0 / width, bottom, 3.3 / width, top - bottom])
        xs = [r["roofline"]["arithmetic_intensity"] for r in modelled]
        ys = [r["roofline"]["flops_per_s"] for r in modelled]
        low = min(xs + [1.0]) / 4.0
        high = max(xs + [1.0]) * 4.0
        if bandwidth:
            grid = [low * (high / low) ** (i / 64.0) for i in range(65)]
            for precision, (peak, _) in sorted(peaks.items()):
                ax.plot(grid, [min(peak, bandwidth * x) for x in grid],
                        linewidth=1.2, label=f"roof ({precision})")
            if not peaks:
                ax.plot(grid, [bandwidth * x for x in grid], linewidth=1.2,
                        label="bandwidth roof")
        ax.scatter(xs, ys, color="#c44e00", zorder=3, s=18)
        for x, y, rec in zip(xs, ys, modelled):
            ax.annotate(rec["kernel"], (x, y), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        # A decade either side at least, so that the axis has labelled
        # ticks however close the points are.
        # The roof from the left edge on.
        tops = ys + ([p for p, _ in peaks.values()] if bandwidth else [])
        bottoms = ys + ([bandwidth * low] if bandwidth else [])
        ax.set_ylim(min(bottoms) / 10.0, max(tops) * 10.0)
        # Tick labels as plain text (the page turns mathtext off).
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(
            lambda v, _: _rate(v, "FLOP/s")))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("arithmetic intensity (FLOP/byte)", fontsize=8)
        ax.set_ylabel("achieved FLOP/s", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    ax = fig.add_axes([(roof_in + label_in) / width, bottom, 3.3 / width,
                       top - bottom])
    order = sorted(range(len(recs)),
                   key=lambda i: -recs[i]["roofline"]["bytes_per_s"])
    rates = [recs[i]["roofline"]["bytes_per_s"] for i in order]
    positions = list(range(len(order)))
    ax.barh(positions, rates, color="#2a7ab9", height=0.7)
    if bandwidth:
        ax.axvline(bandwidth, color="#111", linestyle="--", linewidth=1)
    ax.set_yticks(positions)
    ax.set_yticklabels([labels[i] for i in order], fontsize=7)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(ticker.MaxNLocator(4))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(
        lambda v, _: _rate(v, "B/s") if v else "0"))
    ax.set_xlabel("achieved bytes/s" + (" (dashed: bandwidth roof)"
                                        if bandwidth else ""), fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _share(f):
    if f.get("share_of_roof") is None:
        return "-"
    bound = f", {f['bound']}-bound" if f.get("bound") else ""
    return f"{f['share_of_roof'] * 100:.0f} % of {_esc(f['share_of'])}{bound}"


def _table(recs):
    out = ["<table class=\"roofline\"><tr><th>kernel</th><th>signature</th>"
           "<th>bytes</th><th>counted</th><th>FLOPs</th><th>bytes/s</th>"
           "<th>FLOP/s</th><th>FLOP/byte</th><th>share of roof</th>"
           "<th>advice</th></tr>"]
    for rec in recs:
        f = rec["roofline"]
        intensity = f.get("arithmetic_intensity")
        out.append(
            f"<tr><td>{_esc(rec['kernel'])}</td><td><code>"
            f"{_esc(rec['signature'])}</code></td>"
            f"<td class=\"num\">{_rate(f['bytes'], 'B')}</td>"
            f"<td>{_esc(f['bytes_counted'])}</td>"
            f"<td class=\"num\">{_rate(f.get('flops'), 'FLOP')}</td>"
            f"<td class=\"num\">{_rate(f['bytes_per_s'], 'B/s')}</td>"
            f"<td class=\"num\">{_rate(f.get('flops_per_s'), 'FLOP/s')}</td>"
            f"<td class=\"num\">"
            f"{'-' if intensity is None else f'{intensity:.3g}'}</td>"
            f"<td>{_share(f)}</td><td>{_esc(rec.get('advice') or '')}</td>"
            "</tr>")
    out.append("</table>")
    return "".join(out)


def section_html(records, chart_svg_text):
    """The page's "Achieved against the roof" section; "" when no record
    has figures (entries tuned before their work was recorded).
    chart_svg_text(draw, salt) turns a drawing function into the page's
    inline SVG (page.py's settings: text as text, stable ids)."""
    by_device = _with_figures(records)
    if not by_device:
        return ""
    parts = ["<h2 id=\"roofline\">Achieved against the roof</h2>"
             "<p>Each winner's bytes/s and FLOP/s from its measured time and "
             "the work its entry records. Bytes are the tensor arguments' "
             "sizes, each counted once (a lower bound), unless the kernel's "
             "work model says them; FLOPs only from a work model. The roof: "
             "the copy bandwidth measured when tuned, else the GPU's "
             "datasheet; FLOP peaks from the datasheet.</p>"]
    for index, (device, recs) in enumerate(sorted(by_device.items())):
        bandwidth, source, peaks = _roof_of(recs)
        roof = []
        if bandwidth:
            roof.append(f"bandwidth {_rate(bandwidth, 'B/s')} ({source})")
        roof += [f"{p} peak {_rate(v, 'FLOP/s')} ({s})"
                 for p, (v, s) in sorted(peaks.items())]
        interpreted = any(r["roofline"].get("note") for r in recs)
        caption = _esc(device) + ": " + (
            _esc(roofline.NOT_GPU) + "; no roof" if interpreted else
            _esc("; ".join(roof)) if roof else "no roof known for this "
            "device")
        svg = chart_svg_text(lambda d=device, r=recs: _draw(d, r),
                             f"roofline-{index}")
        parts.append(f'<figure class="roofline-chart" '
                     f'data-device="{_esc(device)}"><figcaption>{caption}'
                     f"</figcaption>{svg}</figure>")
        parts.append(_table(recs))
    return "".join(parts)
