"""The page's layout at a phone's width and a desktop's, in English and Chinese, measured
from the DOM and the plots' SVG: axis labels never overlap, every select shows its value,
the citation leaves each control usable, the lines view's labels are whole and clear of
its key of heads, plotly.js's zoom notice never covers the controls."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .test_page import ready

SIZES = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1440, "height": 900}}
CASES = [(size, lang) for size in SIZES for lang in ("en", "zh")]
# each word one MiniLM token: n - 2 of them and [CLS], [SEP] are n tokens
WORDS = ("the quick brown fox jumps over the lazy dog because it was tired and then " * 9).split()

# the pairs of an axis's tick labels whose boxes overlap (by more than half a pixel)
OVERLAPS = """(plot, axis) => {
  const boxes = [...plot.querySelectorAll(`.${axis}tick text`)].map((t) => [
    t.textContent, t.getBoundingClientRect()]);
  const hit = [];
  boxes.forEach(([a, p], i) => boxes.slice(i + 1).forEach(([b, q]) => {
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (w > 0.5 && h > 0.5) hit.push(`${a} / ${b}`);
  }));
  return [boxes.length, hit];
}"""

# each shown select's options (those one may choose) that it is too narrow to show: the
# width the browser gives a select of that option alone against the width it has
CUT_OPTIONS = """() => [...document.querySelectorAll("#controls select")]
  .filter((s) => s.offsetParent)
  .flatMap((s) => [...s.options].filter((o) => !o.hidden && !o.disabled).map((o) => {
    const probe = s.cloneNode(false);
    probe.removeAttribute("id");
    probe.style.cssText = "width:auto;min-width:0;max-width:none;position:absolute";
    probe.append(new Option(o.text));
    document.body.append(probe);
    const needs = probe.getBoundingClientRect().width;
    probe.remove();
    const has = s.getBoundingClientRect().width;
    return needs > has + 0.5 ? `${s.id}: "${o.text}" needs ${needs} px, has ${has}` : null;
  }))
  .filter(Boolean)"""

# every shown control of #controls (a checkbox: its label, what one clicks) and the
# citation: [name, width, height, overlaps the plot]
CONTROLS = """() => {
  const plot = document.getElementById("plot").getBoundingClientRect();
  const shown = document.querySelectorAll(
    "#controls select, #controls button, #controls label.check, #cite");
  return [...shown].filter((e) => e.offsetParent).map((e) => {
    const b = e.getBoundingClientRect();
    const over = b.right > plot.left && b.left < plot.right && b.bottom > plot.top
      && b.top < plot.bottom;
    return [e.id || e.textContent.trim(), b.width, b.height, over];
  });
}"""

# the lines view's labels: [text, clipped away (any part outside the figure, or outside
# the plot area where a clip-path clips it), the names of the key boxes it meets]; the
# texts of the key boxes (plotly.js's legend, the title's lines) not wholly in the figure
LINE_LABELS = """(plot) => {
  const svg = plot.querySelector(".main-svg").getBoundingClientRect();
  const { l, t, w, h } = plot._fullLayout._size;
  const area = { left: svg.left + l, top: svg.top + t, right: svg.left + l + w,
    bottom: svg.top + t + h };
  const inside = (b, r) => b.left >= r.left - 0.5 && b.right <= r.right + 0.5
    && b.top >= r.top - 0.5 && b.bottom <= r.bottom + 0.5;
  const meets = (p, q) => Math.min(p.right, q.right) - Math.max(p.left, q.left) > 0.5
    && Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 0.5;
  const keys = [...plot.querySelectorAll(".legend .bg, .gtitle")];
  const labels = [...plot.querySelectorAll(".textpoint text")].map((text) => {
    const b = text.getBoundingClientRect();
    const clipped = !inside(b, svg) || (text.closest("[clip-path]") && !inside(b, area));
    const met = keys.filter((k) => meets(b, k.getBoundingClientRect()));
    return [text.textContent, clipped, met.map((k) => k.getAttribute("class"))];
  });
  const cut = keys.filter((k) => !inside(k.getBoundingClientRect(), svg));
  return { labels, cut: cut.map((k) => k.textContent) };
}"""


def chinese(page: Page, lang: str) -> None:
    if lang == "zh":
        page.click("#lang-zh")
        expect(page.locator("#run")).to_have_text("运行")
        ready(page)


@pytest.mark.parametrize(("size", "lang"), CASES)
def test_head_view_axis_labels_never_overlap_and_a_zoom_leaves_the_controls_clear(
    page: Page, size: str, lang: str
):
    page.set_viewport_size(SIZES[size])
    for n in (8, 16, 64, 128):
        page.goto(f"/?model=minilm&type=encoder.self&lang={lang}&text={' '.join(WORDS[: n - 2])}")
        ready(page)
        plot = page.locator("#plot")
        assert plot.evaluate("gd => gd.data[0].z.length") == n
        for axis in ("x", "y"):
            labelled, overlapping = plot.evaluate(OVERLAPS, axis)
            # thinned, not emptied: at least 16 tokens named (every token, where fewer)
            assert labelled >= min(n, 16), (n, axis, labelled)
            assert overlapping == [], (n, axis, overlapping)
    # a resized window (a turned phone): its labels fitted again, once plotly.js has
    # resized the plot
    page.set_viewport_size(SIZES["desktop" if size == "phone" else "phone"])
    page.wait_for_function(
        f"""() => {{
          const gd = document.getElementById("plot");
          const svg = gd.querySelector(".main-svg").getBoundingClientRect().width;
          const fits = (axis) => ({OVERLAPS})(gd, axis)[1].length === 0;
          return Math.abs(svg - gd.clientWidth) < 1 && fits("x") && fits("y");
        }}""",
        timeout=10_000,
    )
    # a zoom (drag a box): plotly.js's "Double-click to zoom back out" note, top right of
    # the page over the Run/Generate button, is not shown
    shown = "String(document.getElementById('plot')._fullLayout.xaxis.range)"
    whole = page.evaluate(shown)
    box = page.locator("#plot .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + 10, box["y"] + 10)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    assert page.evaluate(shown) != whole  # zoomed in
    page.wait_for_timeout(500)  # (the note fades in at once, and out after some seconds)
    assert page.locator(".plotly-notifier .notifier-note").count() == 0


@pytest.mark.parametrize(("size", "lang"), CASES)
def test_selects_show_their_values_and_the_citation_leaves_every_control_usable(
    page: Page, size: str, lang: str
):
    page.set_viewport_size(SIZES[size])
    # the default model: its three attention types (the longest names), value-weighted
    page.goto("/?text=猫追狗&type=decoder.cross&kind=norms")
    ready(page)
    chinese(page, lang)
    assert page.evaluate(CUT_OPTIONS) == []
    page.click("#cite-view")
    expect(page.locator("#cite")).to_be_visible()
    controls = page.evaluate(CONTROLS)
    assert len(controls) >= 10, controls  # 4 selects, 2 checks, 3 buttons, the citation
    unusable = [c for c in controls if c[1] <= 40 or c[2] <= 16 or c[3]]
    assert unusable == [], unusable
    assert page.evaluate(CUT_OPTIONS) == []
    # the citation within the page's width, every control still works
    assert page.evaluate("document.documentElement.scrollWidth") <= SIZES[size]["width"]
    page.select_option("#head", "3")
    ready(page)
    expect(page.locator("#plot .gtitle")).to_contain_text("3")


@pytest.mark.parametrize(("size", "lang"), CASES)
def test_the_lines_view_shows_whole_labels_clear_of_its_key_of_heads(
    page: Page, size: str, lang: str
):
    page.set_viewport_size(SIZES[size])
    heads = ",".join(str(h) for h in range(12))  # every head: the key's most entries
    text = "the original fox jumps because it was tired"
    page.goto(f"/?model=minilm&view=lines&type=encoder.self&lh={heads}&lang={lang}&text={text}")
    ready(page)
    drawn = page.locator("#plot").evaluate(LINE_LABELS)
    tokens = ["[CLS]", *text.split(), "[SEP]"]
    assert [label[0] for label in drawn["labels"]] == tokens * 2  # queries, then keys
    assert [label for label in drawn["labels"] if label[1] or label[2]] == []
    assert drawn["cut"] == []
    assert page.evaluate(CUT_OPTIONS) == []
