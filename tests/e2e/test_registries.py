"""The page's registries: a view added through the views registry gets its tab, and the
table of wire encodings asks the server only for what it accepts."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from playwright.sync_api import Page, Route, expect

from .test_page import ready, url_state

REGISTRY = "**/static/js/views/index.js"
TOY_TAB = "nav.views [role=tab][data-view=toy]"
LAST_VIEW = '  "./lab/index.js",\n'
TOY_VIEW = """
// a view as a new contributor would write one: its id, its label, its strings in both
// languages, the URL key it keeps (cleared when the input changes), what it draws
export const view = {
  id: "toy",
  label: "view_toy",
  controls: [],
  state: { toy: "" },
  clearedOn: { toy: "input" },
  strings: {
    en: { view_toy: "Toy view", toy_pick: "Pick" },
    zh: { view_toy: "玩具视图", toy_pick: "选" },
  },
  draw: async (ctx) => {
    const out = document.createElement("p");
    out.id = "toy-out";
    const picked = ctx.state.toy ? ` [${ctx.state.toy}]` : "";
    out.textContent = `toy: ${ctx.analysis.source_tokens.join(" ")} (${ctx.state.model})${picked}`;
    const pick = document.createElement("button");
    pick.id = "toy-pick";
    pick.textContent = ctx.t("toy_pick");
    pick.addEventListener("click", () => ctx.update({ toy: "picked" }));
    ctx.elements.grid.hidden = false;
    ctx.elements.grid.append(out, pick);
  },
};
"""


def add_toy_view(page: Page) -> None:
    """Serve views/toy.js, and the real registry with one line more: the toy's."""

    def registry(route: Route) -> None:
        response = route.fetch()
        real = response.text()
        assert real.count(LAST_VIEW) == 1, "the registry's list no longer ends with the lab"
        body = real.replace(LAST_VIEW, LAST_VIEW + '  "./toy.js",\n')
        route.fulfill(response=response, body=body)

    page.context.route(REGISTRY, registry)
    page.context.route(
        "**/static/js/views/toy.js",
        lambda route: route.fulfill(body=TOY_VIEW, content_type="text/javascript"),
    )


def test_a_view_added_through_the_registry_gets_its_tab(page: Page):
    add_toy_view(page)
    page.goto("/?text=猫追狗")
    ready(page)
    tabs = page.locator("nav.views [role=tab]:visible")  # (the generation step: LLMs only)
    expect(tabs).to_have_text(
        ["Head view", "Model view", "Masks", "Positional encoding", "Lab", "Toy view",
         "Neuron view", "Query–key space", "Lines", "Corpus"]
    )  # fmt: skip
    page.click(TOY_TAB)
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 猫 追 狗 (pronounce)")
    expect(page.locator(TOY_TAB)).to_have_attribute("aria-selected", "true")
    assert url_state(page)["view"] == "toy"
    page.click("#lang-zh")
    expect(page.locator(TOY_TAB)).to_have_text("玩具视图")
    page.reload()  # the link brings the toy view back
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 猫 追 狗 (pronounce)")
    page.go_back()  # to the head view it came from
    ready(page)
    assert url_state(page)["view"] == "head"
    expect(page.locator("#toy-out")).to_have_count(0)
    expect(page.locator("#plot .gtitle")).to_contain_text(re.compile(r"Head 1|头 1"))


def test_a_view_keeps_its_own_url_state_and_strings(page: Page):
    """The toy's URL key is its module's: kept by a link, cleared with the input."""
    add_toy_view(page)
    page.goto("/?text=猫追狗&view=toy&lang=zh")
    ready(page)
    expect(page.locator("#toy-pick")).to_have_text("选")
    page.click("#toy-pick")
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 猫 追 狗 (pronounce) [picked]")
    assert url_state(page)["toy"] == "picked"
    page.reload()
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 猫 追 狗 (pronounce) [picked]")
    page.click("#lang-en")
    expect(page.locator("#toy-pick")).to_have_text("Pick")
    page.fill("#text", "狗追猫")
    page.click("#run")
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 狗 追 猫 (pronounce)")
    assert "toy" not in url_state(page)
    page.go_back()  # the link of the old input brings its choice back
    ready(page)
    expect(page.locator("#toy-out")).to_have_text("toy: 猫 追 狗 (pronounce) [picked]")


def test_without_the_registry_line_the_view_is_unknown(page: Page):
    page.goto("/?text=猫追狗&view=toy")
    ready(page)
    assert url_state(page)["view"] == "head"
    expect(page.locator(TOY_TAB)).to_have_count(0)


def server_kinds(page: Page) -> list[str]:
    schemas = page.request.get("/openapi.json").json()["components"]["schemas"]
    kinds = schemas["AttentionRequest"]["properties"]["kinds"]
    items = kinds.get("items") or next(k["items"] for k in kinds["anyOf"] if "items" in k)
    return items["enum"]


@pytest.mark.parametrize("model", ["pronounce", "minilm"])
def test_every_kind_is_asked_in_an_encoding_the_server_accepts(page: Page, model: str):
    page.goto("/")
    table = page.evaluate("async () => (await import('/static/js/encodings.js')).ENCODINGS")
    assert sorted(table) == sorted(server_kinds(page))  # every kind the server serves
    info = next(m for m in page.request.get("/api/v1/models").json() if m["id"] == model)
    for kind, encoding in table.items():
        response = page.request.post(
            "/api/v1/attention",
            data={
                "model": model,
                "text": "猫追狗 the cat",
                "types": info["attention_types"],
                "layers": [0],
                "kinds": [kind],
                "encoding": encoding,
            },
        )
        assert response.status == 200, (model, kind, encoding, response.text())
        answer = response.json()
        assert "items" not in answer
        blocks = answer["blocks"]
        assert [b["type"] for b in blocks] == info["attention_types"]
        for block in blocks:
            assert (block["kind"], block["data"]["dtype"]) == (kind, encoding)
            shape = [int(n) for n in block["data"]["shape"].split(",")]
            values = np.frombuffer(
                base64.b64decode(block["data"]["bdata"]), dtype=f"<{encoding}"
            ).reshape(shape)
            assert shape == block["shape"] and np.isfinite(values).all()
            assert values.any()  # not an empty or all-zero answer


def test_the_page_asks_each_kind_in_the_tables_encoding(page: Page):
    """What the page sends, not only what the table says: every attention request the
    page makes while showing weights, raw scores and the mask uses the table's encoding."""
    page.goto("/")
    table = page.evaluate("async () => (await import('/static/js/encodings.js')).ENCODINGS")
    sent = []
    page.on(
        "request",
        lambda r: sent.append(r.post_data_json) if r.url.endswith("/api/v1/attention") else None,
    )
    page.goto("/?text=猫追狗&type=decoder.self")
    ready(page)
    for kind in ("scores", "mask", "weights"):
        page.select_option("#kind", kind)
        ready(page)
    page.check("#overlay")  # the mask, fetched beside the weights
    ready(page)
    asked = {(body["kinds"][0], body["encoding"]) for body in sent}
    assert {kind for kind, _ in asked} == {"weights", "scores", "mask"}
    assert asked == {(kind, table[kind]) for kind, _ in asked}
    assert all("legacy_items" not in body for body in sent)  # a removed field: a 422
