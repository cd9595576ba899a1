"""Inside a head, in Chromium: the neuron view's products and sums, the query-key space
drawn with WebGL (its faithfulness figures and a clicked query's keys), and the lines
view's count of what it draws, each checked against the API's own answer."""

from __future__ import annotations

import time

import httpx2
import numpy as np
import pytest
from playwright.sync_api import Page, expect

from harness.browser import CHROMIUM, FLAGS
from tests.app.test_api import decode

from .conftest import ARTIFACTS, block_outside
from .test_page import ready, ticks, url_state

TEXT = "The animal didn't cross the street because it was too tired."
PROMPT = "The capital of France is Paris, and the capital of Italy is Rome."


def api(server: str, route: str, **body) -> dict:
    answer = httpx2.post(f"{server}/api/v1/{route}", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_neuron_view_shows_each_keys_products_and_their_sums(page: Page, server):
    page.goto(f"/?model=minilm&text={TEXT}&view=neuron&type=encoder.self&layer=2&head=5&q=8")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_have_text(
        "encoder self-attention · Layer 2 · Head 5 · query 8 “street”: q_i·k_i/√d"
    )
    expect(page.locator("#convention")).to_contain_text("A row's sum is the raw score")
    assert page.locator("#neuron-before").count() == 0  # MiniLM has no RoPE
    body = api(server, "neuron", model="minilm", text=TEXT, layer=2, head=5, query=8)
    assert ticks(page, "x")[:2] == ["dim 0", "dim 1"]
    # sorted: the dimension that moves the scores most comes first
    page.check("#neuron-sorted")
    ready(page)
    products = np.abs(np.array(body["after"]["products"])).sum(0)
    assert ticks(page, "x")[0] == f"dim {int(products.argmax())}"
    assert url_state(page)["nv"] == "sorted"
    page.select_option("#neuron-query", "3")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_contain_text("query 3 “didn”")
    assert url_state(page)["q"] == "3"


def test_the_neuron_view_of_a_rope_model_shows_before_the_rotation(page: Page, server):
    page.goto(f"/?model=smollm2&text={PROMPT}&view=neuron&type=decoder.self&layer=4&head=7&q=9")
    ready(page)
    page.check("#neuron-before")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_contain_text("(before RoPE)")
    expect(page.locator("#convention")).to_contain_text("before each is rotated by its position")
    # a causal row: the keys the query may see, itself the last
    assert len(ticks(page, "y")) == 10


@pytest.fixture(scope="module")
def gl_page(browser, server, outside_requests):
    """A second Chromium, with WebGL (SwiftShader, on the CPU) for plotly.js's scattergl."""
    flags = [f for f in FLAGS if f != "--disable-gpu"]
    flags += ["--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]
    gl = browser.browser_type.launch(executable_path=CHROMIUM, args=flags)
    context = gl.new_context(viewport={"width": 1280, "height": 900}, base_url=server)
    block_outside(context, outside_requests)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    gl.close()
    assert errors == [], errors


def test_the_query_key_space_says_how_faithful_it_is_and_marks_a_querys_keys(gl_page, server):
    page = gl_page
    page.goto(f"/?model=smollm2&text={PROMPT}&view=qk&type=decoder.self&layer=18&head=6")
    ready(page)
    body = api(server, "qk-space", model="smollm2", text=PROMPT, type="decoder.self",
               layer=18, head=6)  # fmt: skip
    n = len(body["queries"]["tokens"])
    expect(page.locator("#plot .gtitle")).to_have_text(
        f"decoder self-attention · Layer 18 · Head 6 · {n} queries and {n} keys (PCA)"
    )
    said = page.locator("#convention").inner_text()
    assert f"r = {body['correlation_before']:.2f} for the raw vectors" in said
    assert f"r = {body['correlation_after']:.2f} as drawn" in said
    assert "key/value head 2, which query heads 6, 7, 8 share" in said
    # click query 9 where plotly.js drew it (again while the readout does not name it: a
    # redraw for automargin may move the point after it was found; a click marks it anew)
    for _ in range(50):
        where = page.evaluate(
            """([x, y]) => { const gd = document.getElementById('plot'); const f = gd._fullLayout;
            const box = gd.getBoundingClientRect();
            return [box.left + f._size.l + f.xaxis.l2p(x), box.top + f._size.t + f.yaxis.l2p(y)];
            }""",
            body["queries"]["coords"][9],
        )
        page.mouse.click(*where)
        if (page.locator("#readout").text_content() or "").startswith("Query 9 "):
            break
        time.sleep(0.1)
    top = body["top_keys"][9]
    named = ", ".join(
        f"“{body['keys']['tokens'][k]}” {w:.3f}"
        for k, w in zip(top, body["top_weights"][9], strict=True)
    )
    expect(page.locator("#readout")).to_have_text(
        f"Query 9 “{body['queries']['tokens'][9]}” attends most to: {named}"
    )
    # 3-D, coloured by sentence, with a second sentence
    page.select_option("#qk-dims", "3")
    ready(page)
    assert url_state(page)["qk"] == "pca.3.position"
    expect(page.locator("#plot .gl-container, #plot canvas").first).to_be_attached()


def test_the_lines_view_draws_value_weighted_norms_as_fractions_of_the_layers_largest(
    page: Page, server
):
    page.goto(f"/?model=minilm&text={TEXT}&view=lines&type=encoder.self&layer=2&head=5&kind=norms")
    ready(page)
    block = api(server, "attention", model="minilm", text=TEXT, types=["encoder.self"],
                layers=[2], kinds=["norms"], encoding="f2")["blocks"][0]  # fmt: skip
    norms = decode(block["data"])  # (as the page reads them: float16)
    expected = int((norms[5] / norms.max() >= 0.1).sum())
    expect(page.locator("#convention")).to_contain_text(
        f"{expected} lines drawn: the value-weighted norms ≥ 0.1 of this layer's largest, of Head 5"
    )
    expect(page.locator("#explain")).to_contain_text("Value-weighted norms ‖α f(x)‖")
    expect(page.locator("#kind")).to_have_value("norms")


def test_the_lines_view_says_how_many_lines_it_draws(page: Page, server):
    page.goto(f"/?model=minilm&text={TEXT}&view=lines&type=encoder.self&layer=2&head=5")
    ready(page)
    block = api(server, "attention", model="minilm", text=TEXT, types=["encoder.self"],
                layers=[2], encoding="json")["blocks"][0]  # fmt: skip
    weights = np.array(block["data"])
    expected = int((weights[5] >= 0.1).sum())
    expect(page.locator("#convention")).to_contain_text(
        f"{expected} lines drawn: the weights ≥ 0.1 of Head 5"
    )
    page.check("#lines-head-0")
    ready(page)
    both = int((weights[[0, 5]] >= 0.1).sum())
    expect(page.locator("#convention")).to_contain_text(
        f"{both} lines drawn: the weights ≥ 0.1 of Head 0, Head 5"
    )
    assert url_state(page)["lh"] == "0,5"
    page.fill("#lines-threshold", "0.5")
    page.press("#lines-threshold", "Enter")
    ready(page)
    strong = int((weights[[0, 5]] >= 0.5).sum())
    expect(page.locator("#convention")).to_contain_text(f"{strong} lines drawn: the weights ≥ 0.5")


def test_a_corpus_run_shows_its_progress_statistics_and_head_search(page: Page, server):
    page.goto("/?model=minilm&text=The cat sat.&view=corpus&type=encoder.self")
    ready(page)
    expect(page.locator("#corpus-source")).to_have_value("hsk-en")  # MiniLM reads English
    expect(page.locator("#corpus-licence")).to_contain_text("4354 sentences, licence CC-BY-SA-4.0")
    page.fill("#corpus-limit", "20")
    page.click("#corpus-run")
    expect(page.locator("#corpus-status")).to_contain_text(
        "Done: 20 of 20 sentences", timeout=60_000
    )
    run = url_state(page)["cr"]
    expect(page.locator("#plot .gtitle")).to_have_text(
        "previous token · encoder self-attention · mean over 20 sentences"
    )
    found = httpx2.get(f"{server}/api/v1/corpus-runs/{run}/search",
                       params={"pattern": "previous", "top": 10}).json()  # fmt: skip
    first = found["heads"][0]
    expect(page.locator("#corpus-found > li").first).to_contain_text(
        f"encoder self-attention L{first['layer']} H{first['head']}: {first['score']:.3f}"
    )
    cells = page.locator("#corpus-table tbody tr td:nth-child(5)").all_text_contents()
    values = [float(v) for v in cells]
    assert values == sorted(values, reverse=True)  # sorted by the statistic shown
    page.click("#corpus-table th[data-key=entropy]")
    entropies = [
        float(v) for v in page.locator("#corpus-table tbody td:nth-child(3)").all_text_contents()
    ]
    assert entropies == sorted(entropies, reverse=True)
    # a sentence of the search opens in the head view, on its head
    example = first["examples"][0]
    page.locator("#corpus-found > li").first.locator("button.corpus-open").first.click()
    ready(page)
    state = url_state(page)
    assert (state["view"], state["text"], state["layer"], state["head"]) == (
        "head", example["text"], str(first["layer"]), str(first["head"]))  # fmt: skip


def test_the_page_cancels_the_corpus_run_it_started(page: Page, server):
    # the run's owner token, answered at its creation, goes with the page's cancel
    page.goto("/?model=minilm&text=The cat sat.&view=corpus&type=encoder.self")
    ready(page)
    page.fill("#corpus-limit", "4000")
    page.click("#corpus-run")
    # clicked at once, before the run's creation has answered: it stops that run
    page.click("#corpus-cancel")
    expect(page.locator("#corpus-status")).to_contain_text("Cancelled", timeout=30_000)
    run = httpx2.get(f"{server}/api/v1/corpus-runs/{url_state(page)['cr']}").json()
    assert run["status"] == "cancelled" and run["done"] < 4000


def test_hovering_a_token_in_the_lines_view_shows_its_lines_alone(page: Page, server):
    page.goto(f"/?model=minilm&text={TEXT}&view=lines&type=encoder.self&layer=2&head=5&thr=0.05")
    ready(page)
    asked = {"types": ["encoder.self"], "layers": [2], "heads": [5], "encoding": "json"}
    block = api(server, "attention", model="minilm", text=TEXT, **asked)
    block = block["blocks"][0]
    weights = np.array(block["data"])[0]
    query = 3  # the left column's fourth token
    where = page.evaluate(
        """(i) => { const gd = document.getElementById('plot'); const f = gd._fullLayout;
        const labels = gd.data.findIndex((t) => t.meta === 'left');
        const box = gd.getBoundingClientRect();
        return [box.left + f._size.l + f.xaxis.l2p(0), box.top + f._size.t +
                f.yaxis.l2p(gd.data[labels].y[i])]; }""",
        query,
    )
    page.mouse.move(*where)
    expect(page.locator("#readout")).to_have_text(
        f"{block['rows'][query]}: {int((weights[query] >= 0.05).sum())}"
    )


def test_the_query_key_space_coloured_by_position_has_a_titled_colour_scale(gl_page):
    page = gl_page
    page.goto(f"/?model=minilm&text={TEXT}&view=qk&type=encoder.self&layer=0&head=2")
    ready(page)
    bar = page.locator("#plot .colorbar")
    expect(bar).to_have_count(1)  # one scale: the queries' and keys' positions share it
    expect(bar.locator(".cbtitle")).to_have_text("position")
    numbers = [int(v) for v in bar.locator(".cbaxis text, .ycbtick text").all_text_contents()]
    assert numbers and numbers == sorted(numbers) and numbers[0] >= 0
    page.click("#lang-zh")
    ready(page)
    expect(bar.locator(".cbtitle")).to_have_text("位置")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "qk_position_scale.png", full_page=True)
    # a colour that names categories (a sentence, a token) has no number to scale
    page.select_option("#qk-colour", "sentence")
    ready(page)
    expect(bar).to_have_count(0)
