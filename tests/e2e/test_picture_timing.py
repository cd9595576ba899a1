"""The picture's overlay follows the pointer within a frame: hovering each patch of a
sample picture's row redraws its attention in at most 50 ms (the page's own performance
marks). Run alone (tests/conftest.py's ALONE): beside another worker's tests a redraw
took 57 ms on two cores."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from .test_page import ready
from .test_pictures import overlay_worst_ms, vit_page, vit_server  # noqa: F401  (fixtures)

HOVER_MS = 50  # a frame: the overlay redrawn for the patch under the pointer


def test_the_overlay_follows_the_pointer_within_a_frame(vit_page: Page):  # noqa: F811
    page = vit_page
    page.goto("/?model=vit&lang=en")
    page.get_by_role("button", name="Sample: a street").click()
    ready(page)
    canvas = page.locator("#picture-main canvas")
    box = canvas.bounding_box()
    assert box is not None
    for row in range(4):
        for column in range(4):
            page.mouse.move(
                box["x"] + box["width"] * (column + 0.5) / 4,
                box["y"] + box["height"] * (row + 0.5) / 4,
            )
    expect(page.locator("#readout")).to_contain_text("▦ 3,3 looks at")
    worst = overlay_worst_ms(page)
    print(f"the overlay's worst redraw: {worst:.1f} ms")  # (the figure the issue asks)
    assert 0 < worst <= HOVER_MS, f"the overlay took {worst:.1f} ms"
