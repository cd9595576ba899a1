"""The logit lens, direct logit attribution, ALTI and the contribution graph in headless
Chromium: what a person
reads (the sentence, the rows, the heatmaps' axes, the button that opens a head) is the
API's answer, in both languages."""

from __future__ import annotations

from urllib.parse import quote

from playwright.sync_api import Page, expect

from .test_lab import fmt, lab
from .test_page import ready, ticks, url_state

TEXT = "The capital of France is"
QUERY = f"&model=smollm2&text={quote(TEXT)}"


def signed(v: float) -> str:
    """As the DLA sentence writes a signed number (views/lab/dla.js `signed`; a whole
    number, as a model without biases gives, as JavaScript writes it)."""
    return ("+" if v >= 0 else "−") + (str(int(abs(v))) if v == int(v) else fmt(abs(v)))


def test_the_logit_lens_follows_the_prediction_through_the_layers(page: Page):
    lab(page, "lens", QUERY)
    answer = page.request.post("/api/v1/lab/lens", data={"model": "smollm2", "text": TEXT}).json()
    rows = answer["rows"]
    first = next(i for i in range(len(rows)) if all(r["rank"] == 1 for r in rows[i:]))
    depth = "embeddings" if first == 0 else f"after layer {first - 1}"
    token, position = answer["predicted"]["token"], answer["position"]
    expect(page.locator("#lab-lens-said")).to_have_text(
        f"After “{answer['tokens'][position]}” (position {position}) the model predicts "
        f"“{token}” ({fmt(answer['predicted']['probability'])}). It is the most likely token "
        f"from {depth} on; read from the embeddings alone it ranks {rows[0]['rank']}."
    )
    table = page.locator("#lab-lens-rows tbody tr")
    expect(table).to_have_count(len(rows))  # the embeddings, then after each of the layers
    expect(table.first.locator("td").first).to_have_text("embeddings")
    expect(table.last.locator("td").nth(2)).to_have_text("1")  # the output: its own top token
    expect(page.locator("#lab-out .plot").first.locator(".scatterlayer .trace")).to_have_count(2)
    best = page.locator("#lab-out .plot").nth(1).locator(".ytick text").all_text_contents()
    assert {"embeddings", f"after layer {len(rows) - 2}"} <= set(best)
    page.select_option("#lab-lens-position", "1")
    expect(page.locator("#lab-lens-said")).to_contain_text("(position 1)", timeout=60_000)
    assert url_state(page)["rep"] == "1"
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-lens-said")).to_contain_text(
        "（位置 1）之后，模型预测", timeout=60_000
    )
    expect(page.locator("#lab-lens-rows tbody tr").first.locator("td").first).to_have_text("嵌入")


def test_direct_logit_attribution_sums_to_the_logit_difference_and_opens_a_head(page: Page):
    lab(page, "dla", QUERY)
    r = page.request.post("/api/v1/lab/dla", data={"model": "smollm2", "text": TEXT}).json()
    cells = [(v, layer, head) for layer, row in enumerate(r["heads"]) for head, v in enumerate(row)]
    most, least = max(cells), min(cells)
    assert abs(r["total"] - r["logit_diff"]) <= 1e-4 * max(1.0, abs(r["logit_diff"]))
    target, baseline = r["target"]["token"], r["baseline"]["token"]
    expect(page.locator("#lab-dla-said")).to_have_text(
        f"At position {r['position']}, logit[“{target}”] − logit[“{baseline}”] = "
        f"{fmt(r['logit_diff'])}; the terms sum to {fmt(r['total'])}: embeddings "
        f"{signed(r['embeddings'])}, heads {signed(sum(v for v, _, _ in cells))}, attention "
        f"output biases {signed(sum(r['attention_bias']))}, feed-forward blocks "
        f"{signed(sum(r['feed_forward']))}, final biases {signed(r['biases'])}. The largest "
        f"head term: L{most[1]} H{most[2]} ({signed(most[0])}); the smallest: L{least[1]} "
        f"H{least[2]} ({signed(least[0])})."
    )
    assert ticks(page, "y", "#lab-dla-heads") == [f"L{i}" for i in range(len(r["heads"]))]
    strongest = max(cells, key=lambda c: abs(c[0]))
    expect(page.locator("#lab-dla-top tbody tr").first.locator("td").first).to_have_text(
        str(strongest[1])
    )
    expect(page.locator("#lab-dla-layers tbody tr")).to_have_count(len(r["heads"]))
    # another target among the candidates: the sentence follows
    other = r["candidates"][2]
    page.select_option("#lab-dla-target", str(other["id"]))
    # (the experiment runs again: its sentence is drawn when it is back)
    expect(page.locator("#lab-dla-said")).to_contain_text(
        f"logit[“{other['token']}”]", timeout=60_000
    )
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-dla-said")).to_contain_text("各项之和为", timeout=60_000)
    page.locator("#lab-dla-top .lab-dla-open").first.click()
    ready(page)
    state = url_state(page)
    assert state["view"] == "head"
    opened = page.request.post(
        "/api/v1/lab/dla",
        data={
            "model": "smollm2",
            "text": TEXT,
            "target": other["id"],
            "baseline": r["baseline"]["id"],
        },
    ).json()
    best = max(
        (
            (v, layer, head)
            for layer, row in enumerate(opened["heads"])
            for head, v in enumerate(row)
        ),
        key=lambda c: abs(c[0]),
    )
    assert (int(state["layer"]), int(state["head"])) == (best[1], best[2])


def test_alti_is_drawn_beside_rollout(page: Page):
    text = "The cat sat on the mat."
    lab(page, "alti", f"&model=minilm&text={quote(text)}&type=encoder.self&layer=2")
    body = {"model": "minilm", "text": text, "type": "encoder.self", "layer": 2}
    r = page.request.post("/api/v1/lab/alti", data=body).json()
    row = r["composed"][-1]
    top = row.index(max(row))
    expect(page.locator("#lab-alti-said")).to_have_text(
        f"After every layer, “{r['tokens'][-1]}” (the last token) draws most on "
        f"“{r['tokens'][top]}”: {fmt(row[top])} of its contributions by ALTI, where rollout "
        f"gives {fmt(r['rollout'][-1][top])}."
    )
    for plot in ("#lab-alti-composed", "#lab-alti-rollout", "#lab-alti-layer", "#lab-alti-norms"):
        assert ticks(page, "x", plot) == r["tokens"]
    expect(page.locator("#lab-alti-layer .gtitle")).to_contain_text("this layer's own ALTI")
    expect(page.locator("#lab-alti-layer .gtitle")).to_contain_text("Layer 2")
    expect(page.locator("#lab-alti-norms .gtitle")).to_contain_text("Kobayashi et al. 2021")
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-alti-said")).to_contain_text("经过所有层后", timeout=60_000)


def test_the_contribution_graph_traces_the_prediction_to_the_input(page: Page):
    lab(page, "graph", QUERY)
    r = page.request.post("/api/v1/lab/graph", data={"model": "smollm2", "text": TEXT}).json()
    inputs = sorted({int(e["source"][3:]) for e in r["edges"] if e["source"].startswith("X0_")})
    expect(page.locator("#lab-graph-said")).to_have_text(
        f"{len(r['edges'])} edges above 0.040 trace the prediction “{r['predicted']}” after "
        f"“{r['tokens'][r['position']]}” (position {r['position']}) back to the input tokens "
        + ", ".join(f"“{r['tokens'][i]}”" for i in inputs)
        + "."
    )
    attention = sorted(
        (e for e in r["edges"] if e["target"].startswith("A") and max(e["heads"]) > 0),
        key=lambda e: -(e["weight"] - e["residual"]),
    )
    rows = page.locator("#lab-graph-edges tbody tr")
    expect(rows).to_have_count(min(8, len(attention)))
    top = attention[0]
    head = max(range(len(top["heads"])), key=lambda h: top["heads"][h])
    expect(rows.first.locator("td").first).to_have_text(top["target"][1:].split("_")[0])
    expect(rows.first.locator("td").nth(4)).to_have_text(str(head))
    # one dot an edge, whose hover names its heads
    dots = page.locator("#lab-graph .scatterlayer .trace").last.locator(".point")
    expect(dots).to_have_count(len(r["edges"]))
    assert ticks(page, "x", "#lab-graph") == [f"{i}: {t}" for i, t in enumerate(r["tokens"])]
    page.fill("#lab-graph-threshold", "0.2")
    page.click("#lab-graph-apply")
    # (the experiment runs again: its sentence is drawn when it is back)
    expect(page.locator("#lab-graph-said")).to_contain_text("above 0.200", timeout=60_000)
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-graph-said")).to_contain_text("条高于 0.200 的边", timeout=60_000)
    lab(page, "graph", QUERY)  # (the default threshold again: its strongest edge's head)
    page.locator("#lab-graph-edges .lab-graph-open").first.click()
    ready(page)
    state = url_state(page)
    assert state["view"] == "head"
    assert int(state["layer"]) == int(top["target"][1:].split("_")[0])
    assert int(state["head"]) == head
