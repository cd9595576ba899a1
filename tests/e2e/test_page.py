"""The page in headless Chromium: type, look at heads, switch views, share links."""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qs, urlparse

import numpy as np
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS

READY = re.compile(r"^(Ready\.|完成。)$")


def ready(page: Page) -> None:
    expect(page.locator("#status")).to_have_text(READY, timeout=60_000)


def ticks(page: Page, axis: str, plot: str = "#plot") -> list[str]:
    return page.locator(f"{plot} .{axis}tick text").all_text_contents()


def url_state(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def run(page: Page, text: str) -> None:
    page.goto("/")
    page.fill("#text", text)
    page.press("#text", "Enter")
    ready(page)


def test_a_chinese_sentence_gives_a_heatmap_with_token_ticks(page: Page):
    run(page, "猫追狗")
    expect(page.locator("#output-text")).to_have_text("mao1 zhui1 gou3")
    assert ticks(page, "x") == ["猫", "追", "狗"]  # cross-attention: keys are the source
    # cross-attention rows: the syllable each decoder step predicts
    assert ticks(page, "y") == ["mao1", "zhui1", "gou3", "<eos>"]
    assert url_state(page)["text"] == "猫追狗"
    page.locator("#plot .nsewdrag").hover()  # the middle cell
    step = r"step \d: fed \S+, predicts \S+"
    expect(page.locator("#readout")).to_have_text(
        re.compile(rf"^{step} → [猫追狗]: [01]\.\d{{3}}$")
    )
    expect(page.locator("#plot .hovertext")).to_contain_text("→")


def test_an_english_sentence_keeps_repeated_tokens_apart(page: Page):
    run(page, "the cat sat")
    # three 't's, three separate columns; a space shown as ␣ (an empty label reads as nothing)
    assert ticks(page, "x") == list("the␣cat␣sat")
    assert "| K AE1 T |" in page.locator("#output-text").text_content()


def test_type_layer_and_head_switch_by_controls_and_keys(page: Page):
    run(page, "银行行走")
    page.select_option("#type", "encoder.self")
    ready(page)
    assert ticks(page, "y") == list("银行行走")
    page.select_option("#layer", "1")
    ready(page)
    page.locator("#view").focus()
    page.keyboard.press("ArrowRight")
    ready(page)
    page.keyboard.press("ArrowDown")
    ready(page)
    state = url_state(page)  # from the start head (layer 2, head 1): head 2, layer 2
    assert (state["type"], state["layer"], state["head"]) == ("encoder.self", "2", "2")
    expect(page.locator("#plot .gtitle")).to_have_text("encoder self-attention · Layer 2 · Head 2")
    page.go_back()
    ready(page)
    assert url_state(page)["layer"] == "1" and page.locator("#layer").input_value() == "1"


def test_scores_mask_overlay_and_average(page: Page):
    page.goto("/?text=猫追狗&type=decoder.self&kind=scores")
    ready(page)
    page.check("#overlay")
    ready(page)
    assert page.evaluate("document.getElementById('plot').data.length") == 2  # + mask overlay
    page.check("#average")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_contain_text("average of heads")
    page.go_back()  # back to one head: the URL has no avg, the page shows one head again
    ready(page)
    assert not page.locator("#average").is_checked()
    expect(page.locator("#plot .gtitle")).to_contain_text("Head 0")


def test_unknown_url_values_fall_back_to_the_defaults(page: Page):
    page.goto("/?text=猫追狗&view=constructor&kind=q")
    ready(page)
    assert url_state(page)["view"] == "head" and url_state(page)["kind"] == "weights"
    assert ticks(page, "x") == ["猫", "追", "狗"]


def test_model_view_opens_a_head(page: Page):
    page.goto("/?text=猫追狗&view=model")
    ready(page)
    thumbs = page.locator("#grid .thumb")
    expect(thumbs).to_have_count(3 * 8)
    thumbs.nth(8 + 3).click()  # layer 1, head 3
    ready(page)
    state = url_state(page)
    assert (state["view"], state["layer"], state["head"]) == ("head", "1", "3")
    assert page.locator("#extra").count() == 1


def test_masks_and_positional_views_render(page: Page):
    page.goto("/?text=猫追狗&view=masks")
    ready(page)
    expect(page.locator("#grid .mask-plot .main-svg").first).to_be_visible()
    expect(page.locator("#grid .mask-plot")).to_have_count(4)  # causal, then each type's
    for line in ("Padding mask", "Causal mask", "Combined", "Cross-attention mask"):
        expect(page.locator("#grid")).to_contain_text(line)
    page.click("[data-view=positional]")
    ready(page)
    assert ticks(page, "y")[:3] == ["0", "1", "2"]
    expect(page.locator("#explain")).to_contain_text("sin(pos")


def test_a_shared_url_brings_back_the_same_view(page: Page):
    page.goto("/?model=pronounce&text=狗追猫&type=decoder.cross&layer=2&head=5&view=head&lang=zh")
    ready(page)
    assert page.locator("#layer").input_value() == "2"
    assert page.locator("#head").input_value() == "5"
    expect(page.locator("#run")).to_have_text("运行")
    expect(page.locator("#plot .gtitle")).to_have_text("交叉注意力 · 层 2 · 头 5")
    page.reload()
    ready(page)
    expect(page.locator("#plot .gtitle")).to_have_text("交叉注意力 · 层 2 · 头 5")


def test_the_language_switch_is_remembered(page: Page):
    run(page, "猫")
    page.click("#lang-zh")
    expect(page.locator("#run")).to_have_text("运行")
    expect(page.locator("[data-view=masks]")).to_have_text("掩码")
    page.goto("/")
    expect(page.locator("#run")).to_have_text("运行")
    page.click("#lang-en")
    expect(page.locator("#run")).to_have_text("Run")


def test_markup_in_the_text_stays_text(page: Page):
    hostile = '<img src=x onerror=alert(1)><b>x</b><a href="javascript:alert(1)">x</a>'
    run(page, hostile)
    assert page.dialogs == []
    assert page.locator("img").count() == 0
    assert page.locator("#plot b, #plot a[href]").count() == 0
    tokens = list(hostile.lower().replace(" ", "␣"))  # a space token shown as ␣
    stride = -(-len(tokens) // 64)  # past 64 tokens every k-th one is labelled
    assert ticks(page, "x") == tokens[::stride]
    expect(page.locator("#source-tokens")).to_have_text(" · ".join(tokens))


def test_an_overlong_text_shows_the_error_in_place(page: Page):
    limit = page.request.get("/api/v1/models").json()[0]["max_text_chars"]
    page.goto("/")
    page.fill("#text", "长" * (limit + 1))  # the box holds as many as the server reads
    assert len(page.input_value("#text")) == limit
    page.goto("/?text=" + "长" * (limit + 1))  # a link holds more
    status = page.locator("#status")
    expect(status).to_have_class(re.compile("error"))
    expect(status).to_contain_text(f"The input cannot be used: text has {limit + 1} characters")
    page.click("#lang-zh")
    expect(status).to_contain_text("输入无法使用")


HOOKS = {"encoder.self": "encoder.{}.self_attn", "decoder.self": "decoder.{}.self_attn"}
HOOKS["decoder.cross"] = "decoder.{}.cross_attn"


def test_the_capture_downloads_as_npz(page: Page):
    """The downloaded file is the capture: opened with numpy, its attention weights and
    tokens are the API's for the same text."""
    run(page, "猫追狗")
    with page.expect_download() as download:
        page.click("#export")
    assert re.fullmatch(r"pronounce-[0-9a-f]{12}\.npz", download.value.suggested_filename)
    with np.load(download.value.path()) as npz:
        arrays = dict(npz)
    answer = page.request.post(
        "/api/v1/attention",
        data={
            "model": "pronounce",
            "text": "猫追狗",
            "kinds": ["weights"],
            "encoding": "f4",
        },
    ).json()
    assert arrays["source_tokens"].tolist() == answer["source_tokens"] == ["猫", "追", "狗"]
    assert arrays["target_tokens"].tolist() == answer["target_tokens"]
    assert answer["target_tokens"] == ["<bos>", "mao1", "zhui1", "gou3"]
    assert len(answer["blocks"]) == 3 + 3 + 3  # every layer of each type
    for block in answer["blocks"]:
        name = f"{HOOKS[block['type']].format(block['layer'])}.hook_weights"
        data = block["data"]
        api = np.frombuffer(base64.b64decode(data["bdata"]), "<f4").reshape(block["shape"])
        saved = arrays[name]
        assert saved.dtype == np.float32 and saved.shape == (1, *block["shape"]), name
        np.testing.assert_allclose(saved[0], api, rtol=0, atol=1e-6, err_msg=name)


def test_a_phone_screen_needs_no_sideways_scrolling(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=server)
    page = context.new_page()
    page.goto("/?text=苹果公司发布了新款手机&view=model")
    ready(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=ARTIFACTS / "phone_model_view.png", full_page=True)
    context.close()


def test_minilm_shows_wordpieces_and_its_embedding(page: Page):
    page.goto("/?model=minilm&text=The animal didn't cross the street")
    ready(page)
    assert ticks(page, "x")[:3] == ["[CLS]", "the", "animal"]
    expect(page.locator("#output-text")).to_contain_text("sentence embedding (384)")
    assert page.locator("#type").input_value() == "encoder.self"


def test_minilm_word_view_and_hidden_specials(page: Page):
    page.goto("/?model=minilm&text=Tokenization helps.&type=encoder.self")
    ready(page)
    assert ticks(page, "x") == ["[CLS]", "token", "##ization", "helps", ".", "[SEP]"]
    page.check("#words")
    ready(page)
    assert ticks(page, "x") == ["[CLS]", "tokenization", "helps", ".", "[SEP]"]
    # the label names the tokens it hides: the ones this model's tokenizer adds
    expect(page.locator("label:has(#hide)")).to_have_text("hide [CLS]/[SEP]")
    page.check("#hide")
    ready(page)
    assert ticks(page, "x") == ["tokenization", "helps", "."]
    assert url_state(page)["words"] == "1" and url_state(page)["hide"] == "1"
    page.goto("/?text=猫追狗")
    ready(page)
    expect(page.locator("#words")).to_be_hidden()


def test_minilm_compares_a_second_sentence(page: Page):
    page.goto("/?model=minilm")
    page.fill("#text", "A man is playing a guitar.")
    page.fill("#compare", "Someone plays the guitar.")
    page.press("#text", "Enter")
    ready(page)
    expect(page.locator("#output-text")).to_contain_text(
        "cosine similarity to the second sentence: 0."
    )
    assert url_state(page)["compare"] == "Someone plays the guitar."
    page.goto("/?text=猫追狗")
    ready(page)
    expect(page.locator("#compare")).to_be_hidden()


def test_a_512_token_input_labels_every_kth_token_and_the_readout_names_each(page: Page):
    words = ("the quick brown fox jumps over the lazy dog while heads look back " * 50).split()
    page.goto("/?model=minilm&view=head&text=" + " ".join(words[:600]))
    ready(page)
    expect(page.locator("#truncated")).to_be_visible()  # 600 words: cut at 512 tokens
    x = ticks(page, "x")
    assert 32 < len(x) <= 64 and x[0] == "[CLS]"  # every 8th of 512 tokens
    assert x[1] == words[7]  # the 8th token after [CLS] is the 8th word
    assert page.evaluate("document.getElementById('plot').data[0].z.length") == 512
    page.locator("#plot .nsewdrag").hover(position={"x": 1, "y": 1})  # [CLS] -> [CLS]
    named = re.compile(r"^\[CLS\] → \[CLS\]: [01]\.\d{3}$")
    expect(page.locator("#readout")).to_have_text(named)
    # the tooltip itself names the tokens too (the page's own: 512 x 512 cells are too
    # many for a plotly.js label each), beside the pointer
    tip = page.locator("#plot .cell-tip")
    expect(tip).to_have_text(named)
    expect(tip).to_be_visible()
    box = page.locator("#plot .nsewdrag").bounding_box()
    # (at whole pixels: the pointer lands on one, and a column is 1.6 px wide)
    page.mouse.move(round(box["x"] + box["width"] * 8.5 / 512), box["y"] + 1)
    expect(tip).to_have_text(re.compile(rf"^\[CLS\] → {words[7]}: [01]\.\d{{3}}$"))
    page.mouse.move(5, 5)  # off the plot: the tip goes
    expect(tip).to_be_hidden()
    page.goto("/?model=minilm&view=model&text=" + " ".join(words[:600]))
    ready(page)
    assert page.locator("#grid canvas").count() == 6 * 12


def test_the_value_weighted_toggle_draws_the_apis_norms_and_says_what_they_are(page: Page):
    text = "The cat sat on the mat."
    page.goto(f"/?model=minilm&text={text}&type=encoder.self&layer=2&head=0&lang=en")
    ready(page)
    page.select_option("#kind", "norms")
    ready(page)
    assert url_state(page)["kind"] == "norms"
    expect(page.locator("#explain")).to_contain_text(
        "Value-weighted (Kobayashi et al. 2020): each cell is ‖α f(x)‖, the size of what the "
        "key adds to the query through this head"
    )
    page.locator("#plot .nsewdrag").hover(position={"x": 1, "y": 1})  # [CLS] -> [CLS]
    expect(page.locator("#plot .hovertext")).to_contain_text("norm")
    drawn = page.evaluate("document.getElementById('plot').data[0].z")
    body = {"model": "minilm", "text": text, "layers": [2], "heads": [0], "kinds": ["norms"],
            "encoding": "json"}  # fmt: skip
    served = page.request.post("/api/v1/attention", data=body).json()["blocks"][0]["data"][0]
    assert len(drawn) == len(served) and max(max(row) for row in served) > 0
    for shown, exact in zip(drawn, served, strict=True):  # (the page asks f2: 3 digits)
        assert all(abs(a - b) <= 2e-3 * max(1.0, abs(b)) for a, b in zip(shown, exact, strict=True))
    page.click("#lang-zh")
    expect(page.locator("#explain")).to_contain_text("按值加权（Kobayashi 等，2020）")
    expect(page.locator("#kind option[value=norms]")).to_have_text("按值加权")


def test_the_model_views_thumbnails_draw_value_weighted_norms(page: Page):
    text = "The cat sat on the mat."
    page.goto(f"/?model=minilm&view=model&text={text}&kind=norms&lang=en")
    ready(page)
    expect(page.locator("#explain")).to_contain_text(
        "Value-weighted norms ‖α f(x)‖: what each key adds, each layer's thumbnails on its own "
        "scale (its largest brightest)."
    )
    expect(page.locator("#kind")).to_have_value("norms")
    # the model view draws weights or norms: the other choices are not offered there
    assert page.locator("#kind option[value=scores]").is_hidden()
    expect(page.locator("#grid canvas")).to_have_count(6 * 12)
    first = "document.querySelector('#grid canvas').toDataURL()"
    drawn = page.evaluate(first)
    page.select_option("#kind", "weights")
    ready(page)
    expect(page.locator("#explain")).not_to_contain_text("Value-weighted")
    assert page.evaluate(first) != drawn
