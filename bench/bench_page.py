"""First render time of the page's views in headless Chromium, against a real server.

    .venv/bin/python bench/bench_page.py [--runs 3] [--models pronounce,minilm]

For the default model at 16, 64 and 128 source tokens and MiniLM at 16 to 512 WordPieces:
time from navigation to a drawn head view and to a full layer x head grid, and the longest
main-thread task (Chromium's long-task timing) during that load; then, on a loaded page, a
new sentence to its drawn head view. BertViz's figures (MiniLM, this machine, from the
issue) are printed beside them for scale.

How it measures: each load is a fresh Chromium (cold caches) started on the page's URL
with no DevTools client attached. The page marks `attnviz:drawn` (performance.mark) when
a view is drawn; the benchmark attaches afterwards and reads that mark and the buffered
long tasks. Attaching first would distort both: with DevTools' Runtime domain on, V8
collects source positions of plotly.js's large functions during its first run, adding
about 400 ms to the start-up task that no user's browser pays.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

import httpx2
from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tests.e2e.conftest import CHROMIUM, FLAGS
from tests.serving import free_port, start_server

CHINESE = "苹果公司发布了新款手机，它采用了最新的芯片。猫追狗，狗追猫；银行的人在街上行走。" * 4
ENGLISH = (
    "The animal didn't cross the street because it was too tired, and the quick brown fox "
    "jumps over the lazy dog while attention heads look back at every token they have seen. "
)
BERTVIZ = {
    16: ("0.7 s", "-"),
    64: ("3.9 s", "12.5 s"),
    128: ("11.8 s", "48 s"),
    256: ("42 s", "freezes"),
    512: ("> 120 s", "-"),
}
MODELS = {
    "pronounce": {"sizes": (16, 64, 128), "head_type": "decoder.cross"},
    "minilm": {"sizes": (16, 64, 128, 256, 512), "head_type": "encoder.self"},
}
DRAWN = "() => performance.getEntriesByName('attnviz:drawn').length > 0"
READ = """() => new Promise((resolve) => {
  let longest = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) longest = Math.max(longest, e.duration);
  }).observe({ type: "longtask", buffered: true });
  const drawn = performance.getEntriesByName("attnviz:drawn")[0].startTime;
  // where the time went: ms from navigation to each step, from the page's own marks and
  // the resource timings (nothing attached to the page while it loaded)
  const mark = (name) => performance.getEntriesByName(name)[0]?.startTime ?? null;
  const resources = performance.getEntriesByType("resource");
  const first = (part) => resources.find((e) => e.name.includes(part));
  const modules = resources.filter((e) => e.name.includes("/static/js/"));
  const nav = performance.getEntriesByType("navigation")[0];
  const steps = {
    html: nav.responseEnd,
    modules: Math.max(...modules.map((e) => e.responseEnd)),
    plotly_fetched: first("plotly.min.js")?.responseEnd ?? null,
    analyze_sent: first("/api/v1/analyze")?.startTime ?? null,
    analyzed: mark("attnviz:analyzed"),
    attention_sent: first("/api/v1/attention")?.startTime ?? null,
    block: mark("attnviz:block"),
    plotly_ready: mark("attnviz:plotly"),
    react: mark("attnviz:react"),
    drawn,
  };
  setTimeout(() => resolve([drawn, longest, steps]), 100);
})"""
STEPS = ("html", "modules", "plotly_fetched", "analyze_sent", "analyzed", "attention_sent",
         "block", "plotly_ready", "react", "drawn")  # fmt: skip


def wait_until(page, expression: str, arg=None, timeout: float = 120) -> None:
    """Poll an expression through DevTools' evaluate (the page's Content-Security-Policy
    forbids the eval that Playwright's wait_for_function uses)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression, arg):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout} s: {expression}")
        time.sleep(0.05)


def text_of(client: httpx2.Client, base: str, model: str, n: int) -> str:
    """A text of about n source tokens for this model (WordPieces counted by the server)."""
    if model == "pronounce":
        return CHINESE[:n]
    words = (ENGLISH * 40)[:3900].split()[:-1]  # within the server's 4000 characters
    low, high = 1, len(words)
    while low < high:  # the most words whose tokens fit in n
        mid = (low + high + 1) // 2
        body = {"model": model, "text": " ".join(words[:mid])}
        tokens = len(client.post(f"{base}/api/v1/analyze", json=body).json()["source_tokens"])
        low, high = (mid, high) if tokens <= n else (low, mid - 1)
    return " ".join(words[:low])


def variant(text: str, k: int) -> str:
    """`text` with its last character or word replaced by the k-th of a list."""
    if text.isascii():
        words = text.split()
        changed = " ".join([*words[:-1], ["rest", "home", "wait", "go", "run", "sit"][k % 6]])
    else:
        changed = text[:-1] + "的了是在有我人这中大为上个国"[k % 14]
    return changed


def query(text: str, k: int) -> str:
    return f"&text={quote(variant(text, k))}"


def cold_load(p, url: str, settle: float) -> tuple[float, float, bool, dict]:
    """A fresh Chromium on `url`: (ms from navigation to drawn, longest task ms, whether
    DevTools had to attach before the view was drawn, ms from navigation to each step)."""
    port = free_port()
    profile = tempfile.mkdtemp(prefix="bench-page-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", *FLAGS, f"--user-data-dir={profile}",
         f"--remote-debugging-port={port}", "--window-size=1280,800", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(settle)  # let it load and draw with nothing attached
        for _ in range(100):
            try:
                browser = p.chromium.connect_over_cdp(f"http://127.0.0.1:{port}")
                break
            except Exception:  # not listening yet
                time.sleep(0.1)
        page = browser.contexts[0].pages[0]
        early = not page.evaluate(DRAWN)
        try:
            wait_until(page, DRAWN)
        except TimeoutError:
            status = page.evaluate("document.getElementById('status').textContent")
            raise RuntimeError(f"{url} not drawn; the page says: {status}") from None
        drawn, longest, steps = page.evaluate(READ)
        browser.close()
        return drawn, longest, early, steps
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def retyped(browser, base: str, model: str, first: str, second: str, head_type: str) -> float:
    """On a loaded page (plotly.js started), a new sentence to its drawn head view, in s."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{base}/?model={model}&text={quote(first)}&type={head_type}")
    wait_until(page, DRAWN)
    page.fill("#text", second)
    started = page.evaluate("performance.now()")
    page.press("#text", "Enter")
    wait_until(
        page,
        """(text) => performance.getEntriesByName('attnviz:drawn').length > 1
          && new URLSearchParams(location.search).get('text') === text""",
        second,
    )
    drawn = page.evaluate("performance.getEntriesByName('attnviz:drawn').at(-1).startTime")
    elapsed = (drawn - started) / 1000
    page.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default="pronounce,minilm")
    parser.add_argument(
        "--breakdown", action="store_true", help="also print where a head view's load went"
    )
    args = parser.parse_args()
    breakdowns = []
    proc, base = start_server({"ATTNVIZ_LOG_LEVEL": "warning"})
    try:
        with sync_playwright() as p, httpx2.Client(timeout=120) as client:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            for model in args.models.split(","):
                spec = MODELS[model]
                print(f"\n{model}: median of {args.runs} cold loads (fresh Chromium each)")
                print(
                    f"{'tokens':>6} {'head view':>10} {'grid':>8} {'retyped':>8} "
                    f"{'longest task':>13}   BertViz (MiniLM) head / model view"
                )
                for n in spec["sizes"]:
                    text = text_of(client, base, model, n)
                    settle = 2.0 + n / 128
                    head, grid, again, longest, early, steps = [], [], [], [], False, []
                    for i in range(args.runs):
                        url = f"{base}/?model={model}"
                        head_url = f"{url}&view=head&type={spec['head_type']}"
                        grid_url = f"{url}&view=model&type=encoder.self"
                        # a new text for every load, so the server's cache does not answer
                        h, lh, eh, hs = cold_load(p, head_url + query(text, 3 * i), settle)
                        g, lg, eg, _ = cold_load(p, grid_url + query(text, 3 * i + 1), settle * 2)
                        steps.append(hs)
                        head.append(h / 1000)
                        grid.append(g / 1000)
                        longest.append(max(lh, lg))
                        early = early or eh or eg
                        second = variant(text, 3 * i + 2)
                        again.append(
                            retyped(browser, base, model, "hello", second, spec["head_type"])
                        )
                    bv_head, bv_model = BERTVIZ[n]
                    print(
                        f"{n:>6} {statistics.median(head):>9.2f}s {statistics.median(grid):>7.2f}s"
                        f" {statistics.median(again):>7.2f}s {max(longest):>11.0f}ms"
                        f"{'*' if early else ' '}  {bv_head} / {bv_model}"
                    )
                    breakdowns.append((model, n, steps))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    if args.breakdown:
        print_breakdown(breakdowns)
    print("\nhead view: navigation to a drawn heatmap (analyze + one layer's heads + plot);")
    print("grid: navigation to every thumbnail of encoder self-attention and the entropy map;")
    print("retyped: a new sentence on a loaded page to its drawn head view; longest task: the")
    print("longest main-thread task of either cold load (target: under 500 ms). * DevTools")
    print("attached before the view was drawn, which lengthens tasks after it.")


def print_breakdown(breakdowns: list[tuple[str, int, list[dict]]]) -> None:
    """Per model and length, the median ms from navigation to each step of a head view's
    cold load (the page's attnviz:* marks and the resource timings)."""
    print("\nhead view cold load, median ms from navigation to each step:")
    print(f"{'model':>10} {'tokens':>6} " + " ".join(f"{s:>14}" for s in STEPS))
    for model, n, steps in breakdowns:
        cells = []
        for step in STEPS:
            values = [s[step] for s in steps if s.get(step) is not None]
            cells.append(f"{statistics.median(values):>14.0f}" if values else f"{'-':>14}")
        print(f"{model:>10} {n:>6} " + " ".join(cells))


if __name__ == "__main__":
    main()
