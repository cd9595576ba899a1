"""The README's screenshot of the page, made by this test so that it shows the page as it
is: `make screenshot` writes it to docs/assets/page.png; in `make test` it is made in
out/e2e, and the one the README shows must be there, of the same size."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS
from .test_page import ready, ticks

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "page.png"
TEXT = "The animal didn't cross the street because it was too tired."
SIZE = {"width": 1280, "height": 800}


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def test_the_readmes_screenshot_is_the_head_view_of_smollm2(page: Page):
    page.set_viewport_size(SIZE)
    page.goto(f"/?model=smollm2&text={quote(TEXT)}")
    ready(page)
    assert "animal" in " ".join(ticks(page, "x"))  # what a person reads: the tokens
    expect(page.locator("#plot .main-svg").first).to_be_visible()
    # its next token is a line break: shown as ↵, not as an empty output line
    expect(page.locator("#output-text")).to_have_text("↵")
    write = os.environ.get("ATTNVIZ_DOCS_SCREENSHOT") == "1"
    path = DOCS_SHOT if write else ARTIFACTS / "readme_page.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=path)
    assert DOCS_SHOT.is_file(), "make screenshot writes the README's screenshot"
    assert png_size(DOCS_SHOT) == png_size(path) == (SIZE["width"], SIZE["height"])
