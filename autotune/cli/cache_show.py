"""`autotune_cache show`: what a cache holds (entries by device, kernel
and Triton; --entries), every fusion's candidates and why the winner won
(--candidates, with the roofline figures), the coverage of each device
(--coverage) and the compile requests (--compile_requests); --json for
each. Values read from a cache are escaped (log.printable) before they
reach the terminal."""

import json

from autotune.cache.io import materialize, read_cache, stats
from autotune.cli.kernel_tree import tree_autotuners, tree_stale_reason
from autotune.errors import ToolError
from autotune.log import printable
from autotune.report import coverage as report_coverage
from autotune.report import roofline, summary


def _show_candidates(args):
    out = []
    for path in args.paths:
        entries = read_cache(path, parse_all=True)
        materialize(entries, path, everything=True)
        out.append({"path": path, "fusions": summary.fusion_records(
            entries, args.kernel)})
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: {len(item['fusions'])} fusions"
                        + (f" of {args.kernel}" if args.kernel else "")))
        for record in item["fusions"]:
            print()
            for line in candidate_table(record):
                print(line)
    return 0


def candidate_table(record):
    """Lines of one fusion's candidate table (show --candidates), with
    what came from the cache escaped (log.printable)."""
    lines = [printable(f"{record['kernel']} [{record['signature']}] on "
                       f"{record['device']}"),
             printable(f"  winner {record['best']}: "
                       f"{record['reason_text']}")]
    if record.get("speedup_over_default"):
        lines.append(f"  {record['speedup_over_default']:.2f}x the first "
                     "offered config (an untuned launch)")
    if record.get("method"):
        lines.append(printable(f"  measured with {record['method']}"))
    lines += roofline_lines(record)
    rows = record["candidates"]
    if not rows:
        return lines
    configs = [printable(r["config"]) for r in rows]
    width = max(map(len, configs))
    rates = [roofline.format_rate(r.get("bytes_per_s"), "B/s")
             for r in rows]
    rate_width = max(map(len, rates + ["bytes/s"])) \
        if any(r.get("bytes_per_s") for r in rows) else 0
    rate_head = f"  {'bytes/s':>{rate_width}}" if rate_width else ""
    lines.append(f"    {'config':<{width}}  {'time (us)':>12}  {'ratio':>6}"
                 f"  {'spread':>6}{rate_head}  failure")
    for r, config, rate in zip(rows, configs, rates):
        time = f"{r['run_time_us']:.3f}" if r["run_time_us"] is not None \
            else "-"
        rate = f"  {rate:>{rate_width}}" if rate_width else ""
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        spread = f"{r['spread'] * 100:.1f}%" if r["spread"] else "-"
        failure = r["failure"] or ""
        if r["failure_detail"]:
            failure += f" ({r['failure_detail'][:60]})"
        lines.append(f"  {'*' if r['winner'] else ' '} "
                     f"{config:<{width}}  {time:>12}  {ratio:>6}  "
                     f"{spread:>6}{rate}  {printable(failure)}".rstrip())
    return lines


def roofline_lines(record):
    """What the winner's launch moves and achieves against the device's
    roof (report/roofline.py), each figure with where it came from, and
    the advice for a fusion far below it."""
    f = record.get("roofline")
    if not f:
        return []
    rate = roofline.format_rate
    moved = f"  moves {rate(f['bytes'], 'B')} ({f['bytes_counted']})"
    if f["flops"]:
        moved += (f", {rate(f['flops'], 'FLOP')} at {f['precision']}, "
                  f"{f['arithmetic_intensity']:.3g} FLOP/B")
    lines = [moved]
    if f["bytes_per_s"] is not None:
        achieved = f"  achieves {rate(f['bytes_per_s'], 'B/s')}"
        if f["flops_per_s"]:
            achieved += f", {rate(f['flops_per_s'], 'FLOP/s')}"
        if f["note"]:
            achieved += f" ({f['note']})"
        if f["share_of_roof"] is not None:
            achieved += (f": {f['share_of_roof'] * 100:.0f} % of "
                         f"{f['share_of']}"
                         f" ({rate(_roof_value(f), _roof_unit(f))})")
            if f["bound"]:
                achieved += f", {f['bound']}-bound"
        elif f["gpu_figures"]:
            achieved += ": no roof known for this device"
        lines.append(achieved)
    if record.get("advice"):
        lines.append(printable(f"  advice: {record['advice']}"))
    return [printable(line) for line in lines]


def _roof_value(f):
    return f["roof_peak_flops"] if f["bound"] == "compute" \
        else f["roof_bandwidth"]


def _roof_unit(f):
    return "FLOP/s" if f["bound"] == "compute" else "B/s"


def cmd_show(args):
    if args.candidates:
        return _show_candidates(args)
    if args.compile_requests:
        return _show_compile_requests(args)
    if args.coverage:
        return _show_coverage(args)
    if args.kernel:
        raise ToolError("show: --kernel goes with --candidates")
    out = []
    for path in args.paths:
        entries = read_cache(path, parse_all=True)
        info = stats(entries, path)
        if args.entries:
            info["list"] = [{"device": e.key.device, "kernel": e.key.kernel,
                             "signature": e.key.signature,
                             "best": e.best.short(),
                             "run_time_us": e.run_time_us}
                            for e in sorted(entries,
                                             key=summary.entry_sort_key)]
        out.append(info)
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    # Names and values from the cache are escaped (log.printable): a
    # cache file may come from anyone, and must not drive the terminal.
    for info in out:
        print(printable(f"{info['path']}: {info['entries']} entries, "
                        f"{info['bytes']} bytes; oldest {info['oldest']}, "
                        f"newest {info['newest']}"))
        if info.get("dangling_links"):
            print(f"  skipped {info['dangling_links']} dangling link(s) "
                  "(entries moved aside as .corrupt-*, naming nothing)")
        for title, key in (("device", "by_device"), ("kernel", "by_kernel"),
                           ("triton", "by_triton_version")):
            for name, count in info[key].items():
                print(f"  {title:<7} {count:>8}  {printable(name)}")
        for item in info.get("list", []):
            print(printable(f"  {item['kernel']} [{item['signature']}] on "
                            f"{item['device']}: {item['best']} "
                            f"({item['run_time_us']:.3f} us)"))
    return 0


def coverage(entries, tuners=None):
    """report/coverage.py's table; with tuners (tree_autotuners: the
    tree's kernels) the stale entries are named too."""
    stale_reason = None if tuners is None else \
        (lambda entry: tree_stale_reason(entry, tuners))
    return report_coverage.coverage(entries, stale_reason)


def _show_coverage(args):
    """show --coverage: the coverage table of each cache."""
    tuners = tree_autotuners(args.kernel_module) if args.kernel_module \
        else None
    out = []
    for path in args.paths:
        rows = coverage(read_cache(path, parse_all=True), tuners)
        out.append({"path": path, "devices": rows,
                    "stale_checked": tuners is not None})
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: coverage by device"
                        + ("" if item["stale_checked"] else
                           " (stale not checked: give --kernel_module)")))
        for row in item["devices"]:
            print(printable(
                f"  {row['device']}: {row['entries']}/{row['fusions']} "
                f"fusions, {len(row['missing'])} missing, "
                f"{len(row['stale'])} stale; last tuned "
                f"{row['last_tuned'] or 'unknown'}"))
            for name in row["missing"]:
                print(printable(f"    missing: {name}"))
            for name in row["stale"]:
                print(printable(f"    stale: {name}"))
    return 0


def _show_compile_requests(args):
    """Every entry's compile requests (what `compile` builds)."""
    out = []
    for path in args.paths:
        for entry in sorted(read_cache(path, parse_all=True),
                            key=summary.entry_sort_key):
            if args.kernel and entry.key.kernel != args.kernel:
                continue
            out.append({"path": path, "device": entry.key.device,
                        "kernel": entry.key.kernel,
                        "signature": entry.key.signature,
                        "best": entry.best.short(),
                        "compile_requests": [r._asdict() for r in
                                             entry.compile_requests]})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for item in out:
        print(printable(f"{item['path']}: {item['kernel']} "
                        f"[{item['signature']}] on {item['device']}: "
                        f"{item['best']}"))
        for request in item["compile_requests"]:
            print(printable(f"  {request['kernel']}({request['arguments']})"
                            f" [{request['options']}] triton "
                            f"{request['triton_version']}"))
        if not item["compile_requests"]:
            print("  no compile request (record one with a dump or an "
                  "update)")
    return 0
