"""The report page of a 2,000-entry cache: build time, size, and the time
headless Chromium takes to load and render it.

    python bench/bench_report.py [--entries 2000] [--base]

Entries are shaped as a matmul tuning run writes them (7 candidates, one
failed). --base also compares with a copy where a tenth of the winners
changed. Render time: Chromium's load event (the page parsed, every inline
chart laid out), then a screenshot of the first screen; skipped when no
chromium is on PATH.
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from autotune import codec  # noqa: E402
from autotune.cli import cache_tool  # noqa: E402
from autotune.report import page  # noqa: E402
from bench_runtime import machine_speed, matmul_entries  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--base", action="store_true")
    args = parser.parse_args()
    machine_speed()
    work = tempfile.mkdtemp(prefix="bench-report-")
    cache = os.path.join(work, "cache.textproto")
    codec.dump_results(matmul_entries(args.entries, seed=1), cache)
    argv = ["report", cache, "-o", os.path.join(work, "report.html")]
    if args.base:
        base = os.path.join(work, "base.textproto")
        entries = matmul_entries(args.entries, seed=1)
        other = matmul_entries(args.entries, seed=2)
        mixed = [o.replace(key=e.key) if i % 10 == 0 else e
                 for i, (e, o) in enumerate(zip(entries, other))]
        codec.dump_results(mixed, base)
        argv += ["--base", base]
    start = time.perf_counter()
    code = cache_tool.main(argv)
    build = time.perf_counter() - start
    page_path = os.path.join(work, "report.html")
    size = os.path.getsize(page_path)
    print(f"entries                {args.entries}")
    print(f"build (report command) {build:8.2f} s  (exit {code}; "
          f"{min(args.entries, page.DEFAULT_MAX_CHARTS)} charts)")
    print(f"page size              {size / 2**20:8.2f} MiB "
          f"({size / args.entries / 1024:.1f} KiB per fusion)")
    import browser_support
    if browser_support.find_chromium() is None:
        print("render                 skipped: no chromium on PATH")
        return
    with browser_support.Browser() as browser:
        opened = browser.open("file://" + page_path, timeout=600)
        charts = opened.evaluate(
            "document.querySelectorAll('figure.fusion-chart').length")
        nav = opened.evaluate(
            "JSON.stringify(performance.getEntriesByType('navigation')[0])")
        start = time.perf_counter()
        opened.screenshot(os.path.join(work, "first_screen.png"),
                          full_page=False)
        shot = time.perf_counter() - start
        errors = opened.console_errors()
        requests = opened.requests()
    import json
    timing = json.loads(nav)
    print(f"render: load event     {timing['loadEventEnd'] / 1000:8.2f} s "
          f"(DOM content loaded {timing['domContentLoadedEventEnd'] / 1000:.2f}"
          f" s; {opened.load_seconds:.2f} s wall from navigate)")
    print(f"render: first screen   {shot:8.2f} s (screenshot after load)")
    print(f"charts in the page     {charts}")
    print(f"console errors         {len(errors)}; network requests "
          f"{len(requests)}")
    print(f"files in               {work}")


if __name__ == "__main__":
    main()
