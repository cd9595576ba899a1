"""A model family registered as a plugin (tests/toy_family.py) shows in the page's model
list and head view with no change to the page: the page reads what the model states."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from harness.serving import start_server

from .conftest import ARTIFACTS, page_of

READY = re.compile(r"^Ready\.$")


@pytest.fixture(scope="module")
def toy_server():
    env = {
        "ATTNVIZ_LOG_LEVEL": "warning",
        "ATTNVIZ_PLUGINS": json.dumps(["tests.toy_family"]),
        "ATTNVIZ_ZOO": json.dumps(["toy", "pronounce"]),
    }
    proc, base = start_server(env)
    yield base
    proc.terminate()
    proc.wait(timeout=20)


def test_the_toy_family_gets_a_head_view(browser, toy_server, outside_requests):
    context, page, errors = page_of(browser, toy_server, outside_requests)
    page.goto("/?lang=en")
    options = page.locator("#model option").all_text_contents()
    assert options[:2] == ["Toy decoder-only", "Toy decoder-only, untrained twin"]
    page.select_option("#model", "toy")
    page.fill("#text", "hello")
    page.press("#text", "Enter")
    expect(page.locator("#status")).to_have_text(READY, timeout=60_000)
    # its only attention type, layer and heads, as the model states them
    assert page.locator("#type option").all_text_contents() == ["decoder self-attention"]
    assert page.locator("#layer option").all_text_contents() == ["0"]
    assert page.locator("#head option").all_text_contents() == ["0", "1", "2", "3"]
    expect(page.locator("#plot .gtitle")).to_have_text("decoder self-attention · Layer 0 · Head 0")
    fed = page.locator("#plot .ytick text").all_text_contents()
    assert fed[:6] == ["<bos>", "h", "e", "l", "l", "o"] and len(fed) == 10  # 4 generated
    assert page.locator("#plot .xtick text").all_text_contents() == fed
    page.locator("#view").focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#plot .gtitle")).to_have_text("decoder self-attention · Layer 0 · Head 1")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "toy_family_head_view.png", full_page=True)
    assert errors == []
    context.close()
