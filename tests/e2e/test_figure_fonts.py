"""The toolbar's PDF of a Chinese page keeps its script: the PDF plotly.js's SVG becomes
embeds a CJK font and carries the Chinese title and tokens as text (the pixels are
checked against Chromium's drawing of the same SVG in tests/app/test_figures.py)."""

from __future__ import annotations

import subprocess

from playwright.sync_api import Page, expect

from .test_page import ready, ticks


def test_the_pdf_of_a_chinese_page_embeds_a_cjk_font(page: Page, tmp_path):
    page.goto("/?model=pronounce&text=狗追猫&type=decoder.cross&layer=2&head=5&view=head&lang=zh")
    ready(page)
    title = "交叉注意力 · 层 2 · 头 5"
    expect(page.locator("#plot .gtitle")).to_have_text(title)
    tokens = [t for t in ticks(page, "x") if not t.isascii()]
    assert tokens, ticks(page, "x")
    page.locator("#plot").hover()
    with page.expect_download() as download:
        page.locator('#plot .modebar-btn[data-title*="PDF"]').click()
    pdf = tmp_path / "figure.pdf"
    download.value.save_as(pdf)
    listed = subprocess.run(
        ["fc-list", ":lang=zh", "family"], capture_output=True, text=True, check=True
    ).stdout
    cjk = {line.split(",")[0].replace(" ", "") for line in listed.splitlines() if line}
    assert cjk, "no Chinese font is installed: apt-get install fonts-wqy-zenhei (Debian)"
    # pdffonts' rows end "emb sub uni object-id generation"; a subset is "TAG+PostScriptName"
    fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in fonts.stdout.splitlines()[2:]]
    assert {row[0].split("+")[-1] for row in rows if row[-5] == "yes"} & cjk, fonts.stdout
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert title in text and all(token in text for token in tokens), (text, tokens)
