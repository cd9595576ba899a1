"""Axes, lines and tables as a person reads them, in headless Chromium: the logit lens's
rank axis in powers of ten, the neuron view opened on its most spread row, rollout's
sink said in both languages, one number format a lab table column, the corpus form's
Cancel and labels, its corpora named in Chinese."""

from __future__ import annotations

import re
from urllib.parse import quote

import numpy as np
from playwright.sync_api import Locator, Page, expect

from .test_lab import lab
from .test_page import ready, url_state

LENS_TEXT = "The capital of France is"
PROMPT = "The capital of France is Paris, and the capital of Italy is Rome."

# the formats a table cell of a number may have; anything else is text
FORMATS = {
    "whole": r"-?\d+",
    "three decimals": r"-?\d+\.\d{3}",
    "scientific": r"-?\d\.\de[+-]\d+",
}


def format_of(cell: str) -> str:
    return next((name for name, rx in FORMATS.items() if re.fullmatch(rx, cell)), "text")


def columns_of(table: Locator) -> list[list[str]]:
    rows = table.evaluate(
        "t => [...t.tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent))"
    )
    return [list(column) for column in zip(*rows, strict=True)]


def assert_one_format_a_column(table: Locator) -> None:
    headers = table.locator("thead th").all_text_contents()
    for header, cells in zip(headers, columns_of(table), strict=True):
        formats = {format_of(c) for c in cells}
        assert len(formats) == 1, f"column {header!r} mixes {formats}: {cells}"


def test_the_lens_ranks_read_in_powers_of_ten_and_its_table_in_one_format(page: Page):
    lab(page, "lens", f"&model=smollm2&text={quote(LENS_TEXT)}")
    answer = page.request.post("/api/v1/lab/lens", data={"model": "smollm2", "text": LENS_TEXT})
    most = max(row["rank"] for row in answer.json()["rows"])
    ticks = page.locator("#lab-out .plot").first.locator(".y2tick text").all_text_contents()
    values = [int(t.replace(",", "")) for t in ticks]
    assert values == [10**i for i in range(len(values))], ticks
    assert values[-2] < most <= values[-1]  # up to the first power at or past the largest
    table = page.locator("#lab-lens-rows")
    assert_one_format_a_column(table)
    probabilities = re.findall(r" (\S+)(?: ·|$)", " · ".join(columns_of(table)[1]))
    assert probabilities and all(re.fullmatch(r"\d\.\d{3}", p) for p in probabilities)
    # the table of the most likely tokens: its colour scale says what it is
    expect(page.locator("#lab-out .plot").nth(1).locator(".colorbar .cbtitle")).to_have_text(
        "probability"
    )


def test_every_column_of_the_lab_tables_has_one_number_format(page: Page):
    lab(page, "scaling", "&text=苹果公司发布了新款手机&type=encoder.self&layer=1&head=2")
    assert_one_format_a_column(page.locator("#lab-out table"))
    lab(page, "metrics", "&text=他在银行工作&type=decoder.self")
    assert_one_format_a_column(page.locator("#lab-metrics-table"))
    lab(page, "ablation", "&text=他在银行工作&type=decoder.cross")
    assert_one_format_a_column(page.locator("#lab-out table"))


def test_the_neuron_view_of_a_causal_decoder_opens_on_its_most_spread_row(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=neuron")
    ready(page)
    opened = int(page.locator("#neuron-query").input_value())
    assert opened != 0  # row 0 sees one key: nothing to compare
    state = url_state(page)
    assert "q" not in state  # no query chosen: the view's own
    kind, layer, head = state["type"], int(state["layer"]), int(state["head"])
    block = page.request.post(
        "/api/v1/attention",
        data={"model": "smollm2", "text": PROMPT, "types": [kind], "layers": [layer],
              "encoding": "json"},
    ).json()["blocks"][0]  # fmt: skip
    weights = np.array(block["data"], dtype=np.float64)[head]
    # the rule the view states: the row of the highest entropy (the first of equals)
    entropy = -(weights * np.log(np.clip(weights, 1e-30, None))).sum(-1)
    assert entropy[opened] >= entropy.max() - 1e-4
    expect(page.locator("#plot .gtitle")).to_contain_text(
        f"query {opened} “{block['rows'][opened]}”"
    )
    # its rows: the keys the query sees, itself the last
    assert page.evaluate("document.getElementById('plot').data[0].z.length") == opened + 1
    # a query the link names is kept, row 0 too
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=neuron&type={kind}&layer={layer}"
              f"&head={head}&q=0")  # fmt: skip
    ready(page)
    expect(page.locator("#neuron-query")).to_have_value("0")
    expect(page.locator("#plot .gtitle")).to_contain_text("query 0 ")


def test_rollout_says_why_it_piles_onto_a_sink_in_both_languages(page: Page):
    lab(page, "rollout", "&model=smollm2&text=The cat sat on the mat.")
    sink = page.locator("#lab-rollout-sink")
    expect(sink).to_be_visible()
    expect(sink).to_contain_text("100% of the flow, averaged over the rows, ends on “The”")
    expect(sink).to_contain_text("an attention sink")
    expect(sink).to_contain_text("compounds through the residual mix")
    page.click("#lang-zh")
    ready(page)
    expect(sink).to_contain_text("100% 的流量落在“The”（位置 0）上")
    expect(sink).to_contain_text("注意力汇点")
    # a rollout spread over its tokens says nothing of a sink
    lab(page, "rollout", "&model=pronounce&text=他在银行工作&lang=en")
    expect(page.locator("#lab-out .plot .main-svg").first).to_be_visible()
    expect(sink).to_have_count(0)


def test_the_corpus_form_labels_its_text_cancels_only_a_run_and_speaks_chinese(page: Page):
    page.goto("/?model=minilm&text=The cat sat.&view=corpus&type=encoder.self")
    ready(page)
    cancel = page.locator("#corpus-cancel")
    expect(cancel).to_be_hidden()  # nothing runs: nothing to cancel
    box = page.get_by_label("Your sentences, one a line")
    expect(box).to_have_id("corpus-text")
    expect(page.locator("label[for=corpus-text]")).to_be_visible()
    page.fill("#corpus-limit", "30")
    page.click("#corpus-run")
    expect(cancel).to_be_visible()
    expect(page.locator("#corpus-status")).to_contain_text("Done: 30 of 30", timeout=60_000)
    expect(cancel).to_be_hidden()
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#corpus-source option[value=hsk-en]")).to_have_text(
        "HSK 3.0 分级例句的英文译文"
    )
    expect(page.locator("#corpus-source option[value=hsk-zh]")).to_have_text(
        "HSK 3.0 分级例句（中文）"
    )
    expect(page.locator("#corpus-licence")).to_have_text(
        "HSK 3.0 分级例句的英文译文：4354 句，许可 CC-BY-SA-4.0，来自 hsk-sentences-audio 软件包 "
        "1.0.0（https://github.com/no7z/hsk-sentences-audio）。"
    )
    expect(page.get_by_label("你的句子，每行一句")).to_have_id("corpus-text")
