"""The report page as a person sees it: opened in headless Chromium, it
renders without console errors or network requests, with one chart per
fusion; a screenshot is kept in the test's tmp dir.

Skipped when no chromium is on PATH, unless AUTOTUNE_REQUIRE_CHROMIUM=1
(CI installs Debian's chromium and sets it)."""
import os

import pytest

from autotune import codec
from autotune.cli import cache_tool

import browser_support

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUSED = os.path.join(ROOT, "testdata", "fused_kernels.textproto")

if browser_support.find_chromium() is None:
    if os.environ.get("AUTOTUNE_REQUIRE_CHROMIUM") == "1":
        raise RuntimeError("AUTOTUNE_REQUIRE_CHROMIUM=1 but no chromium on "
                           "PATH (apt-get install chromium)")
    pytest.skip("no chromium on PATH (apt-get install chromium)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with browser_support.Browser() as b:
        yield b


def _base_with_one_winner_changed(path):
    """The checked-in cache as it might have been before: one fusion with
    another winner, one fusion more, one fewer."""
    entries = codec.load_results(FUSED)
    first = entries[0]
    other = next(c for c in first.candidates
                 if c.ok and c.config != first.best)
    old = [first.replace(best=other.config, run_time_us=other.run_time_us)]
    old += entries[1:-1]
    old.append(entries[-1].replace(key=entries[-1].key._replace(
        signature=entries[-1].key.signature.replace("n_rows=8", "n_rows=9"))))
    codec.dump_results(old, path)
    return len(entries)


def test_page_renders_offline_with_one_chart_per_fusion(browser, tmp_path):
    base = tmp_path / "base.textproto"
    fusions = _base_with_one_winner_changed(base)
    page_path = tmp_path / "report.html"
    assert cache_tool.main(["report", FUSED, "--base", str(base), "-o",
                            str(page_path)]) == 0
    page = browser.open(page_path.as_uri())
    assert page.console_errors() == []
    assert page.requests() == []
    assert page.evaluate(
        "document.querySelectorAll('figure.fusion-chart').length") == fusions
    # Each chart is drawn: an SVG with a real size and its bars in it.
    sizes = page.evaluate(
        "[...document.querySelectorAll('figure.fusion-chart svg')].map("
        "s => [s.getBoundingClientRect().width, "
        "s.getBoundingClientRect().height, s.querySelectorAll('path')"
        ".length])")
    assert len(sizes) == fusions
    assert all(w > 200 and h > 50 and paths > 6 for w, h, paths in sizes)
    # The changed winner is listed first, and its chart is the first one.
    assert page.evaluate(
        "document.querySelectorAll('#changed tr').length") == 2
    assert page.evaluate(
        "document.querySelector('figure.fusion-chart').dataset.signature"
    ).startswith("n_cols=30")
    shot = page.screenshot(str(tmp_path / "report.png"))
    assert os.path.getsize(shot) > 10_000


def test_the_checks_see_errors_and_requests(browser, tmp_path):
    """The two checks above can fail: a page with a script error and an
    image from the network is caught by both."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body>"
                   "<img src='http://127.0.0.1:9/x.png'>"
                   "<script>undefined_function()</script></body></html>")
    page = browser.open(bad.as_uri())
    assert any("undefined_function" in e for e in page.console_errors())
    assert page.requests() == ["http://127.0.0.1:9/x.png"]


def test_long_signatures_wrap_at_1280_px(tmp_path):
    """A 1280 px window: the summary and change tables wrap long
    signatures and configs instead of running off the screen."""
    from autotune.records import CacheKey, Candidate, Config, Entry, \
        Provenance
    signature = ";".join(f"arg{i}={i * 1000}" for i in range(40)) + \
        ";dtypes=" + ",".join(f"x{i}:float32" for i in range(30))
    config = Config({f"PARAM_{i}": 2 ** i for i in range(12)})
    other = Config({"BLOCK": 16})

    def make(best):
        return Entry(CacheKey("NVIDIA H200/sm_90/sms=132/triton-3.9.0", "k",
                              "f" * 16, signature), best,
                     10.0, [Candidate(config, 10.0), Candidate(other, 12.0)],
                     Provenance("3.9.0", "2.13.0", "12.8",
                                "2026-11-29T10:00:00Z", 0.02, "exhaustive",
                                1.5))
    new, base = tmp_path / "new.textproto", tmp_path / "base.textproto"
    codec.dump_results([make(config)], new)
    codec.dump_results([make(other)], base)
    page_path = tmp_path / "report.html"
    assert cache_tool.main(["report", str(new), "--base", str(base), "-o",
                            str(page_path)]) == 0
    with browser_support.Browser(width=1280, height=900) as narrow:
        page = narrow.open(page_path.as_uri())
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth, "
            "...[...document.querySelectorAll('table')].map("
            "t => t.getBoundingClientRect().right)]")
        page.screenshot(str(tmp_path / "report-1280.png"))
    scroll, inner, *rights = widths
    assert inner <= 1280 and scroll <= inner, widths
    assert rights and all(right <= inner for right in rights), widths
