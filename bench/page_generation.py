"""The page's Generate on a loaded page, for `bench_page.py`: from the click to the first
streamed token shown, to the last, and to the whole sequence's head view drawn, with the
longest main-thread task meanwhile (the page's attnviz:generate, attnviz:token and
attnviz:drawn marks; long tasks observed from before the click)."""

from __future__ import annotations

import statistics
from urllib.parse import quote

WATCH = """() => {
  window.benchLongest = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      window.benchLongest = Math.max(window.benchLongest, e.duration);
    }
  }).observe({ type: "longtask" });
  return performance.getEntriesByName("attnviz:drawn").length;
}"""
# drawn again after the stream: the view of the prompt and its continuation
DONE = """(before) => performance.getEntriesByName("attnviz:drawn").length > before
  && new URLSearchParams(location.search).has("cont")"""
READ = """() => {
  const start = performance.getEntriesByName("attnviz:generate").at(-1).startTime;
  const tokens = performance.getEntriesByName("attnviz:token").filter((e) => e.startTime > start);
  const drawn = performance.getEntriesByName("attnviz:drawn").at(-1).startTime;
  return {
    first: tokens[0].startTime - start,
    last: tokens.at(-1).startTime - start,
    tokens: tokens.length,
    drawn: drawn - start,
    longest: window.benchLongest,
  };
}"""


def generated(browser, base: str, model: str, prompt: str, new_tokens: int, wait_until) -> dict:
    """One Generate of `new_tokens` greedy tokens after `prompt`, on a page that drew it."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{base}/?model={model}&text={quote(prompt)}&view=head")
    wait_until(page, "() => performance.getEntriesByName('attnviz:drawn').length > 0")
    page.fill("#new-tokens", str(new_tokens))
    page.fill("#temperature", "0")
    before = page.evaluate(WATCH)
    page.click("#run")
    wait_until(page, DONE, before)
    page.wait_for_timeout(100)  # a long task ending with the draw is reported after it
    timings = page.evaluate(READ)
    page.close()
    return timings


def generation_table(browser, base, model, prompts, new_tokens, wait_until) -> None:
    """Per prompt length, the median of Generates after each of its prompts (one per run,
    each new, so the server's cache never answers), printed as a table."""
    runs = len(prompts[0][1])
    print(f"\n{model}: Generate {new_tokens} tokens on a loaded page, median of {runs}")
    print(f"{'prompt':>6} {'first token':>12} {'last token':>11} {'tok/s':>6} "
          f"{'view drawn':>11} {'longest task':>13}")  # fmt: skip
    for n, texts in prompts:
        got = [generated(browser, base, model, text, new_tokens, wait_until) for text in texts]
        first = statistics.median(g["first"] for g in got) / 1000
        last = statistics.median(g["last"] for g in got) / 1000
        rate = statistics.median((g["tokens"] - 1) / max(g["last"] - g["first"], 1) * 1000
                                 for g in got)  # fmt: skip
        drawn = statistics.median(g["drawn"] for g in got) / 1000
        longest = max(g["longest"] for g in got)
        print(f"{n:>6} {first:>11.2f}s {last:>10.2f}s {rate:>6.1f} {drawn:>10.2f}s "
              f"{longest:>11.0f}ms", flush=True)  # fmt: skip
    print("first/last token: from the click on Generate to the streamed token shown; view")
    print("drawn: to the head view of the prompt and its continuation (target: first token")
    print("within 1 s; no main-thread task over 500 ms).")
