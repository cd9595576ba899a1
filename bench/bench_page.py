"""First render time of the page's views in headless Chromium, against a real server.

    .venv/bin/python bench/bench_page.py [--runs 3]

For the default model at 16, 64 and 128 source tokens: time from navigation to a drawn
head view and to a full layer x head grid, and the longest main-thread task (Chromium's
long-task timing). BertViz's figures (MiniLM, this machine, from the issue) are printed
beside them for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from urllib.parse import quote

from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.e2e.conftest import CHROMIUM, FLAGS
from tests.serving import start_server

TEXT = "苹果公司发布了新款手机，它采用了最新的芯片。猫追狗，狗追猫；银行的人在街上行走。" * 4
BERTVIZ = {16: ("0.7 s", "-"), 64: ("3.9 s", "12.5 s"), 128: ("11.8 s", "48 s")}
LONG_TASKS = """
window.__longest = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
}).observe({ type: "longtask", buffered: true });
"""


def timed(browser, url: str, done: str) -> tuple[float, float]:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script(LONG_TASKS)
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function(done, timeout=120_000)
    elapsed = time.perf_counter() - started
    longest = page.evaluate("window.__longest")
    page.close()
    return elapsed, longest


def retyped(browser, base: str, first: str, second: str, done: str) -> float:
    """On a loaded page (plotly.js already started), a new sentence to a drawn head view."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{base}/?text={quote(first)}&type=decoder.cross")
    page.wait_for_function(done, timeout=120_000)
    page.fill("#text", second)
    started = time.perf_counter()
    page.press("#text", "Enter")
    page.wait_for_function(f"({done}) && location.search.includes('{quote(second)[:12]}')")
    elapsed = time.perf_counter() - started
    page.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    proc, base = start_server({"ATTNVIZ_LOG_LEVEL": "warning"})
    ready = "document.getElementById('status').textContent === 'Ready.'"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            print("default model (3+3 layers x 8 heads), median of", args.runs, "fresh loads")
            columns = (
                f"{'tokens':>6} {'head view':>10} {'grid':>8} {'retyped':>8} {'longest task':>13}"
            )
            print(f"{columns}   BertViz head / model view")
            for n in (16, 64, 128):
                text = quote(TEXT[:n])
                head, grid, again, longest = [], [], [], []
                for i in range(args.runs):
                    # a new text each run, so the server's cache does not answer
                    suffix = quote(str(i) * 0)
                    h, lh = timed(
                        browser, f"{base}/?text={text}{suffix}&view=head&type=decoder.cross", ready
                    )
                    g, lg = timed(
                        browser, f"{base}/?text={text}{suffix}&view=model&type=encoder.self", ready
                    )
                    again.append(
                        retyped(browser, base, TEXT[i : i + 3], TEXT[3 * i + 5 :][:n], ready)
                    )
                    head.append(h)
                    grid.append(g)
                    longest.append(max(lh, lg))
                bv_head, bv_model = BERTVIZ[n]
                print(
                    f"{n:>6} {statistics.median(head):>9.2f}s {statistics.median(grid):>7.2f}s "
                    f"{statistics.median(again):>7.2f}s "
                    f"{max(longest):>11.0f}ms   {bv_head} / {bv_model}"
                )
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    print("head view: navigation to a drawn heatmap (analyze + one layer's heads + plot);")
    print("grid: navigation to every thumbnail of encoder self-attention and the entropy map.")
    print("retyped: a new sentence on a loaded page to its drawn head view. The longest task")
    print("is plotly.min.js starting up: one task at page load, before anything is drawn.")
    print("The default model reads at most 128 tokens; 512 waits for MiniLM.")


if __name__ == "__main__":
    main()
