"""A long prompt in Chromium: the head view opens on a max-pooled overview of the whole
head, a dragged box zooms in until cells are tokens (their labels appear), and a
double-click goes back out; each drawn window equals the API's own answer for it, and
the row profile follows the pointer. `LONG_TOKENS` sets the prompt's length (the suite
reads 640 tokens, past the 512 where the long path starts; `make test-long` 8,192)."""

from __future__ import annotations

import os
import random
import re

import httpx2
import numpy as np
from playwright.sync_api import Page, expect

from .test_page import READY, ready, url_state

TOKENS = int(os.environ.get("LONG_TOKENS", "640"))
# a wait that grows with the prompt: generating after it and reading it whole (2 passes of
# 8,192 tokens: minutes on 2 cores)
PATIENCE_MS = max(60_000, 60 * TOKENS)
# the model view waits for every head's summary (270 heads, computed in the background
# after a run): on the zoom test's prompt, whose run (and its summaries) the server has
# kept, so that the suite computes them once (its wait covers a generation, the read of
# the prompt and the overviews of every head where the model view runs alone)
SUMMARIES_MS = max(120_000, 120 * TOKENS)
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "and",
    "then",
    "ran",
    "far",
    "away",
    "from",
    "home",
    "to",
    "see",
    "sun",
    "moon",
]


def long_text(tokens: int) -> str:
    """Seeded filler of common words (about one SmolLM2 token each), within the server's
    at most 4 characters a token (well within the server's limit for that many tokens)."""
    rng = random.Random(0)
    words = [rng.choice(WORDS) for _ in range(tokens - 20)]
    return " ".join(words)[: 4 * tokens - 32].rpartition(" ")[0]


def window(page: Page) -> list[int]:
    return [int(v) for v in page.locator("#plot").get_attribute("data-window").split(",")]


def drag(page: Page, start: tuple[float, float], end: tuple[float, float]) -> None:
    """A box dragged on the heatmap, from and to fractions of its plotting area."""
    box = page.locator("#plot .nsewdrag").first.bounding_box()
    assert box is not None
    x0, y0 = box["x"] + start[0] * box["width"], box["y"] + start[1] * box["height"]
    x1, y1 = box["x"] + end[0] * box["width"], box["y"] + end[1] * box["height"]
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=4)
    page.mouse.move(x1, y1, steps=4)
    page.mouse.up()


def test_a_long_prompt_zooms_from_the_overview_to_token_labels(page: Page, server):
    text = long_text(TOKENS)
    page.goto("/?model=smollm2&view=head&layer=3&head=4&text=hi")
    ready(page)
    page.fill("#text", text)
    page.press("#text", "Enter")
    expect(page.locator("#status")).to_have_text(READY, timeout=PATIENCE_MS)
    # the prompt and what the page generated after it, read as the page reads them
    cont = [int(i) for i in url_state(page).get("cont", "").split(",") if i]
    body = {"model": "smollm2", "text": text, "continuation": cont}
    answer = httpx2.post(f"{server}/api/v1/analyze", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    analysis = answer.json()
    n = len(analysis["source_tokens"])
    assert analysis["long"] and n > 512 and analysis["summaries_total"] == 270
    assert window(page) == [0, n, 0, n]
    expect(page.locator("#explain")).to_contain_text("each cell is the largest of the exact")
    # the overview is the API's max-pooled head
    asked = dict(body, types=["decoder.self"], layers=[3], heads=[4], encoding="json", pool=256)
    pooled = httpx2.post(f"{server}/api/v1/attention", json=asked, timeout=120).json()
    block = pooled["blocks"][0]
    drawn = page.evaluate("() => document.getElementById('plot').attnvizLong.z")
    assert len(drawn) == block["shape"][1] and len(drawn[0]) == block["shape"][2]
    assert np.abs(np.array(drawn) - np.array(block["data"][0])).max() <= 0.5 / 255 + 1e-6
    assert (
        page.evaluate("() => document.getElementById('plot').attnvizLong.rowEdges")
        == (block["row_edges"])
    )
    # zoom in, box by box, until a window is exact and its ticks are tokens
    for _ in range(6):
        if page.locator("#plot").get_attribute("data-exact") == "true":
            break
        before = window(page)
        drag(page, (0.40, 0.45), (0.55, 0.60))
        expect(page.locator("#plot")).not_to_have_attribute(
            "data-window", ",".join(map(str, before)), timeout=20_000
        )
    expect(page.locator("#plot")).to_have_attribute("data-exact", "true", timeout=20_000)
    r0, r1, c0, c1 = window(page)
    assert r1 - r0 <= 160 and c1 - c0 <= 160
    tokens = analysis["source_tokens"]
    labels = page.locator("#plot .xtick text").all_text_contents()
    every = -(-(c1 - c0) // 48)  # every token's label, or every k-th: at most 48 a side
    assert labels == [tokens[j] for j in range(c0, c1, every)]
    exact = dict(body, types=["decoder.self"], layers=[3], heads=[4], encoding="json",
                 rows=[r0, r1], columns=[c0, c1])  # fmt: skip
    block = httpx2.post(f"{server}/api/v1/attention", json=exact, timeout=120).json()["blocks"][0]
    drawn = page.evaluate("() => document.getElementById('plot').attnvizLong.z")
    assert np.abs(np.array(drawn) - np.array(block["data"][0])).max() <= 0.5 / 255 + 1e-6
    # the readout names a cell's tokens and positions; the row profile follows the pointer
    box = page.locator("#plot .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    pointed = re.compile(r"\(([\d,]+)\) → .* \(([\d,]+)\): ")  # positions, 1,234
    expect(page.locator("#readout")).to_contain_text(pointed)
    said = pointed.search(page.locator("#readout").inner_text())
    row, column = (int(said.group(i).replace(",", "")) for i in (1, 2))
    assert r0 <= row < r1 and c0 <= column < c1
    assert page.locator("#readout").inner_text().startswith(f"{tokens[row]} ({row:,}) → ")
    expect(page.locator("#extra")).to_have_attribute("data-row", str(row))
    expect(page.locator("#extra .gtitle")).to_have_text(
        f"Row {row:,} ({tokens[row]}): its weight on each key, log scale"
    )
    # the window is in the link: a reload draws it again, and so does another head
    zoom = f"{r0},{r1},{c0},{c1}"
    assert url_state(page)["win"] == zoom
    page.reload()
    expect(page.locator("#plot")).to_have_attribute("data-window", zoom, timeout=PATIENCE_MS)
    expect(page.locator("#plot")).to_have_attribute("data-exact", "true")
    page.select_option("#head", "5")
    expect(page.locator("#plot .gtitle")).to_have_text(re.compile(r" 5$"), timeout=20_000)
    expect(page.locator("#plot")).to_have_attribute("data-window", zoom)
    assert url_state(page)["head"] == "5" and url_state(page)["win"] == zoom
    # the lines view draws that window: a line for each of head 5's weights there at or
    # above the threshold
    page.click("[data-view=lines]")
    ready(page)
    expect(page.locator("#explain")).to_contain_text(
        f"the lines of the head view's zoomed window, queries {r0:,}–{r1 - 1:,} → keys "
        f"{c0:,}–{c1 - 1:,} of {n:,}"
    )
    five = httpx2.post(f"{server}/api/v1/attention", json=dict(exact, heads=[5]), timeout=120)
    weights = np.array(five.json()["blocks"][0]["data"][0])
    # a threshold some weights reach, half-way between two of the page's u1 levels (k/255):
    # a weight quantized for the wire is above it where the exact one is
    thr = round((int(float(weights.max()) * 255 / 4) + 0.5) / 255, 6)
    page.fill("#lines-threshold", str(thr))
    page.press("#lines-threshold", "Enter")
    ready(page)
    assert url_state(page)["thr"] == str(thr)
    drawn_lines = int((weights >= thr).sum())
    assert drawn_lines > 0
    expect(page.locator("#convention")).to_contain_text(f"{drawn_lines} lines drawn: ")
    # the neuron view reads the same window: its queries in the picker, its keys as rows
    page.click("[data-view=neuron]")
    ready(page)
    expect(page.locator("#explain")).to_contain_text(
        f"A long input: the queries {r0:,}–{r1 - 1:,} and keys {c0:,}–{c1 - 1:,} of the head "
        f"view's zoomed window (of {n:,})"
    )
    expect(page.locator("#neuron-query option")).to_have_count(r1 - r0)
    assert page.locator("#neuron-query").input_value() == str(r0)
    expect(page.locator("#plot .gtitle")).to_contain_text(f"Head 5 · query {r0} “{tokens[r0]}”")
    page.click("[data-view=head]")
    expect(page.locator("#plot")).to_have_attribute("data-window", zoom, timeout=20_000)
    # a double-click: the whole head again, and the link says so
    page.locator("#plot .nsewdrag").first.dblclick()
    expect(page.locator("#plot")).to_have_attribute("data-window", f"0,{n},0,{n}")
    assert "win" not in url_state(page)
    page.click("[data-view=lines]")
    expect(page.locator("#status")).to_have_text(
        f"A long input ({n:,} tokens): this view draws a window of at most 160 tokens a side. "
        "Zoom the head view in to one (its window is kept), then come back."
    )


def test_a_long_prompts_model_view_draws_overviews_and_other_views_say_why_not(page: Page, server):
    text = long_text(TOKENS)
    page.goto("/?model=smollm2&view=model&type=decoder.self&text=hi")
    ready(page)
    page.fill("#text", text)
    page.press("#text", "Enter")
    expect(page.locator("#status")).to_have_text(READY, timeout=SUMMARIES_MS)
    expect(page.locator("#grid .thumb canvas")).to_have_count(270, timeout=SUMMARIES_MS)
    # value-weighted norms: the thumbnails are their max-pooled overviews
    first = "document.querySelector('#grid canvas').toDataURL()"
    weights = page.evaluate(first)
    page.select_option("#kind", "norms")
    expect(page.locator("#explain")).to_contain_text(
        "Value-weighted norms ‖α f(x)‖: what each key adds", timeout=SUMMARIES_MS
    )
    expect(page.locator("#grid .thumb canvas")).to_have_count(270, timeout=SUMMARIES_MS)
    assert page.evaluate(first) != weights
    # the head view's overview of them is the API's, on their own scale
    page.click("[data-view=head]")
    expect(page.locator("#explain")).to_contain_text(
        "Value-weighted (Kobayashi et al. 2020): each cell is ‖α f(x)‖", timeout=SUMMARIES_MS
    )
    expect(page.locator("#explain")).to_contain_text("each cell is the largest of the exact")
    state = url_state(page)
    cont = [int(i) for i in state.get("cont", "").split(",") if i]
    layer, head = int(state.get("layer", 0)), int(state.get("head", 0))
    asked = {"model": "smollm2", "text": text, "continuation": cont, "types": ["decoder.self"],
             "layers": [layer], "heads": [head], "kinds": ["norms"], "encoding": "json",
             "pool": 256}  # fmt: skip
    answer = httpx2.post(f"{server}/api/v1/attention", json=asked, timeout=120)
    assert answer.status_code == 200, answer.text
    expected = np.array(answer.json()["blocks"][0]["data"][0])
    drawn = np.array(page.evaluate("() => document.getElementById('plot').attnvizLong.z"))
    assert drawn.shape == expected.shape
    assert np.abs(drawn - expected).max() <= 1e-3 * expected.max()  # (sent as f2)
    # their colour scale ends at their largest, not at a weight's 1
    top = page.evaluate("() => document.getElementById('plot')._fullData[0].zmax")
    assert abs(top - expected.max()) <= 1e-3 * expected.max()
    page.click("[data-view=masks]")
    expect(page.locator("#status")).to_contain_text(
        re.compile(r"This view reads whole heads: at \d+ tokens \(over 512\) only the head, "
                   r"model, positional and corpus views read this input \(and the lines and "
                   r"neuron views a zoomed window\)")
    )  # fmt: skip
    page.click("[data-view=neuron]")
    expect(page.locator("#status")).to_contain_text(
        "this view reads a window of at most 160 tokens a side. Zoom the head view in"
    )


def test_a_long_run_shows_its_progress_and_cancel_stops_it(page: Page):
    page.goto("/?model=smollm2&view=head&text=hi")
    ready(page)
    page.fill("#text", long_text(4000))
    page.press("#text", "Enter")
    status, cancel = page.locator("#status"), page.locator("#cancel-run")
    expect(status).to_contain_text(
        re.compile(r"Reading \d,\d{3} tokens: layer \d+ of 30, about \d+ s left"), timeout=60_000
    )
    expect(cancel).to_be_visible()
    expect(cancel).to_have_text("Cancel")
    cancel.click()
    expect(status).to_have_text("Cancelled. Run it again to read this text.")
    expect(cancel).to_be_hidden()
    # the server stopped reading it: a short text is read at once
    page.fill("#text", "A short one.")
    page.press("#text", "Enter")
    expect(status).to_have_text(READY, timeout=15_000)
