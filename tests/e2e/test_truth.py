"""What a new user reads is true: decoder rows named by what their step predicts, each
model opened on its most telling head with a line saying what it shows, the model's own
examples, the lab's headlines. Screenshots land in out/e2e/ (the page fixture)."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

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
