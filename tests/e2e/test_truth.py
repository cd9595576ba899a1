"""What a new user reads is true: decoder rows named by what their step predicts, each
model opened on its most telling head with a line saying what it shows, the model's own
examples, the lab's headlines. Screenshots land in out/e2e/ (the page fixture)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS, block_outside
from .test_page import ready, ticks, url_state


def test_cross_attention_rows_name_the_syllable_each_step_predicts(page: Page):
    page.goto("/?text=他在银行工作")  # no head in the link: the model card's alignment head
    ready(page)
    state = url_state(page)
    assert (state["type"], state["layer"], state["head"]) == ("decoder.cross", "2", "1")
    expect(page.locator("#plot .gtitle")).to_have_text("cross-attention · Layer 2 · Head 1")
    assert ticks(page, "x") == list("他在银行工作")
    # each row is the step that predicts its label: hang2's row, not yin2's, is 行's
    assert ticks(page, "y") == ["ta1", "zai4", "yin2", "hang2", "gong1", "zuo4", "<eos>"]
    convention = page.locator("#convention")
    expect(convention).to_contain_text("Opened on the head the model card names")
    expect(convention).to_contain_text("an alignment head")
    expect(convention).to_contain_text("Rows: the token each decoder step predicts")
    # the hover and the readout name both tokens of a step: hovering row 3, column 3
    box = page.locator("#plot .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 3.5 / 6, box["y"] + box["height"] * 3.5 / 7)
    readout = page.locator("#readout")
    expect(readout).to_have_text(
        re.compile(r"^step 3: fed yin2, predicts hang2 → 行: (0\.9\d\d|1\.000)$")
    )
    expect(page.locator("#plot .hovertext")).to_contain_text("predicts hang2")


def test_decoder_self_attention_keeps_the_fed_tokens_on_both_axes(page: Page):
    page.goto("/?text=猫追狗&type=decoder.self&layer=0&head=0")
    ready(page)
    assert ticks(page, "y") == ["<bos>", "mao1", "zhui1", "gou3"]
    assert ticks(page, "x") == ["<bos>", "mao1", "zhui1", "gou3"]
    expect(page.locator("#convention")).to_have_text(
        re.compile("^Rows and columns: the tokens fed")
    )
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#convention")).to_contain_text("行和列：输入解码器的词元")


def test_minilm_opens_on_a_head_its_metrics_chose_with_english_examples(page: Page):
    page.goto("/?model=minilm")
    examples = page.locator("#examples button")
    expect(examples.first).to_have_text(
        "The animal didn't cross the street because it was too tired."
    )
    assert all(text.isascii() for text in examples.all_text_contents())  # English only
    examples.first.click()
    ready(page)
    info = page.evaluate(
        "JSON.parse(document.getElementById('boot').textContent).models"
        ".find((m) => m.id === 'minilm').start_head"
    )
    assert info["source"] == "metrics" and info["role"] == "previous-token"
    state = url_state(page)
    assert (state["layer"], state["head"]) == (str(info["layer"]), str(info["head"]))
    expect(page.locator("#convention")).to_contain_text(
        "Opened on this model's strongest head of its kind, a previous-token head"
    )
    # the model view names each head and marks what the metrics call it
    page.click("[data-view=model]")
    ready(page)
    captions = page.locator(".thumb-caption")
    expect(captions).to_have_count(72)
    expect(captions.first).to_have_text(re.compile(r"^H0( \w+)?$"))
    marked = page.locator(f".thumb[data-layer='{info['layer']}'][data-head='{info['head']}']")
    expect(marked.locator(".thumb-caption")).to_have_text(f"H{info['head']} prev")
    expect(marked).to_have_attribute("title", re.compile("a previous-token head"))


def test_switching_model_opens_its_own_head_and_examples(page: Page):
    page.goto("/?text=银行")
    ready(page)
    page.select_option("#model", "minilm")
    ready(page)
    state = url_state(page)
    assert state["type"] == "encoder.self" and state["model"] == "minilm"
    assert page.locator("#examples button").first.text_content().startswith("The animal")


def test_the_api_docs_render_offline_and_the_page_links_them(page: Page):
    # `page` aborts and records any request that leaves 127.0.0.1 (conftest)
    page.goto("/")
    expect(page.locator("a.docs-link")).to_have_attribute("href", "/docs")
    page.goto("/docs")
    expect(page.locator(".opblock-summary-path").first).to_be_visible(timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_text_contents()
    assert "/api/v1/attention" in paths and "/api/v1/analyze" in paths
    page.goto("/redoc")
    expect(page.get_by_text("/api/v1/attention").first).to_be_attached(timeout=30_000)


def test_tokens_the_model_cannot_read_are_said_so_beside_the_output(page: Page):
    page.goto("/?model=minilm&text=猫追狗 is a cat")
    ready(page)
    expect(page.locator("#unknown")).to_be_visible()
    expect(page.locator("#unknown")).to_have_text(
        "3 of the 8 tokens are unknown to this model ([UNK]): it reads English, "
        "and what it makes of them is a guess."
    )
    page.goto("/?model=minilm&text=a cat")
    ready(page)
    expect(page.locator("#unknown")).to_be_hidden()


LONG = " ".join(["the quick brown fox jumps over the lazy dog while attention looks back"] * 40)


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"truth-{name}.png", full_page=False)


@pytest.fixture(params=["en", "zh"])
def phone(browser, server, outside_requests, request):
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, base_url=server, is_mobile=True, has_touch=True
    )
    block_outside(context, outside_requests)
    page = context.new_page()
    page.lang = request.param
    yield page
    context.close()


def test_on_a_phone_the_heatmap_comes_first_under_the_input(phone: Page):
    phone.goto(f"/?text=他在银行工作&lang={phone.lang}")
    ready(phone)
    form = phone.locator("#input-form").bounding_box()
    plot = phone.locator("#plot").bounding_box()
    output = phone.locator("#output").bounding_box()
    assert form["y"] < plot["y"] < output["y"] and plot["y"] < 300, (form, plot, output)
    assert plot["width"] <= 390
    # the title starts at the left, clear of the toolbar at the top right
    title = phone.locator("#plot .gtitle").bounding_box()
    bar = phone.locator("#plot .modebar").bounding_box()
    assert title["x"] + title["width"] <= bar["x"] or title["y"] >= bar["y"] + bar["height"]
    shot(phone, f"phone-head-{phone.lang}")


def test_a_long_input_keeps_the_heatmap_in_view(page: Page):
    page.goto(f"/?model=minilm&text={LONG}")
    ready(page)
    tokens = page.locator("#source-tokens")
    assert tokens.bounding_box()["height"] <= 50  # two lines, the rest behind a button
    more = page.locator("#more-tokens")
    expect(more).to_have_text(re.compile(r"^show all 512 tokens$"))
    # it starts on screen at 1280 x 800, each of the 512 rows big enough to point at
    assert page.locator("#plot").bounding_box()["y"] < 350
    rows = page.locator("#plot .nsewdrag").bounding_box()["height"] / 512
    assert rows >= 1.5, rows
    labels = ticks(page, "y")
    assert 0 < len(labels) <= 64  # thinned: at most 64 labels over the 512 rows
    shot(page, "long-input")
    more.click()
    expect(more).to_be_hidden()
    assert tokens.bounding_box()["height"] > 100


def test_masks_are_yes_or_no_and_a_lone_sentence_has_no_padding(page: Page):
    page.goto("/?text=猫追狗&view=masks")
    ready(page)
    legend = page.locator("#grid .mask-plot[data-type='encoder.self'] .cbaxis text")
    expect(legend).to_have_text(["hidden", "may attend"])
    note = page.locator("#grid .mask-plot[data-type='encoder.self'] + p")
    expect(note).to_contain_text("This one sentence has no padding")
    shot(page, "masks")


def test_the_model_view_moves_between_thumbnails_by_keys(page: Page):
    page.goto("/?text=猫追狗&view=model&type=encoder.self&layer=1&head=3")
    ready(page)
    current = page.locator(".thumb.current")
    expect(current).to_have_attribute("data-layer", "1")
    expect(current).to_have_attribute("data-head", "3")
    current.focus()
    page.keyboard.press("ArrowRight")
    focused = page.evaluate(
        "[document.activeElement.dataset.layer, document.activeElement.dataset.head]"
    )
    assert focused == ["1", "4"]
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    ready(page)
    state = url_state(page)
    assert (state["view"], state["layer"], state["head"]) == ("head", "2", "4")
    expect(page.locator("#explain")).to_have_text(re.compile("^Arrow keys"))


def test_chinese_reaches_the_model_names_and_plotlys_toolbar(page: Page):
    page.goto("/?text=猫追狗&lang=zh")
    ready(page)
    expect(page.locator("#model option[value=pronounce]")).to_have_text(
        "读音（中文 → 拼音，英文 → ARPAbet）"
    )
    expect(page.locator("#model option[value=minilm-untrained]")).to_have_text(
        "all-MiniLM-L6-v2（未训练的孪生模型）"
    )
    zoom = page.locator("#plot .modebar-btn[data-attr='dragmode'][data-val='zoom']")
    expect(zoom).to_have_attribute("data-title", "缩放")
    page.click("#lang-en")
    ready(page)
    expect(zoom).to_have_attribute("data-title", "Zoom")
    # controls a view does not read are not shown: Masks reads none of them
    page.click("[data-view=masks]")
    ready(page)
    for control in ("#type", "#layer", "#kind", "#overlay", "#average"):
        expect(page.locator(control)).to_be_hidden()


def test_the_page_follows_a_dark_system_theme(browser, server, outside_requests):
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, base_url=server, color_scheme="dark"
    )
    block_outside(context, outside_requests)
    page = context.new_page()
    page.goto("/?text=猫追狗")
    ready(page)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert background == "rgb(22, 23, 26)" and text == "rgb(230, 230, 233)"
    layout = page.evaluate("document.getElementById('plot')._fullLayout")
    assert layout["paper_bgcolor"].replace(" ", "") == "rgba(0,0,0,0)"  # the page shows
    assert layout["font"]["color"] == text
    shot(page, "dark")
    context.close()


def test_the_heatmap_is_the_largest_thing_on_a_projected_page(page: Page):
    page.goto("/?text=猫追狗")
    ready(page)
    plot = page.locator("#plot").bounding_box()
    assert plot["height"] >= 0.6 * 800 and plot["y"] + plot["height"] <= 800 + 2, plot
    # the views and controls are a column beside it, not rows above it
    panel = page.locator("#panel").bounding_box()
    assert panel["x"] + panel["width"] <= plot["x"] and plot["y"] < 260, (panel, plot)
    area = plot["width"] * plot["height"]
    for other in ("#panel", "#input-form", "#output", "#examples"):
        box = page.locator(other).bounding_box()
        assert box["width"] * box["height"] < area / 2, (other, box, plot)
    # and the line saying what its rows are stays on screen under it
    convention = page.locator("#convention").bounding_box()
    assert convention["y"] + convention["height"] <= 800
    shot(page, "projected")


def title_of(plot) -> str:
    """A plot's title as read, its lines (a phone wraps a long one) joined by spaces."""
    title = plot.locator(".gtitle")
    expect(title).to_be_visible()
    return title.get_attribute("data-unformatted").replace("<br>", " ")


# what a person reads in each view, per language: the walk below asserts these
READS = {
    "en": {
        "title": "cross-attention · Layer 2 · Head 1",
        "start": "Opened on the head the model card names",
        "rows": "Rows: the token each decoder step predicts",
        "hover": "step 3: fed yin2, predicts hang2 → 行",
        "model": "Rows: layers; columns: heads",
        "caption": "H1 align",
        "legend": ["hidden", "may attend"],
        "positional": "Table: rows are positions, columns dimensions",
        "scaled": "scaled: q·kᵀ/√d_k · cross-attention · Layer 2 · Head 1",
        "lab": "a decoder's cross-attention rows are named by the token each step predicts",
        "headers": ["type", "Layer", "Head", "entropy"],
    },
    "zh": {
        "title": "交叉注意力 · 层 2 · 头 1",
        "start": "打开的是模型卡所指的头",
        "rows": "行：解码器每一步预测的词元",
        "hover": "第 3 步：输入 yin2，预测 hang2 → 行",
        "model": "行：层；列：头",
        "caption": "H1 对齐",
        "legend": ["屏蔽", "可关注"],
        "positional": "表：行是位置，列是维度",
        "scaled": "缩放：q·kᵀ/√d_k · 交叉注意力 · 层 2 · 头 1",
        "lab": "解码器交叉注意力的行以该步预测的词元命名",
        "headers": ["类型", "层", "头", "熵"],
    },
}


@pytest.fixture(params=[("en", "desktop"), ("zh", "desktop"), ("en", "phone"), ("zh", "phone")])
def walker(browser, server, outside_requests, request):
    lang, size = request.param
    viewport = (
        {"width": 1280, "height": 800} if size == "desktop" else {"width": 390, "height": 844}
    )
    phone = size == "phone"
    context = browser.new_context(
        viewport=viewport, base_url=server, is_mobile=phone, has_touch=phone
    )
    block_outside(context, outside_requests)
    page = context.new_page()
    page.walk = f"{lang}-{size}"
    page.reads = READS[lang]
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"/?text=他在银行工作&lang={lang}")
    yield page
    context.close()
    assert errors == [], errors


def test_a_walk_through_every_view_reads_in_the_pages_language(walker: Page):
    page, reads = walker, walker.reads
    ready(page)
    # the head view opens on the alignment head, says so, and names both tokens of a step
    assert title_of(page.locator("#plot")) == reads["title"]
    expect(page.locator("#convention")).to_contain_text(reads["start"])
    expect(page.locator("#convention")).to_contain_text(reads["rows"])
    assert ticks(page, "y") == ["ta1", "zai4", "yin2", "hang2", "gong1", "zuo4", "<eos>"]
    box = page.locator("#plot .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 3.5 / 6, box["y"] + box["height"] * 3.5 / 7)
    weight = r": (0\.9\d\d|1\.000)$"
    expect(page.locator("#readout")).to_have_text(re.compile(re.escape(reads["hover"]) + weight))
    expect(page.locator("#plot .hovertext")).to_contain_text(reads["hover"])
    shot(page, f"walk-{page.walk}-head")
    page.click("[data-view=model]")
    ready(page)
    expect(page.locator("#explain")).to_contain_text(reads["model"])
    caption = page.locator(".thumb[data-layer='2'][data-head='1'] .thumb-caption")
    expect(caption).to_have_text(reads["caption"])
    # a layer's heads side by side, none past the page's right edge
    last = page.locator(".thumb[data-layer='0'][data-head='7']").bounding_box()
    assert last["x"] + last["width"] <= page.viewport_size["width"], last
    # the entropy plot's title wraps where it is wider than the screen, never clipped
    title = page.locator("#extra .gtitle").bounding_box()
    assert title["x"] + title["width"] <= page.viewport_size["width"], title
    shot(page, f"walk-{page.walk}-model")
    page.click("[data-view=masks]")
    ready(page)
    legend = page.locator("#grid .mask-plot[data-type='encoder.self'] .cbaxis text")
    expect(legend).to_have_text(reads["legend"])
    shot(page, f"walk-{page.walk}-masks")
    page.click("[data-view=positional]")
    ready(page)
    expect(page.locator("#explain")).to_contain_text(reads["positional"])
    shot(page, f"walk-{page.walk}-positional")
    # the lab labels cross-attention rows as the head view does
    page.click("[data-view=lab]")
    ready(page)
    scaled = page.locator("#lab-out .plot").first
    assert title_of(scaled) == reads["scaled"]
    rows = scaled.locator(".ytick text").all_text_contents()
    assert rows == ["ta1", "zai4", "yin2", "hang2", "gong1", "zuo4", "<eos>"], rows
    expect(page.locator("#explain")).to_contain_text(reads["lab"])
    shot(page, f"walk-{page.walk}-lab-scaling")
    page.select_option("#lab-experiment", "metrics")
    ready(page)
    headers = page.locator("#lab-metrics-table th").all_text_contents()
    assert headers[:4] == reads["headers"], headers
    shot(page, f"walk-{page.walk}-lab-metrics")


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog because it was tired.",
        "银行行长在行人道上行走，他说这一行的工作很辛苦，但是他很喜欢自己的工作，每天都很开心。",
    ],
    ids=["english", "chinese"],
)
def test_a_long_sentences_rows_predict_the_output_line_piece_by_piece(page: Page, text):
    """pronounce decodes a text over 40 characters in pieces: every row of the alignment
    head predicts the output line's token at that step, each piece ending in <eos>."""
    page.goto(f"/?text={text}&type=decoder.cross&layer=2&head=1")
    ready(page)
    output = page.locator("#output-text").text_content() or ""
    said = [piece.split() for piece in output.split("‖")]
    assert len(said) == 2
    steps = [token for piece in said for token in [*piece, "<eos>"]]
    names = page.evaluate("document.getElementById('plot').attnvizLabels.rowNames")
    predicted = [re.fullmatch(r"step \d+: fed \S+, predicts (\S+)", n)[1] for n in names]
    assert predicted == steps
    assert [n.split(", ")[0] for n in names].count(f"step {len(said[0]) + 1}: fed <bos>") == 1
    expect(page.locator("#pieces")).to_have_text(re.compile(r"^Decoded in 2 pieces: .*40 char"))
    expect(page.locator("#truncated")).to_be_hidden()
    expect(page.locator("#stopped")).to_be_hidden()
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#pieces")).to_have_text(re.compile(r"^分 2 段解码"))


def test_an_output_stopped_at_its_limit_says_so_not_that_the_input_was_cut(page: Page):
    page.goto("/?model=pronounce-untrained&text=" + "a" * 60)
    ready(page)
    expect(page.locator("#truncated")).to_be_hidden()
    expect(page.locator("#stopped")).to_have_text(
        "The output stopped at its length limit before the model ended it (no <eos>): piece 1 "
        "at 130 tokens, piece 2 at 70 tokens. What it would say next is not shown; the whole "
        "input was read."
    )
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#stopped")).to_contain_text(
        "第 1 段停在第 130 个词元，第 2 段停在第 70 个词元"
    )


def test_the_first_load_opens_drawn_on_the_first_example_in_the_box(page: Page):
    page.goto("/")
    ready(page)
    first = page.locator("#examples button").first.text_content()
    assert page.input_value("#text") == first == url_state(page)["text"]
    assert ticks(page, "x")  # drawn: no "Type a sentence first."
    expect(page.locator("#output-text")).not_to_be_empty()


def test_an_example_goes_into_the_box_and_is_run(page: Page):
    page.goto("/?model=minilm&text=hello")
    ready(page)
    example = page.locator("#examples button").nth(1)
    example.click()
    ready(page)
    shown = example.text_content()
    assert page.input_value("#text") == shown == url_state(page)["text"]


def test_the_figure_buttons_speak_the_pages_language(page: Page):
    page.goto("/?text=猫追狗&lang=zh")
    ready(page)
    buttons = page.locator("#plot .modebar-btn[data-title^='下载图为']")
    assert sorted(b.get_attribute("data-title") for b in buttons.all()) == [
        "下载图为 PDF（含坐标轴标题）",
        "下载图为 SVG（含坐标轴标题）",
    ]
