"""First render time of the page's views in headless Chromium, against a real server.

    .venv/bin/python bench/bench_page.py [--runs 3] [--models pronounce,minilm,smollm2]

For the default model at 16, 64 and 128 source tokens, MiniLM at 16 to 512 WordPieces and
SmolLM2 at 16, 128 and 512 prompt tokens (and its Generate: bench/page_generation.py):
time from navigation to a drawn head view and to a full layer x head grid, and the longest
main-thread task (Chromium's long-task timing) during that load; then, on a loaded page, a
new sentence to its drawn head view. For MiniLM, BertViz's head view at the same lengths in
the same run: transformers' BertModel (eager, output_attentions) and BertViz's
head_view(..., html_action="return") make its page, served with its three scripts from the
npm packages pinned in package.json (requirejs 2.3.6, d3 5.7.0, jquery 2.1.0: npm's nearest
to the 2.0.0 it names) instead of its CDN, and drawn in the same fresh Chromium; its time
is that Python part plus navigation to its first attention line (a MutationObserver mark).

How it measures: each load is a fresh Chromium (cold caches) started on the page's URL
with no DevTools client attached. The page marks `attnviz:drawn` (performance.mark) when
a view is drawn; the benchmark attaches afterwards and reads that mark and the buffered
long tasks. Attaching first would distort both: with DevTools' Runtime domain on, V8
collects source positions of plotly.js's large functions during its first run, adding
about 400 ms to the start-up task that no user's browser pays.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

import httpx2
import torch
from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from page_generation import generation_table

from harness.browser import CHROMIUM, FLAGS
from harness.serving import free_port, start_server

CHINESE = "苹果公司发布了新款手机，它采用了最新的芯片。猫追狗，狗追猫；银行的人在街上行走。" * 4
ENGLISH = (
    "The animal didn't cross the street because it was too tired, and the quick brown fox "
    "jumps over the lazy dog while attention heads look back at every token they have seen. "
)
ROOT = os.path.join(os.path.dirname(__file__), "..")
# BertViz's page loads these from a CDN (by its URL's last part); here from node_modules
BERTVIZ_SCRIPTS = {
    "require.min.js": "requirejs/require.js",
    "d3.min": "d3/dist/d3.min.js",  # require.js paths, without .js
    "jquery.min": "jquery/dist/jquery.min.js",
}
# marks when BertViz has drawn its first attention line (its page has no mark of its own)
BERTVIZ_WATCH = """new MutationObserver((_, observer) => {
  if (document.querySelector("#vis svg line")) {
    performance.mark("bertviz:drawn");
    observer.disconnect();
  }
}).observe(document.documentElement, { childList: true, subtree: true });
"""
MODELS = {
    "pronounce": {"sizes": (16, 64, 128), "head_type": "decoder.cross"},
    "minilm": {"sizes": (16, 64, 128, 256, 512), "head_type": "encoder.self"},
    "smollm2": {"sizes": (16, 128, 512), "head_type": "decoder.self", "grid_type": "decoder.self"},
}
GENERATED = 16  # tokens each Generate of the generation table makes
DRAWN = "() => performance.getEntriesByName('attnviz:drawn').length > 0"
BERTVIZ_DRAWN = "() => performance.getEntriesByName('bertviz:drawn').length > 0"
# the longest main-thread task of the load so far, from the buffered long-task entries
LONGEST = """() => new Promise((resolve) => {
  let longest = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) longest = Math.max(longest, e.duration);
  }).observe({ type: "longtask", buffered: true });
"""
BERTVIZ_READ = (
    LONGEST
    + """
  const drawn = performance.getEntriesByName("bertviz:drawn")[0].startTime;
  setTimeout(() => resolve([drawn, longest, {}]), 100);
})"""
)
READ = (
    LONGEST
    + """
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
)
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
    if text.isascii():  # (k >= 6 adds its number: every k its own text)
        words = text.split()
        last = ["rest", "home", "wait", "go", "run", "sit"][k % 6] + (str(k // 6) if k >= 6 else "")
        changed = " ".join([*words[:-1], last])
    else:
        chars = "的了是在有我人这中大为上个国"
        changed = (text[:-1] if k < len(chars) else text[:-2]) + chars[k % 14]
        changed += chars[k // 14] if k >= len(chars) else ""
    return changed


def query(text: str, k: int) -> str:
    return f"&text={quote(variant(text, k))}"


def cold_load(
    p, url: str, settle: float, drawn_when: str = DRAWN, read: str = READ
) -> tuple[float, float, bool, dict]:
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
        early = not page.evaluate(drawn_when)
        try:
            wait_until(page, drawn_when, timeout=BERTVIZ_LIMIT)
        except TimeoutError:
            status = page.evaluate("document.getElementById('status')?.textContent")
            raise RuntimeError(f"{url} not drawn; the page says: {status}") from None
        drawn, longest, steps = page.evaluate(read)
        browser.close()
        return drawn, longest, early, steps
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


class BertViz:
    """BertViz's head view of MiniLM: its page made as its users make it, and served with
    its scripts from node_modules on a loopback port."""

    def __init__(self) -> None:
        from bertviz import head_view
        from tokenizers import Tokenizer
        from transformers import BertModel

        from attnviz.model.pretrained.bert import package_dir

        self.head_view = head_view
        self.model = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager")
        self.model.eval()
        self.tokenizer = Tokenizer.from_file(str(package_dir() / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.folder = tempfile.mkdtemp(prefix="bench-bertviz-")
        modules = os.path.join(ROOT, "node_modules")
        for target in BERTVIZ_SCRIPTS.values():
            if not os.path.isfile(os.path.join(modules, target)):
                raise SystemExit(f"node_modules/{target} is missing: run npm ci")
            shutil.copy(os.path.join(modules, target), self.folder)
        with open(os.path.join(self.folder, "watch.js"), "w") as f:
            f.write(BERTVIZ_WATCH)
        handler = functools.partial(QuietHandler, directory=self.folder)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.pages = 0

    def page(self, text: str) -> tuple[str, float]:
        """The URL of BertViz's head view of `text`, and the seconds its Python part took:
        transformers' forward with the attentions, and head_view's HTML."""
        started = time.perf_counter()
        encoding = self.tokenizer.encode(text)
        ids, tokens = encoding.ids, encoding.tokens
        if len(ids) > 512:  # as our server reads it: the first 511 and the closing [SEP]
            ids, tokens = [*ids[:511], ids[-1]], [*tokens[:511], tokens[-1]]
        with torch.no_grad():
            attentions = self.model(input_ids=torch.tensor([ids]), output_attentions=True)
        html = self.head_view(attentions.attentions, tokens, html_action="return").data
        python_s = time.perf_counter() - started
        for name, target in BERTVIZ_SCRIPTS.items():
            local = os.path.basename(target)
            local = local if name.endswith(".js") else local.removesuffix(".js")
            html, found = re.subn(r"https://[^'\"]*/" + re.escape(name), local, html)
            if not found:
                raise SystemExit(f"BertViz's page no longer loads {name}: update bench_page.py")
        self.pages += 1
        name = f"head-{self.pages}.html"
        with open(os.path.join(self.folder, name), "w") as f:
            f.write('<!doctype html><html><head><meta charset="utf-8"><title>BertViz</title>')
            f.write('<script src="watch.js"></script></head><body>' + html + "</body></html>")
        return f"{self.base}/{name}", python_s

    def close(self) -> None:
        self.server.shutdown()
        shutil.rmtree(self.folder, ignore_errors=True)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


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
    parser.add_argument("--models", default="pronounce,minilm,smollm2")
    parser.add_argument(
        "--breakdown", action="store_true", help="also print where a head view's load went"
    )
    args = parser.parse_args()
    breakdowns = []
    bertviz = BertViz() if "minilm" in args.models.split(",") else None
    proc, base = start_server({"ATTNVIZ_LOG_LEVEL": "warning"})
    try:
        with sync_playwright() as p, httpx2.Client(timeout=120) as client:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            for model in args.models.split(","):
                spec = MODELS[model]
                print(f"\n{model}: median of {args.runs} cold loads (fresh Chromium each)")
                print(
                    f"{'tokens':>6} {'head view':>10} {'grid':>8} {'retyped':>8} "
                    f"{'longest task':>13}"
                    + (BERTVIZ_HEADER if bertviz and model == "minilm" else "")
                )
                for n in spec["sizes"]:
                    text = text_of(client, base, model, n)
                    settle = 2.0 + n / 128
                    head, grid, again, longest, early, steps = [], [], [], [], False, []
                    for i in range(args.runs):
                        url = f"{base}/?model={model}"
                        head_url = f"{url}&view=head&type={spec['head_type']}"
                        grid_type = spec.get("grid_type", "encoder.self")
                        grid_url = f"{url}&view=model&type={grid_type}"
                        # a new text for every load, so the server's cache does not answer
                        h, lh, eh, hs = cold_load(p, head_url + query(text, 3 * i), settle)
                        g, lg, eg, _ = cold_load(p, grid_url + query(text, 3 * i + 1), settle * 2)
                        steps.append(hs)
                        head.append(h / 1000)
                        grid.append(g / 1000)
                        longest.append(max(lh, lg))
                        early = early or eh or eg
                        second = variant(text, 3 * i + 2)
                        if model != "smollm2":  # (its Enter generates: the table below)
                            again.append(
                                retyped(browser, base, model, "hello", second, spec["head_type"])
                            )
                    ours = statistics.median(head)
                    line = (
                        f"{n:>6} {ours:>9.2f}s {statistics.median(grid):>7.2f}s"
                        + (f" {statistics.median(again):>7.2f}s" if again else f" {'-':>8}")
                        + f" {max(longest):>11.0f}ms"
                        f"{'*' if early else ' '}"
                    )
                    if bertviz and model == "minilm":
                        line += "   " + bertviz_cells(p, bertviz, text, n, args.runs, ours)
                    print(line, flush=True)
                    breakdowns.append((model, n, steps))
                if model == "smollm2":
                    prompts = [(n, [variant(text_of(client, base, model, n), 3 * i + 7)
                                    for i in range(args.runs)]) for n in spec["sizes"]]  # fmt: skip
                    generation_table(browser, base, model, prompts, GENERATED, wait_until)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if bertviz:
            bertviz.close()
    if args.breakdown:
        print_breakdown(breakdowns)
    print("\nhead view: navigation to a drawn heatmap (analyze + one layer's heads + plot);")
    print("grid: navigation to every thumbnail of one attention type and the entropy map;")
    print("retyped: a new sentence on a loaded page to its drawn head view (SmolLM2: Enter")
    print("generates, timed in its Generate table); longest task: the")
    print("longest main-thread task of either cold load (target: under 200 ms). * DevTools")
    print("attached before the view was drawn, which lengthens tasks after it. BertViz page:")
    print("navigation to its first attention line; with its Python: plus transformers' forward")
    print("with the attentions and head_view's HTML (the page is drawn in one task: its longest);")
    print("ours / BertViz: our head view over BertViz with its Python.")


BERTVIZ_HEADER = "   BertViz page / with its Python  its longest task  ours / BertViz"
BERTVIZ_LIMIT = 120  # s a BertViz page may take to draw before it is given up on


def bertviz_cells(p, bertviz: BertViz, text: str, n: int, runs: int, ours: float) -> str:
    """BertViz's head view of the same text: median page time (navigation to its first
    attention line) and that plus its Python part, and our head view's time over that."""
    pages, totals, longest = [], [], 0.0
    for i in range(runs if n <= 128 else 1):  # past 128 tokens it takes minutes
        url, python_s = bertviz.page(variant(text, 3 * i))
        try:
            drawn, task, _, _ = cold_load(p, url, 2.0 + n / 64, BERTVIZ_DRAWN, BERTVIZ_READ)
        except (TimeoutError, RuntimeError):
            return f"{'> ' + str(BERTVIZ_LIMIT) + ' s':>12} (not drawn)"
        pages.append(drawn / 1000)
        totals.append(drawn / 1000 + python_s)
        longest = max(longest, task)
    page, total = statistics.median(pages), statistics.median(totals)
    return f"{page:>8.2f}s / {total:>6.2f}s {longest:>9.0f}ms {ours / total:>14.2f}"


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
