"""A model that continues a prompt, in the page: Generate streams the continuation token by
token, the generated tokens are set apart and each opens its step (every head's attention
over the tokens before, and the next-token distribution), from the link alone too."""

from __future__ import annotations

import re
from urllib.parse import quote

from playwright.sync_api import Page, expect

from .test_page import ready, ticks, url_state
from .test_truth import shot, title_of

PROMPT = "The capital of France is"


def generate(page: Page, tokens: int) -> list[int]:
    """Generate `tokens` tokens; the number of generated tokens shown after each change of
    the output line while it streamed."""
    page.fill("#new-tokens", str(tokens))
    page.evaluate(
        """() => {
          window.shown = [];
          const out = document.getElementById("output-text");
          new MutationObserver(() => window.shown.push(out.querySelectorAll(".generated").length))
            .observe(out, { childList: true });
        }"""
    )
    page.click("#run")
    ready(page)
    return page.evaluate("window.shown")


def test_generate_streams_tokens_then_shows_the_whole_sequence(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}")
    ready(page)
    expect(page.locator("#run")).to_have_text("Generate")
    expect(page.locator("#chat")).to_be_visible()
    # before generating: the prompt's next token
    expect(page.locator("#output-text")).to_have_text(" Paris")
    shown = generate(page, 6)
    # one token at a time: 1, 2, ... 6 shown as they came
    streamed = [n for n in shown if n > 0]
    assert streamed[:6] == [1, 2, 3, 4, 5, 6], shown
    state = url_state(page)
    assert len(state["cont"].split(",")) == 6
    generated = page.locator("#source-tokens button.generated")
    expect(generated).to_have_count(6)
    expect(generated.first).to_have_text("␣Paris")
    expect(page.locator("#output-text")).to_contain_text("Paris.")
    # the head view covers prompt and continuation as one sequence
    assert ticks(page, "y")[:6] == ["The", "␣capital", "␣of", "␣France", "␣is", "␣Paris"]
    shot(page, "generated-head")
    # another prompt (an example) drops what was generated for this one, and an example
    # does what Enter does: it is put in the box and continued
    page.fill("#new-tokens", "2")
    example = page.locator("#examples button:has-text('def fibonacci')")
    example.click()
    ready(page)
    assert page.input_value("#text") == example.text_content() == url_state(page)["text"]
    assert len(url_state(page)["cont"].split(",")) == 2
    expect(page.locator("#source-tokens button.generated")).to_have_count(2)


def test_smollm2s_tokens_read_as_text_streamed_on_the_axes_and_with_their_piece_on_hover(
    page: Page,
):
    """No byte-level marker (Ġ) on the streamed output line nor the head view's labels: the
    line reads as the text it makes, a label's space as ␣; the hover names the raw piece."""
    said = {"en": "{token} (raw “{raw}”)", "zh": "{token}（原始“{raw}”）"}
    for lang in ("en", "zh"):
        page.goto(f"/?model=smollm2&text={quote(PROMPT)}&lang={lang}")
        ready(page)
        page.evaluate(
            """() => {
              window.lines = [];
              const out = document.getElementById("output-text");
              new MutationObserver(() => {
                if (out.querySelector(".generated")) window.lines.push(out.textContent);
              }).observe(out, { childList: true });
            }"""
        )
        page.fill("#new-tokens", "4")
        page.click("#run")
        ready(page)
        lines = page.evaluate("window.lines")
        # the streamed line: text, no marker (a busy browser may batch the first steps'
        # mutations into one observation: " Paris." first, as in one run of make test)
        assert lines and lines[0].startswith(" Paris"), lines
        assert not any("Ġ" in line for line in lines), lines
        labels = ticks(page, "y") + ticks(page, "x")
        assert labels[:2] == ["The", "␣capital"] and not any("Ġ" in x for x in labels), labels
        # the raw piece on hover: the readout names the row's token and its piece
        where = page.evaluate(
            """() => { const gd = document.getElementById("plot"), f = gd._fullLayout;
            const box = gd.getBoundingClientRect();
            return [box.left + f._size.l + f.xaxis.l2p(1), box.top + f._size.t +
                    f.yaxis.l2p(5)]; }"""
        )
        page.mouse.move(*where)
        # row and column alike: "step 5: fed ␣Paris (raw “ĠParis”), predicts . → ␣capital
        # (raw “Ġcapital”): …"
        row = said[lang].format(token="␣Paris", raw="ĠParis")
        column = said[lang].format(token="␣capital", raw="Ġcapital")
        expect(page.locator("#readout")).to_contain_text(f"{row}")
        expect(page.locator("#readout")).to_contain_text(f" → {column}: ")


def test_a_generated_token_opens_its_step_from_the_page_and_from_its_link(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}")
    ready(page)
    generate(page, 4)
    page.locator("#source-tokens button.generated").first.click()
    ready(page)
    state = url_state(page)
    assert (state["view"], state["tok"]) == ("step", "5")
    assert title_of(page.locator("#plot")) == "Step 4: fed ␣is, predicts ␣Paris · Layer 16"
    heads = ticks(page, "y")
    assert heads == [f"H{h} · KV{h // 3}" for h in range(9)]  # 9 query heads, 3 shared
    assert ticks(page, "x") == ["The", "␣capital", "␣of", "␣France", "␣is"]
    expect(page.locator("#convention")).to_contain_text("heads sharing a key/value head are 3")
    bars = page.locator("#extra .ytick text").all_text_contents()
    assert len(bars) == 10 and re.fullmatch(r"␣Paris\s+#1", bars[-1]), bars  # likeliest on top
    expect(page.locator("#extra .gtitle")).to_contain_text("What step 4 predicts")
    shot(page, "generated-step")
    link = page.url
    page.goto(link.replace("lang=en", "lang=zh"))  # a link alone brings the step back
    ready(page)
    assert title_of(page.locator("#plot")) == "第 4 步：输入 ␣is，预测 ␣Paris · 层 16"
    expect(page.locator("#source-tokens button.generated")).to_have_count(4)
    shot(page, "generated-step-zh")


def test_the_step_view_is_offered_only_for_models_that_continue_a_prompt(page: Page):
    page.goto("/?model=pronounce&text=猫追狗&view=step")
    ready(page)
    assert url_state(page)["view"] == "head"  # the link's view does not apply: the first
    expect(page.locator("[data-view=step]")).to_be_hidden()
    expect(page.locator("#chat")).to_be_hidden()
    expect(page.locator("#run")).to_have_text("Run")


def test_the_model_view_groups_query_heads_by_their_key_value_head(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=model")
    ready(page)
    labels = page.locator(".kv-header .kv-label")
    expect(labels).to_have_text(["KV 0: H0–H2", "KV 1: H3–H5", "KV 2: H6–H8"])
    # each label spans its three heads' thumbnails, a gap between groups
    for g in range(3):
        label = labels.nth(g).bounding_box()
        first = page.locator(f".thumb[data-layer='0'][data-head='{3 * g}']").bounding_box()
        last = page.locator(f".thumb[data-layer='0'][data-head='{3 * g + 2}']").bounding_box()
        assert abs(label["x"] - first["x"]) <= 2
        assert abs(label["x"] + label["width"] - last["x"] - last["width"]) <= 2
    expect(page.locator(".thumb.group-start")).to_have_count(2 * 30)
    shot(page, "gqa-model")


def test_ropes_positional_view_shows_rotation_angles(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=positional")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_have_text(
        "The angle RoPE rotates each pair of a head's dims by, per position "
        "(radians, wrapped to ±π)"
    )
    assert ticks(page, "x")[-1] == "31"  # head_dim 64: 32 pairs
    layout = page.evaluate("document.getElementById('plot').data[0].z")
    assert all(-3.1416 <= v <= 3.1416 for row in layout for v in row)
    expect(page.locator("#explain")).to_contain_text("RoPE adds nothing to the embeddings")


def test_the_kv_cache_lab_reads_the_prompt_then_steps_through_what_was_generated(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}")
    ready(page)
    generate(page, 3)
    cont = url_state(page)["cont"]
    lab = "view=lab&lab=kv-cache&type=decoder.self&layer=17&head=0"
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&cont={cont}&{lab}")
    ready(page)
    expect(page.locator("#lab-step-label")).to_have_text("Step 0 / 3")
    expect(page.locator("#lab-step-fed")).to_have_text(
        "the prompt's 5 tokens read into the cache in one pass; its last, ␣is, → predicts ␣Paris"
    )
    # grouped-query attention, said with the sizes measured: 5 tokens x 3 heads x 64 x 2 x 4 B
    expect(page.locator("#lab-kv-shared")).to_contain_text("3 key/value heads per layer for its 9")
    expect(page.locator("#lab-cache-bytes")).to_have_text(
        "cache per layer: 7.5 KiB × 30 = 225.0 KiB"
    )
    assert title_of(page.locator("#lab-out .plot")).startswith(
        "decoder self-attention · Layer 17 · Step 0"
    )
    page.get_by_role("button", name="Step +1").click()
    ready(page)
    expect(page.locator("#lab-step-fed")).to_have_text("fed ␣Paris → predicts .")
    assert ticks(page, "x", "#lab-out .plot")[-2:] == ["␣is", "␣Paris"]
    expect(page.locator("#lab-cache-bytes")).to_have_text(
        "cache per layer: 9.0 KiB × 30 = 270.0 KiB"
    )


def test_the_induction_lab_ranks_the_heads_and_shows_switching_them_off(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=lab&lab=induction")
    ready(page)
    loss = page.locator("#lab-ind-loss").inner_text()
    found = re.findall(r"([\d.]+) nats", loss)
    assert float(found[1]) < float(found[0]) - 8  # the repeat is predicted, the first not
    expect(page.locator("#lab-ind-ablated")).to_contain_text(
        "with the top 5 induction heads off (L18 H6"
    )
    expect(page.locator("#lab-ind-verdict")).to_contain_text(
        "Switching the induction heads off raises the second copy's loss by"
    )
    rows = page.locator("#lab-ind-table tbody tr")
    expect(rows).to_have_count(10)
    expect(rows.first).to_contain_text("18")
    expect(page.locator("#lab-ind-pattern option")).to_have_count(5)
    pattern = page.locator("#lab-out .plot").nth(1)
    ticks_y = pattern.locator(".ytick text").all_text_contents()
    assert ticks_y[0].endswith("(1)") and ticks_y[-1].endswith("(2)")
    # its settings go into the link and come back from it
    page.fill("#lab-ind-length", "20")
    page.fill("#lab-ind-heads", "2")
    page.click("#lab-ind-apply")
    ready(page)
    assert url_state(page)["rep"] == "20,0,2"
    expect(page.locator("#lab-ind-pattern option")).to_have_count(2)
    page.reload()
    ready(page)
    expect(page.locator("#lab-ind-length")).to_have_value("20")
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-ind-verdict")).to_contain_text("关闭归纳头使第二遍的损失升高")
    page.select_option("#model", "pronounce")
    ready(page)
    assert page.locator("#lab-experiment option[value=induction]").is_disabled()


def test_the_needle_lab_finds_the_retrieval_heads_and_loses_the_key_without_them(page: Page):
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}&view=lab&lab=needle&rep=384,50,5,0,5")
    ready(page)
    # what a person reads: where the key is, what the model answered, what switching off did
    expect(page.locator("#lab-hay-answer")).to_have_text(
        "The key 66048 sits at positions 177–182 of 384 tokens (50 % into the filler). "
        "Asked “What is the pass key? The pass key is”, the model answers “66048. Remember”: "
        "the key."
    )
    ablated = page.locator("#lab-hay-ablated").inner_text()
    assert ablated.startswith("With the top 5 retrieval heads off (L18 H6")
    assert "“672. The pass is”, not the key. With 5 random heads off (" in ablated
    assert ablated.endswith("“66048. Remember”, the key.")
    expect(page.locator("#lab-hay-verdict")).to_contain_text("the retrieval is theirs")
    rows = page.locator("#lab-hay-table tbody tr")
    expect(rows).to_have_count(10)
    expect(rows.first).to_contain_text("6 / 6")
    # the top head's weights over the prompt at the step that wrote "0": the needle shaded
    plot = page.locator("#lab-hay-plot")
    expect(plot.locator(".gtitle")).to_contain_text("L18 H6 at the step that wrote “0”")
    expect(plot.locator(".shapelayer path")).to_have_count(1)
    expect(page.locator("#lab-hay-profile option")).to_have_count(3)
    page.locator("#lab-hay-answer").scroll_into_view_if_needed()
    shot(page, "needle")
    page.select_option("#lab-hay-profile", "1")
    expect(plot).not_to_have_attribute("data-head", "L18 H6")
    # its settings come from the link (another run would take as long again), and a
    # change of experiment clears them
    expect(page.locator("#lab-hay-length")).to_have_value("384")
    expect(page.locator("#lab-hay-depth")).to_have_value("50")
    page.click("#lang-zh")
    ready(page)
    expect(page.locator("#lab-hay-verdict")).to_contain_text("检索是它们做的")
    page.select_option("#lab-experiment", "induction")
    ready(page)
    assert "rep" not in url_state(page)
    expect(page.locator("#lab-ind-length")).to_have_value("50")


def test_stop_ends_a_generation_within_a_step_and_shows_what_was_made(page: Page):
    """Stop is offered from the request to the last token; stopping keeps the tokens made
    so far, and the page shows their view as after any generation."""
    page.goto(f"/?model=smollm2&text={quote(PROMPT)}")
    ready(page)
    page.fill("#new-tokens", "64")
    page.evaluate(
        """() => {
          const out = document.getElementById("output-text");
          window.stopped = null;
          new MutationObserver(() => {
            const n = out.querySelectorAll(".generated").length;
            if (n === 2 && window.stopped === null) {
              window.stopped = n;
              document.getElementById("cancel-run").click();
            }
          }).observe(out, { childList: true });
        }"""
    )
    page.click("#run")
    stop = page.locator("#cancel-run")
    expect(stop).to_have_text("Stop")  # offered before its first token
    ready(page)
    made = len(url_state(page)["cont"].split(","))
    assert 2 <= made <= 3, made  # it ended within a step of the click
    expect(page.locator("#source-tokens button.generated")).to_have_count(made)
    expect(stop).to_be_hidden()
    expect(stop).to_have_text("Cancel")  # (the button is Cancel again for a long run)
    page.click("#lang-zh")
    page.fill("#new-tokens", "3")
    page.click("#run")
    expect(stop).to_have_text("停止")
    ready(page)
