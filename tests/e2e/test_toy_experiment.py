"""A lab experiment added as a contributor would add one: on the server its module and one
register line (tests/toy_experiment.py, a plugin of the server this test starts; never
imported here, so this process's lab stays the shipped one), on the page its module
(TOY_MODULE) and one line in static/js/views/lab/index.js. The picker lists it, it draws
from its route, its strings follow the language and its URL key survives a reload."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, Route, expect

from harness.serving import start_server

from .conftest import page_of
from .test_page import ready

# the page's half, served in place of static/js/views/lab/toy.js by the e2e test
TOY_MODULE = """
// a lab experiment as a new contributor would write one: its id, label and explanation
// (strings in both languages), the URL key it keeps, what it draws
import { ask, summary } from "./shared.js";

async function draw({ ctx, t, out, head }) {
  const r = await ask(ctx, "toy-strongest", head);
  if (ctx.stale()) return;
  const pairs = r.rows.map((row, i) => `${row}→${r.strongest[i]}`);
  summary(out, t("toy_said").replace("{pairs}", pairs.join(" ")));
  const mark = document.createElement("button");
  mark.id = "toy-mark";
  mark.textContent = ctx.state.toymark ? `${t("toy_marked")}: ${ctx.state.toymark}` : t("toy_mark");
  mark.addEventListener("click", () => ctx.update({ toymark: r.strongest[0] }));
  out.append(mark);
}

export const experiment = {
  id: "toy-strongest",
  label: "lab_toy",
  explain: "lab_toy_explain",
  state: { toymark: "" },
  draw,
  strings: {
    en: { lab_toy: "Strongest keys", lab_toy_explain: "Each query's strongest key.",
          toy_said: "Strongest: {pairs}", toy_mark: "Mark", toy_marked: "Marked" },
    zh: { lab_toy: "最强的键", lab_toy_explain: "每个查询最强的键。",
          toy_said: "最强：{pairs}", toy_mark: "标记", toy_marked: "已标记" },
  },
};
"""

REGISTRY = "**/static/js/views/lab/index.js"
LAST = '  "./needle.js",\n'


@pytest.fixture(scope="module")
def toy_server():
    env = {
        "ATTNVIZ_LOG_LEVEL": "warning",
        "ATTNVIZ_PLUGINS": json.dumps(["tests.toy_experiment"]),
        "ATTNVIZ_ZOO": json.dumps(["pronounce"]),
    }
    proc, base = start_server(env)
    yield base
    proc.terminate()
    proc.wait(timeout=20)


def add_toy_experiment(page: Page) -> None:
    """Serve lab/toy.js, and the real registry with one line more: the toy's."""

    def registry(route: Route) -> None:
        response = route.fetch()
        real = response.text()
        assert real.count(LAST) == 1, "the lab's list no longer ends with the needle"
        route.fulfill(response=response, body=real.replace(LAST, LAST + '  "./toy.js",\n'))

    page.context.route(REGISTRY, registry)
    page.context.route(
        "**/static/js/views/lab/toy.js",
        lambda route: route.fulfill(body=TOY_MODULE, content_type="text/javascript"),
    )


def test_a_toy_experiment_is_listed_drawn_and_linked(browser, toy_server, outside_requests):
    context, page, errors = page_of(browser, toy_server, outside_requests)
    add_toy_experiment(page)
    # the server lists it for the model, the API serves it
    info = page.request.get("/api/v1/models").json()[0]
    assert "toy-strongest" in info["capabilities"]["experiments"]
    head = {"type": "decoder.cross", "layer": 2, "head": 1}
    asked = {"model": "pronounce", "text": "猫追狗", **head}
    answer = page.request.post("/api/v1/lab/toy-strongest", data=asked).json()
    assert answer["type"] == "decoder.cross" and len(answer["strongest"]) == len(answer["rows"])
    pairs = " ".join(f"{r}→{k}" for r, k in zip(answer["rows"], answer["strongest"], strict=True))
    page.goto("/?text=猫追狗&view=lab&lab=toy-strongest&type=decoder.cross&layer=2&head=1&lang=en")
    ready(page)
    picker = page.locator("#lab-experiment")
    expect(picker).to_have_value("toy-strongest")
    expect(picker.locator("option[value=toy-strongest]")).to_have_text("Strongest keys")
    expect(page.locator(".lab-explain")).to_have_text("Each query's strongest key.")
    expect(page.locator(".lab-summary")).to_have_text(f"Strongest: {pairs}")
    page.click("#toy-mark")
    ready(page)
    expect(page.locator("#toy-mark")).to_have_text(f"Marked: {answer['strongest'][0]}")
    query = parse_qs(urlparse(page.url).query)
    assert query["toymark"] == [answer["strongest"][0]] and query["lab"] == ["toy-strongest"]
    page.reload()  # the link brings the experiment and its own key back
    ready(page)
    expect(page.locator("#toy-mark")).to_have_text(f"Marked: {answer['strongest'][0]}")
    page.click("#lang-zh")
    expect(picker.locator("option[value=toy-strongest]")).to_have_text("最强的键")
    expect(page.locator(".lab-summary")).to_have_text(f"最强：{pairs}")
    expect(page.locator("#toy-mark")).to_have_text(f"已标记: {answer['strongest'][0]}")
    assert errors == []
    context.close()
