"""A vision-language model in the page: a tiny seeded LLaVA of yours (transformers' code,
its processor saved beside it) served with `attnviz serve --model llava=PATH`. The page
offers the text box and the picture chooser together; a sample picture and a prompt are
continued (Generate), and the picture view draws the last token's attention over the
picture's patches, which the readout names as the API's own weights say, with the share
that stays on the text; in Chinese on a phone it reads the same and fits the screen. A
tiny BLIP-2 beside it, whose picture reaches its language model only as its Q-Former's
learned queries, says so, and how much attention goes to them; a tiny LLaVA-NeXT's
readout names its rows' newlines together and its base's thumbnail; a tiny Qwen2-VL that
reads the street as about 1,000 tokens (the long path: no whole matrix kept) draws its
rows a query at a time, as the API's windows give them."""

from __future__ import annotations

import re

import httpx2
import pytest
from playwright.sync_api import Page, expect

from harness.checkpoints import saved_llava, saved_qwen2_vl
from harness.serving import start_server
from harness.vlm_checkpoints import saved
from tests.app.test_api import decode

from .conftest import ARTIFACTS, page_of
from .test_page import ready, url_state

PROMPT = "What is in the picture?"


@pytest.fixture(scope="module")
def llava_server(tmp_path_factory):
    folder = saved_llava(tmp_path_factory.mktemp("vlm") / "llava")
    blip = saved("blip-2", tmp_path_factory.mktemp("blip"))
    after = saved("llava_next", tmp_path_factory.mktemp("next"))
    # (8-pixel tokens, at most 1,024 a picture, a context of 2,048)
    long = saved_qwen2_vl(tmp_path_factory.mktemp("long"), patch_size=4, most_tokens=1024,
                          context=2048)  # fmt: skip
    proc, base = start_server(
        {"ATTNVIZ_ZOO": '["pronounce"]', "ATTNVIZ_LOG_LEVEL": "warning"},
        args=["--model", f"llava={folder}", "--model", f"blip={blip}",
              "--model", f"next={after}", "--model", f"long={long}"],
    )  # fmt: skip
    yield base
    proc.terminate()
    proc.wait(timeout=30)


def last_row(
    base: str,
    digest: str,
    continuation: list[int],
    head: int,
    model: str = "llava",
    encoding: str = "f4",
    query: int = -1,
) -> tuple[list, list]:
    """The sequence's labels and a position's weights (its last, or `query`; layer 0, one
    head), as the API sends them (in float32; or in the bytes the page reads, u1)."""
    asked = {"model": model, "image": digest, "text": PROMPT, "continuation": continuation,
             "layers": [0], "encoding": encoding}  # fmt: skip
    if query >= 0:  # (that row alone: a long input's whole matrices are not sent)
        asked["rows"] = [query, query + 1]
    block = httpx2.post(f"{base}/api/v1/attention", json=asked, timeout=60).json()["blocks"][0]
    return block["columns"], decode(block["data"])[head, -1].tolist()


def generated(base: str, digest: str) -> list[int]:
    asked = {"model": "llava", "image": digest, "text": PROMPT, "max_new_tokens": 24}
    return httpx2.post(f"{base}/api/v1/generate", json=asked, timeout=60).json()["continuation"]


def opened(browser, base: str, outside: list[str], where: str, model: str):
    """A page on the model: in English at a desktop's width, or in Chinese at a phone's."""
    context, page, errors = page_of(browser, base, outside)
    if where == "phone-zh":
        page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/?model={model}&lang={'zh' if where == 'phone-zh' else 'en'}")
    return context, page, errors


def street_and_last_row(page: Page, base: str, model: str, encoding: str = "f4"):
    """The street sample and the prompt continued on the page, and what the API says of
    that sequence: the page's state, the sequence's labels and its last position's
    weights for the page's head (last_row's)."""
    state = read_the_street(page)
    continuation = [int(i) for i in state["cont"].split(",")]
    head = int(state.get("head", 0))
    return state, *last_row(base, state["img"], continuation, head, model, encoding)


def share_said(page: Page, to: str, expected: float) -> str:
    """The readout, once it gives a share (a percentage) `to` what it names: the share the
    API's weights make `expected` (to one roundings' width: 0.05 shown, 1/255 sent)."""
    readout = page.locator("#readout")
    expect(readout).to_contain_text(to)
    shown = readout.inner_text()
    share = re.search(rf"(\d+\.\d)% {re.escape(to)}", shown)
    assert share, shown
    assert abs(float(share.group(1)) - expected) <= 0.05 + 100 / 255, (shown, expected)
    return shown


def read_the_street(page: Page) -> dict:
    """The street sample and the prompt, continued: the state the page ends in."""
    expect(page.locator("#text")).to_be_visible(timeout=60_000)
    page.locator("button.sample").first.click()
    expect(page).to_have_url(re.compile(r"[?&]img=[0-9a-f]{64}"), timeout=60_000)  # (sent)
    page.fill("#text", PROMPT)
    page.press("#text", "Enter")  # (Generate: a model that continues a prompt)
    expect(page).to_have_url(re.compile(r"[?&]cont=\d"), timeout=60_000)
    expect(page.locator("#picture-main img")).to_be_visible(timeout=60_000)
    ready(page)
    return url_state(page)


@pytest.mark.parametrize("where", ["desktop-en", "phone-zh"])
def test_a_prompt_with_a_picture_is_continued_and_its_last_token_drawn_on_it(
    browser, llava_server, outside_requests, where
):
    context, page, errors = opened(browser, llava_server, outside_requests, where, "llava")
    phone = where == "phone-zh"
    expect(page.locator("label[for=picture]")).to_be_visible(timeout=60_000)
    state = read_the_street(page)
    assert state["view"] == "picture" and len(state["img"]) == 64
    continuation = [int(i) for i in state["cont"].split(",")]
    assert continuation == generated(llava_server, state["img"])
    # the prompt's tokens: the picture's patches by place, never "<image>" repeated
    tokens = page.locator("#source-tokens")
    expect(tokens).to_contain_text("▦ 3,3")
    assert "<image>" not in tokens.inner_text()
    # the query: the sequence's last token, which predicts what comes next
    head = int(state.get("head", 0))
    columns, row = last_row(llava_server, state["img"], continuation, head)
    query = page.locator("#picture-query")
    assert query.input_value() == str(len(columns) - 1)
    patches = {label: w for label, w in zip(columns, row, strict=True) if label.startswith("▦")}
    best = max(patches, key=patches.__getitem__)
    text_share = 100 * sum(w for label, w in zip(columns, row, strict=True)
                           if not label.startswith("▦"))  # fmt: skip
    readout = page.locator("#readout")
    looks, most, to = ("关注", "最关注", "给") if phone else ("looks at", "most at", "to")
    expect(readout).to_contain_text(f"{looks} · {most} ▦")
    shown = readout.inner_text()
    named = re.search(r"(▦ \d+,\d+)[ （(]+(0\.\d\d)", shown)
    assert named, shown
    assert patches[named.group(1)] >= patches[best] - 1 / 255, (named.group(1), best)
    assert abs(float(named.group(2)) - patches[named.group(1)]) <= 0.005 + 1 / 510
    share = re.search(rf"(\d+\.\d)% {to} ([^（(]+)", shown)
    assert share, shown
    assert share.group(2).strip() == ("文本" if phone else "the text")
    assert abs(float(share.group(1)) - text_share) <= 0.05 + 100 / 255, (shown, text_share)
    # attention rollout through the language model's layers, as the lab's answer has it
    page.locator("#picture-map").select_option("rollout")
    expect(page.locator("#convention")).to_contain_text(
        "Abnar 与 Zuidema" if phone else "attention rollout through all 2 layers"
    )
    asked = {"model": "llava", "image": state["img"], "text": PROMPT, "continuation": continuation}
    rolled = httpx2.post(f"{llava_server}/api/v1/lab/rollout", json=asked, timeout=60).json()
    row = rolled["matrix"][-1]
    best = max((j for j, label in enumerate(rolled["tokens"]) if label.startswith("▦")),
               key=row.__getitem__)  # fmt: skip
    expect(readout).to_contain_text(f"{most} {rolled['tokens'][best]}")
    frame = page.locator("#picture-main").bounding_box()
    width = 390 if phone else page.viewport_size["width"]
    assert frame["x"] >= 0 and frame["x"] + frame["width"] <= width, frame
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"vlm-{where}.png", full_page=True)
    assert errors == [], errors
    context.close()


@pytest.mark.parametrize("where", ["desktop-en", "phone-zh"])
def test_a_picture_read_through_learned_queries_says_so_and_what_goes_to_them(
    browser, llava_server, outside_requests, where
):
    context, page, errors = opened(browser, llava_server, outside_requests, where, "blip")
    phone = where == "phone-zh"
    state, columns, row = street_and_last_row(page, llava_server, "blip")
    assert state["view"] == "picture"
    # the picture's tokens are its Q-Former's 4 queries, named as such
    expect(page.locator("#source-tokens")).to_contain_text("◌ 3")
    explain = page.locator("#explain")
    expect(explain).to_contain_text(
        "只通过其重采样器的 4 个可学习查询（◌ 0、◌ 1、…）读图片" if phone
        else "reads the picture only as the 4 learned queries (◌ 0, ◌ 1, …) of its resampler"
    )  # fmt: skip
    queried = 100 * sum(w for label, w in zip(columns, row, strict=True) if label[0] == "◌")
    to = "给图片的 4 个可学习查询（◌）" if phone else "to the picture's 4 learned queries (◌)"
    shown = share_said(page, to, queried)
    assert ("最关注" if phone else "most at") not in shown  # (no patch to name)
    if phone:
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert errors == [], errors
    context.close()


@pytest.mark.parametrize("where", ["desktop-en", "phone-zh"])
def test_llava_nexts_newlines_and_thumbnail_are_named_together_with_their_share(
    browser, llava_server, outside_requests, where
):
    context, page, errors = opened(browser, llava_server, outside_requests, where, "next")
    phone = where == "phone-zh"
    # (in the bytes the page reads: a share over 70 positions holds 70 roundings)
    _, columns, row = street_and_last_row(page, llava_server, "next", encoding="u1")
    # (the picture's rows' newlines, "↵ 3"; a newline the text holds shows as "↵" alone)
    newlines = sum(bool(re.fullmatch(r"↵ \d+", label)) for label in columns)
    assert newlines > 4  # (the rows of the grid kept: named as one)
    elsewhere = 100 * sum(w for label, w in zip(columns, row, strict=True) if label[0] != "▦")
    thumbnail = "整张图片的缩略图（▣）" if phone else "the whole picture's thumbnail (▣)"
    names = f"↵ ×{newlines}, {thumbnail}, {'文本' if phone else 'the text'}"
    shown = share_said(page, f"{'给' if phone else 'to'} {names}", elsewhere)
    assert "↵ 0" not in shown  # (never each newline by name)
    assert errors == [], errors
    context.close()


def strongest_named(page: Page, columns: list[str], row: list[float]) -> str:
    """The patch the readout names as most looked at, checked against the API's row: the
    strongest of the picture's patches (to a rounding), its weight as shown."""
    shown = page.locator("#readout").inner_text()
    named = re.search(r"(▦ \d+,\d+)[ （(]+(0\.\d\d)", shown)
    assert named, shown
    patches = {label: w for label, w in zip(columns, row, strict=True) if label[0] == "▦"}
    assert patches[named.group(1)] >= max(patches.values()) - 1e-6, (named.group(1), shown)
    assert abs(float(named.group(2)) - patches[named.group(1)]) <= 0.005 + 1e-6, shown
    return named.group(1)


def test_a_long_pictures_rows_are_asked_a_query_at_a_time_and_drawn_as_the_api_says(
    browser, llava_server, outside_requests
):
    context, page, errors = opened(browser, llava_server, outside_requests, "desktop-en", "long")
    asked: list[dict] = []
    page.on(
        "request",
        lambda r: r.url.endswith("/api/v1/attention") and asked.append(r.post_data_json),
    )
    state = read_the_street(page)
    continuation = [int(i) for i in state["cont"].split(",")]
    analysis = httpx2.post(f"{llava_server}/api/v1/analyze", json={
        "model": "long", "image": state["img"], "text": PROMPT, "continuation": continuation,
    }, timeout=60).json()  # fmt: skip
    positions = analysis["image"]["positions"]
    n = len(positions)
    assert analysis["long"] and n > 900  # (the street: 36 x 27 tokens of 8 pixels)
    # the last position's row, as the API's window of that row gives it
    columns, row = last_row(llava_server, state["img"], continuation, 0, "long", query=n - 1)
    expect(page.locator("#readout")).to_contain_text(f"{columns[-1]} looks at · most at ▦")
    strongest_named(page, columns, row)
    # a patch clicked: its row asked for alone, its strongest patch named
    at = next(j for j, p in enumerate(positions) if p["label"] == "▦ 20,30")
    box = page.locator("#picture-main canvas").bounding_box()
    width, height = analysis["image"]["width"], analysis["image"]["height"]
    left, top, right, bottom = positions[at]["box"]
    page.mouse.click(box["x"] + (left + right) / 2 / width * box["width"],
                     box["y"] + (top + bottom) / 2 / height * box["height"])  # fmt: skip
    expect(page.locator("#readout")).to_contain_text("▦ 20,30 looks at · most at ▦")
    columns, row = last_row(llava_server, state["img"], continuation, 0, "long", query=at)
    strongest_named(page, columns, row)
    # every row the page asked for was one query's: no whole matrix of a long input
    rows = [a.get("rows") for a in asked if a.get("image")]
    assert rows and all(r is not None and r[1] - r[0] == 1 for r in rows), rows
    # in Chinese on a phone, the same
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("#lang-zh")
    expect(page.locator("#readout")).to_contain_text("▦ 20,30 关注 · 最关注 ▦", timeout=60_000)
    strongest_named(page, columns, row)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert errors == [], errors
    context.close()
