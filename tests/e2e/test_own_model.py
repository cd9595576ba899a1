"""A model of yours in the page: a tiny random Llama made with transformers, served with
`attnviz serve --model mine=PATH`, picked beside the shipped models; the page says which
head it opens on and why, draws it, and generates with it."""

from __future__ import annotations

import re

import httpx2
import pytest
from playwright.sync_api import Page, expect

from harness.architectures import save_masked_roberta
from harness.checkpoints import saved, saved_masked_lm, tiny
from harness.serving import start_server

from .conftest import page_of
from .test_page import ready, ticks


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    folder = saved(root / "llama", tiny("llama"))
    saved_masked_lm(root / "mlm")
    save_masked_roberta(root / "roberta")  # transformers' RobertaForMaskedLM: <mask>
    broken = saved(root / "broken", tiny("llama"))
    (broken / "tokenizer.json").unlink()
    proc, base = start_server(
        {"ATTNVIZ_ZOO": '["pronounce"]', "ATTNVIZ_LOG_LEVEL": "warning"},
        args=["--model", f"mine={folder}", "--model", f"mlm={root / 'mlm'}",
              "--model", f"broken={broken}", "--model", f"roberta={root / 'roberta'}",
              "--model", f"half={folder},dtype=bfloat16"],
    )  # fmt: skip
    yield base
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def own_page(browser, own_server, outside_requests):
    context, page, errors = page_of(browser, own_server, outside_requests)
    yield page
    assert errors == [], errors
    context.close()


def test_a_model_that_cannot_be_served_is_listed_not_selectable_with_why(own_page: Page):
    page = own_page
    page.goto("/?model=broken&text=The quick brown fox")
    # the status line says why, once the default model is drawn (instead of "Ready.")
    reason = "<its folder> has no tokenizer.json: its text cannot be read"
    expect(page.locator("#status")).to_have_text(
        f"The model broken is not served: {reason}", timeout=60_000
    )
    option = page.locator("#model option[value=broken]")
    expect(option).to_have_text("broken (not served)")
    expect(option).to_be_disabled()
    expect(option).to_have_attribute("title", reason)  # the reason on hover
    expect(page.locator("#model")).to_have_value("pronounce")  # opened the default instead
    expect(page.locator("#plot")).to_contain_text("Layer")  # and drew it


def test_your_model_is_picked_drawn_and_generates(own_page: Page):
    page = own_page
    page.goto("/?text=The quick brown fox")
    ready(page)
    option = page.locator("#model option[value=mine]")
    expect(option).to_have_text("mine (llama, yours)")
    page.select_option("#model", "mine")
    ready(page)
    expect(page.locator("#convention")).to_contain_text(
        "Opened on its first head: this model of yours had not been read"
    )
    expect(page.locator("#run")).to_have_text("Generate")
    page.fill("#new-tokens", "3")
    page.click("#run")
    ready(page)
    expect(page.locator("#source-tokens button.generated")).to_have_count(3)
    assert ticks(page, "y")[:2] == ["The", "␣qu"]  # its own tokenizer's pieces, read as text
    assert re.search(
        r"decoder self-attention · Layer 0 · Head 0", page.locator("#plot").inner_text()
    )


def test_a_masked_lm_of_yours_shows_its_top_5_at_each_mask(own_page: Page, own_server):
    page = own_page
    text = "The quick [MASK] fox jumps over the [MASK] dog."
    page.goto(f"/?model=mlm&text={text}")
    ready(page)
    expected = httpx2.post(f"{own_server}/api/v1/analyze", json={"model": "mlm", "text": text})
    body = expected.json()
    lines = page.locator("#output-text .masked")
    expect(lines).to_have_count(2)
    for i, masked in enumerate(body["masked"]):
        first = masked["top"][0]
        said = lines.nth(i).inner_text()
        assert said.startswith(f"[MASK] {i + 1}: {first['token']} "), said
        assert said.count(" · ") == 4 and said.endswith("%")
        assert f"{100 * first['probability']:.2f}%" in said  # a random model: under 10%
    expect(page.locator("#output-text")).to_contain_text(f"filled in: {body['output_text']}")
    # without a [MASK] the page says what to write
    page.fill("#text", "no mask here")
    page.click("#run")
    ready(page)
    expect(page.locator("#output-text")).to_contain_text("write [MASK] where a word is missing")
    page.click("[data-lang=zh]")
    expect(page.locator("#output-text")).to_contain_text("在缺词处写 [MASK]")


def test_robertas_mask_token_is_the_one_the_page_asks_for(own_page: Page, own_server):
    """A RobertaForMaskedLM on transformers' code writes <mask>, not [MASK]: the page's
    examples, hint and prediction lines name the model's own token."""
    page = own_page
    text = "The quick <mask> fox jumps"
    page.goto(f"/?model=roberta&text={text}")
    ready(page)
    body = httpx2.post(
        f"{own_server}/api/v1/analyze", json={"model": "roberta", "text": text}
    ).json()
    line = page.locator("#output-text .masked")
    expect(line).to_have_count(1)
    assert line.inner_text().startswith(f"<mask> 1: {body['masked'][0]['top'][0]['token']} ")
    page.fill("#text", "no mask here")
    page.click("#run")
    ready(page)
    expect(page.locator("#output-text")).to_contain_text("write <mask> where a word is missing")


def test_the_picker_says_the_precision_a_model_runs_in(own_page: Page):
    """A model asked for in bfloat16 (`--model half=PATH,dtype=bfloat16`) is named in the
    picker with its dtype, in either language; a float32 one on the CPU by its name alone."""
    page = own_page
    for lang in ("en", "zh"):
        page.goto(f"/?lang={lang}&model=half&text=The quick brown fox")
        ready(page)
        expect(page.locator("#model option[value=half]")).to_have_text(
            "half (llama, yours) · bfloat16"
        )
        expect(page.locator("#model option[value=mine]")).to_have_text("mine (llama, yours)")
        expect(page.locator("#plot")).to_contain_text("Layer" if lang == "en" else "层")
