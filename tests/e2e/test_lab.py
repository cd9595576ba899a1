"""The attention lab's views in headless Chromium: each experiment drawn from its route."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .test_page import ready, ticks, url_state


def lab(page: Page, experiment: str, query: str = "") -> None:
    page.goto(f"/?view=lab&lab={experiment}{query}")
    ready(page)
    expect(page.locator("#lab-experiment")).to_have_value(experiment)


def plot_ticks(page: Page, index: int, axis: str = "x") -> list[str]:
    return (
        page.locator("#lab-out .plot").nth(index).locator(f".{axis}tick text").all_text_contents()
    )


def summaries(page: Page) -> list[str]:
    return page.locator("#lab-out .lab-summary").all_text_contents()


def test_scaling_shows_both_heatmaps_and_the_entropy_drop(page: Page):
    lab(page, "scaling", "&text=苹果公司发布了新款手机&type=encoder.self&layer=1&head=2")
    assert page.locator("#lab-out .plot .main-svg").count() >= 2
    entropy = re.search(r"([\d.]+) → ([\d.]+) bits", summaries(page)[0])
    assert entropy and float(entropy.group(2)) < float(entropy.group(1))
    assert page.locator("#lab-out table tbody tr").count() == 8  # the layer's heads
    expect(page.locator(".lab-explain")).to_contain_text("√d_k")
    page.click("#lang-zh")
    ready(page)
    expect(page.locator(".lab-explain")).to_contain_text("softmax 会饱和")


def test_positions_without_encoding_permute_exactly(page: Page):
    lab(page, "positions", "&text=猫追狗")
    lines = summaries(page)
    diffs = re.findall(r"(\d[\d.e+-]*)", lines[0])
    assert float(diffs[0]) <= 1e-5 and float(diffs[1]) > 0.05  # without PE, with PE
    assert "狗 追 猫" in lines[1]
    assert page.locator("#lab-out .plot .main-svg").count() >= 4


def test_masks_and_the_padded_batch(page: Page):
    lab(page, "masks", "&text=苹果公司发布了新款手机&other=猫追狗")
    lines = summaries(page)
    assert re.match(r"mean weight on later tokens: 0 → 0\.\d*[1-9]", lines[0])
    assert lines[1].startswith("weight on padding: 0 · ")
    assert plot_ticks(page, 3)[-1] == "<pad>"


def test_kv_cache_steps_move_with_the_slider_and_buttons(page: Page):
    page.goto("/?view=lab&lab=kv-cache&text=银行 行走")
    ready(page)
    expect(page.locator("#lab-experiment")).to_have_value("kv-cache")
    assert url_state(page)["lab"] == "kv-cache"
    expect(page.locator("#lab-step-label")).to_have_text("Step 0 / 5")
    page.get_by_role("button", name="Step +1").click()
    ready(page)
    expect(page.locator("#lab-step-label")).to_have_text("Step 1 / 5")
    assert url_state(page)["step"] == "1"
    expect(page.locator("#lab-out")).to_contain_text("fed yin2 → predicts hang2")
    page.locator("#lab-step").fill("5")
    ready(page)
    expect(page.locator("#lab-step-label")).to_have_text("Step 5 / 5")
    assert ticks(page, "x", "#lab-out .plot") == ["<bos>", "yin2", "hang2", "|", "xing2", "zou3"]
    diff = re.search(r"logits\|: (\S+)", page.locator("#lab-out").inner_text())
    assert diff and float(diff.group(1)) <= 1e-4


def test_metrics_table_sorts(page: Page):
    lab(page, "metrics", "&text=他在银行工作&type=decoder.cross")
    table = page.locator("#lab-metrics-table")
    assert table.locator("tbody tr").count() == 3 * 8
    alignment = table.locator("th", has_text="alignment")
    alignment.click()
    expect(alignment).to_have_attribute("aria-sort", "descending")
    column = list(table.locator("th").all_text_contents()).index("alignment")
    values = [
        float(v) for v in table.locator(f"tbody td:nth-child({column + 1})").all_text_contents()
    ]
    assert values == sorted(values, reverse=True) and values[0] >= 0.9
    page.select_option("#lab-metric", "entropy")
    expect(page.locator("#lab-out .plot .gtitle").first).to_contain_text("entropy")


def test_rollout_and_compare_draw(page: Page):
    lab(page, "rollout", "&model=minilm&text=The cat sat on the mat.")
    assert ticks(page, "x", "#lab-out .plot")[0] == "[CLS]"
    lab(page, "compare", "&text=猫追狗&type=encoder.self")
    page.fill("#lab-other", "狗追猫")
    page.click("#lab-compare-apply")
    ready(page)
    assert url_state(page)["other"] == "狗追猫"
    assert page.locator("#lab-out .plot .main-svg").count() >= 3
    assert plot_ticks(page, 2) == ["猫", "追", "狗"]  # every token aligned


def test_ablating_heads_changes_the_transcription(page: Page):
    lab(page, "ablation", "&text=银行 行走&type=decoder.cross")
    expect(page.locator("#lab-out")).to_contain_text("No head switched off")
    for head in range(8):
        page.get_by_label(f"Layer 2 Head {head}", exact=True).check()
    page.click("#lab-apply")
    ready(page)
    assert url_state(page)["ablate"].count(",") == 7
    result = page.locator("#lab-ablation-result").inner_text()
    before, after = result.split("→ with the heads off:")
    assert "yin2 hang2 | xing2 zou3" in before and after.strip() != "yin2 hang2 | xing2 zou3"


def test_errors_stay_in_the_lab_and_focus_stays_on_the_control(page: Page):
    lab(page, "masks", "&text=猫追狗&other=狗追猫")  # the same length: nothing to pad
    expect(page.locator("#lab-error")).to_contain_text("same length")
    page.fill("#lab-second", "猫")
    page.press("#lab-second", "Enter")
    ready(page)
    expect(page.locator("#lab-out")).to_contain_text("weight on padding: 0 ")
    lab(page, "kv-cache", "&text=银行 行走")
    page.focus("#lab-next")
    page.keyboard.press("Enter")
    ready(page)
    expect(page.locator("#lab-step-label")).to_have_text("Step 1 / 5")
    page.keyboard.press("Enter")  # focus stayed on the button
    ready(page)
    expect(page.locator("#lab-step-label")).to_have_text("Step 2 / 5")
    page.select_option("#model", "minilm")
    ready(page)
    assert page.locator("#lab-experiment option[value=kv-cache]").is_disabled()


def fmt(v: float) -> str:
    """As the lab's tables write a number (views/lab/shared.js `fmt`)."""
    if v != 0 and abs(v) < 1e-3:
        mantissa, exponent = f"{v:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{v:.3f}"


def test_attention_vs_contribution_says_where_weights_mislead(page: Page):
    text = "The cat sat on the mat."
    lab(page, "contribution", f"&model=minilm&text={text}&type=encoder.self&layer=3&head=5")
    body = {"model": "minilm", "text": text, "type": "encoder.self", "layer": 3, "head": 5}
    answer = page.request.post("/api/v1/lab/contribution", data=body).json()
    top = answer["keys"][0]
    apart = answer["distance"][3][5]
    expect(page.locator("#lab-out .lab-summary")).to_have_text(
        f"This head's weights and norm shares are {fmt(apart)} apart (total variation, mean "
        f"over rows; 0: the same, 1: disjoint). Where they differ most: {top['token']}, "
        f"given {fmt(top['weight'])} of the weight and adding {fmt(top['norm_share'])} of "
        "the norms."
    )
    rows = page.locator("#lab-contribution-table tbody tr")
    expect(rows).to_have_count(min(8, len(answer["keys"])))
    expect(rows.first.locator("td").nth(1)).to_have_text(top["token"])
    assert ticks(page, "y", "#lab-out .plot") == [f"L{i}" for i in range(6)]
    page.click("#lang-zh")
    expect(page.locator("#lab-out .lab-summary")).to_contain_text("总变差距离")


def test_attention_flow_into_a_chosen_token_reads_as_the_api_says(page: Page, server):
    import httpx2

    text = "The cat sat on the mat."
    lab(page, "flow", f"&model=minilm&text={text}")
    page.select_option("#lab-flow-query", "2")  # "cat"
    ready(page)
    assert url_state(page)["fq"] == "2"
    r = httpx2.post(
        f"{server}/api/v1/lab/flow",
        json={"model": "minilm", "text": text, "type": "encoder.self", "query": 2},
        timeout=60,
    ).json()
    best = max(range(len(r["flow"])), key=r["flow"].__getitem__)
    said = page.locator("#lab-flow-said")
    expect(said).to_contain_text(
        f"“cat” receives most flow from “{r['tokens'][best]}” ({r['flow'][best]:.3f})"
    )
    assert page.locator("#lab-flow-plot .point").count() == 2 * len(r["tokens"])
