"""The report page: one self-contained HTML file (styles and charts inline,
nothing fetched) showing, per fusion, a chart of its candidates' times and
a summary table; given a base cache, the fusions whose winner changed come
first with old and new times, then the added and removed ones.

Charts are drawn by matplotlib (the optional extra rules_autotune[report])
as inline SVG with text kept as text, which keeps a 2,000-fusion page small
enough to open. Fusions are compared by (device, kernel, signature): an
edited kernel has a new fingerprint but is the same fusion to a reviewer.
"""
import collections
import datetime
import html
import io
import re

from autotune.errors import ToolError
from autotune.records import hardware_of
from autotune.report import coverage, roofline_chart, summary

INSTALL_HINT = ("the report page draws its charts with matplotlib: "
                "pip install 'rules_autotune[report]' (or pip install "
                "matplotlib)")

# matplotlib takes a few tenths of a second a chart: past this many
# fusions (the changed ones first, given a base) the table alone lists
# them, so a page of a whole cache is still built in a minute or two.
DEFAULT_MAX_CHARTS = 200

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left;
         vertical-align: top; }
td.num, th { white-space: nowrap; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.winner td { font-weight: 600; }
tr.failed td { color: #a00; }
.note { background: #fff4d6; border: 1px solid #e0c060; padding: .4em .8em; }
.faster { color: #070; } .slower { color: #a00; }
figure.fusion-chart { margin: 1em 0 2em; border-top: 1px solid #ddd; }
figure.fusion-chart figcaption { font-weight: 600; margin: .4em 0; }
figure.fusion-chart svg { max-width: 100%; height: auto; }
code { font-size: 92%; overflow-wrap: anywhere; }
"""


def require_matplotlib():
    """The matplotlib module, or a ToolError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ToolError(INSTALL_HINT) from None
    matplotlib.use("Agg", force=False)
    return matplotlib


class Comparison(summary.CacheChanges):
    """A base cache against the new one, by fusion (summary.pair_fusions:
    device, kernel, signature, then the kernel's fingerprint); `base` is
    the old side."""

    def __init__(self, base, new):
        super().__init__(base, new)
        self.base = self.old
        base_devices = {e.key.device for e in base}
        new_devices = {e.key.device for e in new}
        # Another Triton on the same GPU is compared (records.CacheKey.fusion).
        self.other_device = bool(base_devices and new_devices and not (
            {hardware_of(d) for d in base_devices}
            & {hardware_of(d) for d in new_devices}))
        self.base_devices = sorted(base_devices)
        self.new_devices = sorted(new_devices)

    def device_note(self):
        return (f"the base is for {', '.join(self.base_devices)}; these "
                f"results are for {', '.join(self.new_devices)}: another "
                "device, so no entry is compared")


_us = summary.format_time


def _esc(text):
    return html.escape(str(text), quote=True)


_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_INDENT = re.compile(r"\s*\n\s*")
_GROUP_ID = re.compile(r'<g id="[^"]*"')


def chart_svg(record, matplotlib_module=None, salt="fusion"):
    """An SVG chart of one fusion's candidates: a bar per candidate
    (fastest at the top), the winner highlighted with its timing spread
    as an error bar and a shaded noise band, failed candidates marked
    with their failure kind."""
    return inline_svg(lambda: _draw_chart(record), matplotlib_module, salt)


def inline_svg(draw, matplotlib_module=None, salt="fusion"):
    """The SVG text that draw() returns, drawn under the page's settings
    and trimmed for inlining."""
    if matplotlib_module is None:
        matplotlib_module = require_matplotlib()
    # Text as SVG text, not glyph outlines (several times smaller), and no
    # timestamp or random ids, so the same cache gives the same page.
    # The salt makes the SVG's element ids unique on the page (several
    # charts share one HTML document) and the same on every build. Labels
    # are plain text: a config's string value may hold `$`, which
    # matplotlib would otherwise read as mathtext (and fail on). Text
    # objects read text.parse_math when they are made, so the settings
    # hold while the chart is built, not only while it is saved.
    with matplotlib_module.rc_context({"svg.fonttype": "none",
                                       "svg.hashsalt": salt,
                                       "text.parse_math": False,
                                       "text.usetex": False,
                                       "font.family": "sans-serif",
                                       "font.sans-serif": ["DejaVu Sans"]}):
        text = draw()
    # Inline in HTML: no XML prolog, DOCTYPE or metadata block, and the
    # pretty-printing whitespace collapsed (a third of the bytes).
    text = text[text.index("<svg"):]
    text = _METADATA.sub("", text)
    # matplotlib names its groups figure_1, axes_1, ... in every chart:
    # nothing refers to them, and repeated they would be duplicate ids.
    text = _GROUP_ID.sub("<g", text)
    return _INDENT.sub("\n", text)


def _draw_chart(record):
    """The SVG text of one chart (see chart_svg), drawn under the
    caller's matplotlib settings."""
    from matplotlib.figure import Figure
    rows = record["candidates"]
    height = 0.7 + 0.2 * max(len(rows), 1)
    # Room for the longest config label at 7 pt (about 0.075 in a
    # character): measuring the text instead (bbox_inches="tight") would
    # draw every chart twice.
    label_in = 0.075 * max([len(r["config"]) for r in rows] + [8]) + 0.15
    width = 4.5 + label_in
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes([label_in / width, 0.45 / height,
                       4.3 / width, 1.0 - 0.55 / height])
    labels = [r["config"] for r in rows]
    times = [(r["run_time_us"] or 0.0) / 1000.0 for r in rows]
    top = max(times) if any(times) else 1.0
    colors = ["#2a7ab9" if r["winner"] else
              ("#d9d9d9" if r["failure"] else "#9ecae1") for r in rows]
    positions = list(range(len(rows)))
    ax.barh(positions, times, color=colors, height=0.7)
    best = (record.get("run_time_us") or 0.0) / 1000.0
    spread = record.get("timing_spread") or 0.0
    for i, row in enumerate(rows):
        if row["failure"]:
            ax.plot([top * 0.01], [i], marker="x", color="#c00",
                    markersize=7)
            ax.text(top * 0.03, i, row["failure"], va="center",
                    color="#a00", fontsize=8)
        elif row["winner"] and spread:
            ax.errorbar([times[i]], [i], xerr=[[best * spread / 2.0],
                                               [best * spread / 2.0]],
                        color="#111", capsize=3, linewidth=1)
    if best:
        ax.axvline(best, color="#2a7ab9", linewidth=1, linestyle="--")
        band = max(spread, 0.0)
        if band:
            ax.axvspan(best * (1.0 - band / 2.0), best * (1.0 + band / 2.0),
                       color="#2a7ab9", alpha=0.15, linewidth=0)
    ax.set_yticks(positions)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlim(0, top * 1.08)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def _candidate_table(record):
    rows = ["<table><tr><th></th><th>config</th><th>time</th>"
            "<th>ratio</th><th>spread</th><th>failure</th></tr>"]
    for r in record["candidates"]:
        css = "winner" if r["winner"] else ("failed" if r["failure"] else "")
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        spread = f"{r['spread'] * 100:.1f}%" if r["spread"] else "-"
        failure = _esc(r["failure"] or "")
        if r["failure_detail"]:
            failure += f" <small>{_esc(r['failure_detail'][:120])}</small>"
        rows.append(f'<tr class="{css}"><td>{"&#9733;" if r["winner"] else ""}'
                    f"</td><td><code>{_esc(r['config'])}</code></td>"
                    f'<td class="num">{_us(r["run_time_us"])}</td>'
                    f'<td class="num">{ratio}</td><td class="num">{spread}'
                    f"</td><td>{failure}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _summary_table(records, anchors):
    out = ["<table><tr><th>kernel</th><th>signature</th><th>device</th>"
           "<th>winner</th><th>time</th><th>why</th><th>candidates</th>"
           "<th>failed</th></tr>"]
    for rec in records:
        failed = collections.Counter(r["failure"] for r in rec["candidates"]
                                     if r["failure"])
        anchor = anchors.get(id(rec))
        name = _esc(rec["kernel"])
        if anchor:
            name = f'<a href="#{anchor}">{name}</a>'
        out.append(
            f"<tr><td>{name}</td><td><code>{_esc(rec['signature'])}</code>"
            f"</td><td>{_esc(rec['device'])}</td><td><code>"
            f"{_esc(rec['best'])}</code></td><td class=\"num\">"
            f"{_us(rec.get('run_time_us'))}</td><td>"
            f"{_esc(rec.get('reason', ''))}</td>"
            f"<td class=\"num\">{len(rec['candidates'])}</td><td>"
            + _esc(", ".join(f"{n} {k}" for k, n in sorted(failed.items())))
            + "</td></tr>")
    out.append("</table>")
    return "".join(out)


def _coverage_table(entries):
    """Per device: how many of the page's fusions it has entries for,
    which it lacks, when it was last tuned (autotune_cache show --coverage
    gives the same rows, and with --kernel_module the stale ones)."""
    rows = coverage.coverage(entries)
    out = ["<table class=\"coverage\"><tr><th>device</th><th>fusions</th>"
           "<th>missing</th><th>last tuned</th></tr>"]
    for row in rows:
        missing = ", ".join(row["missing"])
        out.append(
            f"<tr><td>{_esc(row['device'])}</td><td class=\"num\">"
            f"{row['entries']}/{row['fusions']}</td><td>"
            + (f"<code>{_esc(missing)}</code>" if missing else "none")
            + f"</td><td>{_esc(row['last_tuned'] or 'unknown')}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _pct(change):
    """The change column: the new winner against the old one measured in
    the same run when it was, else against its stored time, marked as a
    comparison across runs."""
    pct = change["pct"]
    if pct is None:
        return ""
    css = "faster" if pct < 0 else "slower"
    across = "" if change["same_run"] else " <small>across runs</small>"
    return f'<span class="{css}">{pct:+.1f}%</span>{across}'


def _comparison_html(comparison):
    if comparison.other_device:
        return f'<p class="note">--base: {_esc(comparison.device_note())}</p>'
    retuned = len(comparison.retuned)
    parts = [f"<h2>Against the base: {len(comparison.changed)} winner(s) "
             f"changed, {len(comparison.added)} added, "
             f"{len(comparison.removed)} removed"
             + (f", {retuned} re-tuned (kernel or versions changed), "
                "winner(s) unchanged" if retuned else "") + "</h2>"]
    if comparison.changed:
        parts.append('<table id="changed"><tr><th>kernel</th>'
                     "<th>signature</th><th>old winner</th><th>old time "
                     "(stored)</th><th>new winner</th><th>new time</th>"
                     "<th>change</th><th>compared</th>"
                     "<th>new winner: why</th></tr>")
        for fid in comparison.changed:
            old, new = comparison.base[fid], comparison.new[fid]
            _, text = summary.winner_reason(new)
            change = comparison.change(fid)
            parts.append(
                f"<tr><td>{_esc(fid[1])}</td><td><code>{_esc(fid[2])}"
                f"</code></td><td><code>{_esc(old.best.short())}</code></td>"
                f'<td class="num">{_us(old.run_time_us)}</td><td><code>'
                f"{_esc(new.best.short())}</code></td><td class=\"num\">"
                f"{_us(new.run_time_us)}</td><td class=\"num\">"
                f"{_pct(change)}</td><td>{_esc(change['text'])}</td>"
                f"<td>{_esc(text)}</td></tr>")
        parts.append("</table>")
    if comparison.retuned:
        parts.append(_retuned_table(comparison))
    for title, keys, side, css in (("Added", comparison.added,
                                    comparison.new, "added"),
                                   ("Removed", comparison.removed,
                                    comparison.base, "removed")):
        if not keys:
            continue
        parts.append(f'<h3>{title}</h3><table id="{css}"><tr><th>kernel'
                     "</th><th>signature</th><th>device</th><th>winner</th>"
                     "<th>time</th></tr>")
        for fid in keys:
            entry = side[fid]
            parts.append(f"<tr><td>{_esc(fid[1])}</td><td><code>"
                         f"{_esc(fid[2])}</code></td>"
                         f"<td>{_esc(entry.key.device)}</td>"
                         f"<td><code>{_esc(entry.best.short())}</code></td>"
                         f'<td class="num">{_us(entry.run_time_us)}</td>'
                         "</tr>")
        parts.append("</table>")
    return "".join(parts)


def _retuned_table(comparison):
    """The fusions tuned again under a new key (an edited kernel's new
    fingerprint, a new Triton) whose winner stayed: old and new key, old
    and new winner with their times (each stored by its own run)."""
    rows = ['<h3>Re-tuned</h3><table id="retuned"><tr><th>kernel</th>'
            "<th>signature</th><th>what changed</th><th>old fingerprint"
            "</th><th>new fingerprint</th><th>old winner</th><th>old time "
            "(stored)</th><th>new winner</th><th>new time</th></tr>"]
    for fid in comparison.retuned:
        old, new = comparison.base[fid], comparison.new[fid]
        rows.append(
            f"<tr><td>{_esc(fid[1])}</td><td><code>{_esc(fid[2])}</code>"
            f"</td><td>{_esc(summary.key_change(old, new))}</td>"
            f"<td><code>{_esc(old.key.fingerprint)}</code></td>"
            f"<td><code>{_esc(new.key.fingerprint)}</code></td>"
            f"<td><code>{_esc(old.best.short())}</code></td>"
            f'<td class="num">{_us(old.run_time_us)}</td>'
            f"<td><code>{_esc(new.best.short())}</code></td>"
            f'<td class="num">{_us(new.run_time_us)}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def build_page(sources, base=None, base_name=None, title=None,
               max_charts=DEFAULT_MAX_CHARTS, run_notes=()):
    """The HTML text of the page. sources: [(name, entries)]; base: the
    entries to compare with (or None); run_notes: lines about the run that
    wrote it (its compiled kernels served and compiled), shown under the
    heading. Raises ToolError when matplotlib is missing."""
    matplotlib_module = require_matplotlib()
    entries = [e for _, entries in sources for e in entries]
    records = summary.fusion_records(entries)
    comparison = Comparison(base, entries) if base is not None else None
    # With a base, the fusions whose winner changed come first.
    if comparison is not None and not comparison.other_device:
        changed = {fid[:3] for fid in comparison.changed}
        records.sort(key=lambda r: ((hardware_of(r["device"]), r["kernel"],
                                     r["signature"]) not in changed,))
    names = ", ".join(name for name, _ in sources)
    title = title or f"Autotuning results: {names}"
    now = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    devices = collections.Counter(r["device"] for r in records)
    head = [f"<h1>{_esc(title)}</h1>",
            f"<p>{len(records)} fusions ("
            + _esc(", ".join(f"{d}: {n}" for d, n in sorted(devices.items())))
            + f"); written {now}"
            + (f"; compared with {_esc(base_name)}" if base_name else "")
            + "</p>"] + [f'<p class="run-note">{_esc(note)}</p>'
                         for note in run_notes]
    charts, anchors = [], {}
    for index, rec in enumerate(records):
        if index >= max_charts:
            break
        anchor = f"fusion-{index}"
        anchors[id(rec)] = anchor
        charts.append(
            f'<figure class="fusion-chart" id="{anchor}" '
            f'data-kernel="{_esc(rec["kernel"])}" '
            f'data-signature="{_esc(rec["signature"])}">'
            f"<figcaption>{_esc(rec['kernel'])} <code>"
            f"[{_esc(rec['signature'])}]</code> on {_esc(rec['device'])}: "
            f"winner <code>{_esc(rec['best'])}</code>, "
            f"{_us(rec.get('run_time_us'))} &mdash; "
            f"{_esc(rec.get('reason_text', ''))}"
            + (f"; {rec['speedup_over_default']:.2f}x the first offered "
               "config" if rec.get("speedup_over_default") else "")
            + "</figcaption>"
            + (chart_svg(rec, matplotlib_module, anchor)
               if rec["candidates"]
               else "<p>no candidates stored</p>")
            + "<details><summary>candidates</summary>"
            + _candidate_table(rec) + "</details></figure>")
    omitted = len(records) - len(charts)
    body = head
    if comparison is not None:
        body.append(_comparison_html(comparison))
    body.append("<h2>Summary</h2>")
    body.append(_summary_table(records, anchors))
    body.append("<h2>Coverage by device</h2>")
    body.append(_coverage_table(entries))
    body.append(roofline_chart.section_html(
        records, lambda draw, salt: inline_svg(draw, matplotlib_module,
                                               salt)))
    body.append("<h2>Candidates per fusion</h2><p>Bars: each candidate's "
                "time (the winner dark, failed candidates marked &#10007; "
                "with their kind); dashed line and shaded band: the "
                "winner's time and its measured timing spread.</p>")
    if omitted:
        body.append(f'<p class="note">{omitted} fusion(s) past the first '
                    f"{max_charts} have no chart (see the table).</p>")
    body.extend(charts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}</style></head>"
            "<body>" + "\n".join(body) + "</body></html>\n")
