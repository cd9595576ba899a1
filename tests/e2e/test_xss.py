"""Hostile text in the page, and the page under its Content-Security-Policy.

Every string below is typed into the page and carried by the URL (as the text, and in the
other keys a link may set), for the per-character model (pronounce) and the WordPiece one
(minilm): no element is made from it, no dialog opens, nothing throws, the policy is never
violated, and the text shows literally in the source line, the tick labels, the hover label
and the readout line. One browser context serves the whole file.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from urllib.parse import parse_qs, quote, urlencode, urlparse

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import block_outside

READY = re.compile(r"^(Ready\.|完成。)$")
MAX_TICKS = 64  # static/js/plots.js: past this many labels every k-th one is shown

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    "<body onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<iframe src="javascript:alert(1)"></iframe>',
    '<object data="javascript:alert(1)"></object><embed src="javascript:alert(1)">',
    '<a href="javascript:alert(1)">x</a>',
    "javascript:alert(1)",
    '<span style="color:red;font-size:80px">big</span>',
    "<style>*{display:none}</style>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#x3C;b&#x3E;bold&#x3C;/b&#x3E; &amp; &quot; &#39; &nbsp;",
    r"$\href{javascript:alert(1)}{x}$",
    "a<br>b<sub>2</sub><sup>3</sup><i>i</i><b>b</b><em>e</em>",
    "{{7*7}} ${alert(1)} #{7*7} <%= 7*7 %>",
    "%{text} %{x} %{z:.3f} <extra>x</extra>",
    "'\" \\ \\\\ \\\" ` '-alert(1)-'",
    "</script><script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg/onload=alert(1)>",
    "<details open ontoggle=alert(1)>",
    "<input autofocus onfocus=alert(1)>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    "\u202e<b>gnp.exe\u202c ＜script＞ <\u200bscript> e\u0301 😀",
    "<base href=//evil.example/><meta http-equiv=refresh content=0;url=javascript:alert(1)>",
    "<form action=javascript:alert(1)><button>x</button></form>",
]
# a label worth hovering: one that plotly.js or HTML would read as markup
MARKUP = set("<>&\"'\\$%{}`")

# Every security-policy violation, from the document's own event and from the console.
WATCH = """
document.addEventListener("securitypolicyviolation", (e) => window.__cspViolation(
  `${e.violatedDirective} ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));
"""

# What the page is made of: tags outside plotly's drawings, and inside them anything that
# only markup in a label could make (links, styled or broken lines, foreign content).
FINGERPRINT = """() => {
  const drawn = (el) => el.closest(".js-plotly-plot, #js-plotly-tester");
  const tags = {};
  const bad = [];
  for (const el of document.querySelectorAll("*")) {
    // plotly.js puts <style> elements of its own into <head> once it has loaded
    // (nor the page's own marks between a transcription's pieces, made for a long text)
    const counted = !drawn(el) && !(el.parentNode === document.head && el.tagName === "STYLE")
      && !el.matches("span.piece-mark");
    for (const { name, value } of el.attributes) {
      const v = value.replace(/[\\s\\u0000-\\u001f]/g, "").toLowerCase();
      if (name.toLowerCase().startsWith("on")) bad.push(`${el.tagName}[${name}]`);
      const link = /href$|^(src|srcdoc|action|formaction|data|poster|background)$/i.test(name);
      const runs = /^(javascript|vbscript|data:text\\/html)/.test(v);
      if (link && runs) bad.push(`${el.tagName}[${name}=${value}]`);
    }
    if (counted) tags[el.tagName] = (tags[el.tagName] || 0) + 1;
  }
  const inside = (selector) => [...document.querySelectorAll(".js-plotly-plot, #js-plotly-tester")]
    .reduce((n, plot) => n + plot.querySelectorAll(selector).length, 0);
  return {
    tags, bad,
    links: inside("a"),
    styled: inside("tspan[style], text a, text tspan.line"),
    foreign: inside("foreignObject, script, iframe, object, embed, img, style, b, i"),
    children: ["source-tokens", "output-text", "status", "readout"]
      .map((id) => [...document.getElementById(id).children]
        .filter((child) => !child.matches("span.piece-mark")).length),
  };
}"""

# a link followed within the page, as the browser's back and forward buttons do
FOLLOW = """(url) => {
  history.pushState(null, "", url);
  window.dispatchEvent(new PopStateEvent("popstate"));
}"""
STYLED = "a, tspan[style], tspan.line, foreignObject"  # what pseudo-HTML in a label makes


def settled(page: Page, selector: str, good: Callable[[str], object], timeout: float = 60) -> str:
    """The element's text once `good` accepts it, polled every 20 ms (expect() backs off to
    a second between tries, which a few hundred page loads would pay many times over)."""
    deadline = time.monotonic() + timeout
    while True:
        text = page.locator(selector).text_content()
        if good(text):
            return text
        assert time.monotonic() < deadline, f"{selector}: {text!r}"
        time.sleep(0.02)


def ready(page: Page) -> None:
    settled(page, "#status", READY.match)


def ticks(page: Page, axis: str, plot: str = "#plot") -> list[str]:
    return page.locator(f"{plot} .{axis}tick text").all_text_contents()


def thinned(plot: Locator, axis: str, labels: list[str]) -> list[str]:
    """The labels a plot's axis shows: every k-th from the first, k at least what keeps them
    to MAX_TICKS (more where a short plot has no room for a line each: plots.js axis)."""
    at = plot.evaluate("(gd, axis) => gd.layout[axis + 'axis'].tickvals", axis)
    stride = at[1] - at[0] if len(at) > 1 else max(len(labels), 1)
    assert stride >= -(-len(labels) // MAX_TICKS), (axis, stride)
    assert at == list(range(0, len(labels), stride)), (axis, at)
    return [labels[i] for i in at]


def hover(page: Page, x: int, y: int, named: str, plot: str = "#plot") -> None:
    """Point the mouse at cell (x, y) of a heatmap until the tooltip names it (pointed at
    again while it does not: plotly.js may still redraw once for automargin)."""
    tooltip = page.locator(f"{plot} .hovertext")
    shown = None
    for attempt in range(250):
        point = page.locator(plot).evaluate(
            """(gd, [x, y]) => {
              const { xaxis, yaxis } = gd._fullLayout;
              const drag = gd.querySelector(".nsewdrag");
              const off = drag.getBoundingClientRect().top + yaxis.l2p(y) - innerHeight / 2;
              if (Math.abs(off) > innerHeight / 2 - 20) scrollBy(0, off);  // cell off screen
              const box = drag.getBoundingClientRect();
              return [box.left + xaxis.l2p(x), box.top + yaxis.l2p(y)];
            }""",
            [x, y],
        )
        page.mouse.move(point[0] + attempt % 2 * 0.5, point[1])
        shown = tooltip.text_content() if tooltip.count() else None
        if shown and named in shown:
            return
        time.sleep(0.02)
    raise AssertionError(f"cell {x}, {y}: the tooltip shows {shown!r}, not {named!r}")


def url_state(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def link(**params: str) -> str:
    return "/?" + urlencode(params, quote_via=quote)


@pytest.fixture(scope="module")
def xss(browser, server, outside_requests):
    """One page for the file; dialogs, page errors and CSP violations are collected."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=server)
    block_outside(context, outside_requests)
    page = context.new_page()
    page.dialogs, page.errors, page.violations, page.baselines = [], [], [], {}
    context.expose_function("__cspViolation", lambda v: page.violations.append(v))
    context.add_init_script(WATCH)
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on(
        "console",
        lambda m: "Content Security Policy" in m.text and page.violations.append(m.text),
    )
    yield page
    context.close()


def assert_quiet(page: Page, what: str) -> None:
    assert page.dialogs == [], f"{what!r}: a dialog opened: {page.dialogs}"
    assert page.errors == [], f"{what!r}: the page threw: {page.errors}"
    assert page.violations == [], f"{what!r}: CSP violations: {page.violations}"


def baseline(page: Page, model: str, **params: str) -> dict:
    """The fingerprint of the same view of a harmless text, taken once per view."""
    key = (model, tuple(sorted(params.items())))
    if key not in page.baselines:
        page.goto(link(model=model, text="hello world", **params))
        ready(page)
        page.baselines[key] = page.evaluate(FINGERPRINT)
    return page.baselines[key]


def attention(page: Page, model: str, text: str, type_: str, kind: str) -> dict:
    """One block of the attention answer (layer 0), asked for straight from the API."""
    body = {"model": model, "text": text, "types": [type_], "layers": [0], "kinds": [kind]}
    return page.request.post("/api/v1/attention", data=body).json()["blocks"][0]


def is_answer(path: str) -> Callable:
    return lambda response: urlparse(response.url).path == f"/api/v1/{path}"


def drawn(page: Page, action: Callable[[], object], text: str) -> tuple[list, list, list, list]:
    """Do `action`; the source tokens, the rows' labels and names, and the columns the page
    was sent to draw."""
    with (
        page.expect_response(is_answer("analyze")) as analyzed,
        page.expect_response(is_answer("attention")) as attended,
    ):
        action()
    for answer in (analyzed.value, attended.value):
        assert answer.ok and json.loads(answer.request.post_data)["text"] == text
    block = attended.value.json()["blocks"][0]
    # the rows' labels: cross-attention's are what each decoder step predicts, and the
    # hover names a decoder step by both its tokens (views/head.js rowLabels)
    predicted = block.get("predicted")
    rows = predicted if predicted and block["type"] == "decoder.cross" else block["rows"]
    names = block["rows"]
    if predicted:
        steps = zip(block["rows"], predicted, strict=True)
        names = [f"step {i}: fed {fed}, predicts {p}" for i, (fed, p) in enumerate(steps)]
    return analyzed.value.json()["source_tokens"], rows, names, block["columns"]


def assert_literal(page: Page, model: str, text: str, sent: tuple, clean: dict) -> None:
    """The text is shown as text everywhere, and no element was made from it."""
    source, rows, names, columns = sent
    if text.isascii() and text.isprintable():  # the tokens really are the text
        if model == "pronounce":
            assert "".join(source) == text.lower().replace(" ", "␣")  # a space shown as ␣
        else:
            pieces = "".join(t.removeprefix("##") for t in source[1:-1])
            assert pieces == "".join(text.lower().split())
    ready(page)
    assert page.locator("#source-tokens").text_content() == " · ".join(source), text
    assert ticks(page, "x") == thinned(page.locator("#plot"), "x", columns), text
    assert ticks(page, "y") == thinned(page.locator("#plot"), "y", rows), text
    assert page.evaluate(FINGERPRINT) == clean, text
    # hover a cell that reads like markup, "< → >" where there is one: the tooltip and the
    # readout name it (plots.js names tokens up to 200 x 200 cells, positions past that)
    assert len(rows) * len(columns) <= 200 * 200, text
    row = next((i for i, r in enumerate(rows) if "<" in r), 0)
    col = next((j for j, c in enumerate(columns) if ">" in c), None)
    if col is None:
        col = next((j for j, c in enumerate(columns) if set(c) & MARKUP), 0)
    named = f"{names[row]} → {columns[col]}: "
    hover(page, col, row, named)
    shown = settled(page, "#readout", lambda shown: shown.startswith(named), timeout=5)
    assert re.fullmatch(re.escape(named) + r"[01]\.\d{3}", shown), text
    assert page.locator(f"#plot .hoverlayer :is({STYLED})").count() == 0, text
    assert_quiet(page, text)


def test_hostile_labels_render_as_text_in_ticks_hover_and_readout(xss: Page):
    """Whole strings as labels of the page's own heatmap (the models' tokens come split)."""
    clean = baseline(xss, "pronounce")
    labels = [p for p in PAYLOADS if p.isprintable()]
    for rows, columns in ((["q"], labels), (labels, ["k"])):
        xss.evaluate(
            """async ([rows, columns]) => {
              const { heatmap } = await import("/static/js/plots.js");
              await heatmap(document.getElementById("plot"), {
                z: rows.map(() => columns.map(() => 1)), rows, columns, title: "",
                zmin: 0, zmax: 1, valueLabel: "w", readout: document.getElementById("readout"),
              });
            }""",
            [rows, columns],
        )
        assert ticks(xss, "x") == columns
        assert ticks(xss, "y") == rows
        assert xss.evaluate(FINGERPRINT) == clean
        for i, label in enumerate(labels):
            x, y = (i, 0) if columns is labels else (0, i)
            named = f"{rows[y]} → {columns[x]}: 1.000"
            hover(xss, x, y, named)
            settled(xss, "#readout", lambda shown, named=named: shown == named, timeout=5)
            assert xss.locator(f"#plot .hoverlayer :is({STYLED})").count() == 0, label
    assert_quiet(xss, "labels")


def test_typed_hostile_text_stays_text(xss: Page):
    """Each string typed into the text box and sent with Enter, several a text, as the
    link test sends them: minilm's, its merged words as labels (the box is the same for
    every model, and pronounce's answers to the same strings, every syllable decoded, are
    read by the link test: typed too, they took 44 s of a loaded suite)."""
    model, words = "minilm", {"words": "1"}
    clean = baseline(xss, model, **words)
    xss.goto(link(model=model, **words))
    ready(xss)  # (a first load draws the model's first example: its answer comes first)
    for payload in batches(250):
        xss.fill("#text", payload)
        sent = xss.input_value("#text")  # what a text input keeps of it
        answers = drawn(xss, lambda: xss.press("#text", "Enter"), sent)
        assert url_state(xss)["text"] == sent
        assert_literal(xss, model, sent, answers, clean)


def batches(limit: int) -> list[str]:
    """The strings joined into texts of at most `limit` characters."""
    texts, group = [], []
    for payload in PAYLOADS:
        if group and len(" ".join([*group, payload])) > limit:
            texts.append(" ".join(group))
            group = []
        group.append(payload)
    return [*texts, " ".join(group)]


@pytest.mark.parametrize("model", ["pronounce", "minilm"])
def test_hostile_text_in_a_link_stays_text(xss: Page, model: str):
    """The strings in a shared link: the text, and every other key, which falls back."""
    clean = baseline(xss, model)
    # several strings a link, in the text and in every other key a link may carry (pronounce
    # reads 128 characters; past 200 x 200 cells the tooltip shows positions, not tokens)
    for text in batches(120 if model == "pronounce" else 250):
        others = dict.fromkeys(["type", "layer", "head", "view", "kind", "lang", "avg"], text)
        if model == "minilm":
            others |= {"compare": text, "words": text, "hide": text}
        url = link(model=model, text=text, **others)
        answers = drawn(xss, lambda url=url: xss.goto(url), text)
        ready(xss)
        state = url_state(xss)
        assert state["text"] == text and xss.input_value("#text") == text
        assert (state["view"], state["kind"], state["layer"], state["head"]) == (
            "head",
            "weights",
            "0",
            "0",
        )  # each fell back to its default
        assert state["type"] == xss.locator("#type").input_value() != text
        if model == "minilm":
            assert state["compare"] == text and xss.input_value("#compare") == text
            settled(xss, "#output-text", lambda shown: "cosine similarity" in shown)
        assert_literal(xss, model, text, answers, clean)


def test_a_hostile_model_name_in_a_link_is_an_error_shown_as_text(xss: Page):
    """The first links are loaded; the rest are followed the way back and forward follow
    them (the page reads the same URL state without reloading plotly.js each time)."""
    clean = None
    for i, payload in enumerate(["no-such-model", *PAYLOADS]):
        url = link(model=payload, text="abc")
        with xss.expect_response(is_answer("analyze")) as analyzed:
            if i < 4:
                xss.goto(url)
            else:
                xss.evaluate(FOLLOW, url)
        assert analyzed.value.status in (404, 422)
        detail = analyzed.value.json()["detail"]
        if isinstance(detail, str):
            shown = settled(xss, "#status.error", lambda shown, d=detail: d in shown)
            assert shown.endswith(detail), payload
        else:
            settled(xss, "#status.error", lambda shown, d=detail: all(e["msg"] in shown for e in d))
        assert url_state(xss)["model"] == payload
        found = xss.evaluate(FINGERPRINT)
        clean = clean or found  # the first, harmless name's error page
        assert found == clean, payload
        assert_quiet(xss, payload)


@pytest.mark.parametrize("model", ["pronounce", "minilm"])
def test_hostile_text_in_the_masks_view_stays_text(xss: Page, model: str):
    """The masks view draws the tokens in up to four heatmaps of its own."""
    clean = baseline(xss, model, view="masks")
    text = " ".join(p for p in PAYLOADS if len(p) < 30)[:120]  # within pronounce's 128
    xss.goto(link(model=model, text=text, view="masks"))
    ready(xss)
    answer = xss.request.post("/api/v1/analyze", data={"model": model, "text": text}).json()
    assert xss.locator("#source-tokens").text_content() == " · ".join(answer["source_tokens"])
    plots = xss.locator("#grid .mask-plot")
    for i in range(plots.count()):
        type_ = plots.nth(i).get_attribute("data-type")
        if type_ == "causal":  # drawn from the output tokens alone
            rows = columns = answer["target_tokens"]
        else:
            item = attention(xss, model, text, type_, "mask")
            rows, columns = item["rows"], item["columns"]
        for axis, labels in (("x", columns), ("y", rows)):
            shown = plots.nth(i).locator(f".{axis}tick text").all_text_contents()
            assert shown == thinned(plots.nth(i), axis, labels), (type_, axis)
    assert xss.evaluate(FINGERPRINT) == clean
    assert_quiet(xss, text)


def test_hostile_text_in_the_lab_stays_text(xss: Page):
    """The lab's comparison draws the text and the link's second text (`other`) side by side;
    the lab's other keys carry the strings too."""
    clean = baseline(xss, "pronounce", view="lab", lab="compare", other="hello")
    texts = batches(120)
    for first, second in zip(texts[::2], [*texts[1::2], texts[0]], strict=True):
        keys = {"view": "lab", "lab": "compare", "other": second, "step": first, "ablate": first}
        with xss.expect_response(is_answer("lab/compare")) as compared:
            xss.goto(link(model="pronounce", text=first, **keys))
        ready(xss)
        answer = compared.value.json()
        assert xss.input_value("#lab-other") == url_state(xss)["other"] == second
        plots = xss.locator("#lab-out .plot")
        for i, side in enumerate(("first", "second")):
            # cross-attention rows are named by what each step predicts (lab/shared.js)
            cross = answer["type"] == "decoder.cross"
            rows = answer[f"{side}_predicted"] if cross else answer[f"{side}_rows"]
            for axis, labels in (("x", answer[f"{side}_columns"]), ("y", rows)):
                shown = plots.nth(i).locator(f".{axis}tick text").all_text_contents()
                assert shown == thinned(plots.nth(i), axis, labels), (side, axis, first)
        assert xss.evaluate(FINGERPRINT) == clean, first
        assert_quiet(xss, first)
    # a second model no one has: ignored (the same model is compared), nothing made of it
    xss.goto(link(text="abc", view="lab", lab="compare", vs=PAYLOADS[1]))
    ready(xss)
    assert xss.locator("#lab-other-model").input_value() == ""
    assert xss.locator("#lab-out .plot .main-svg").count() >= 2
    assert_quiet(xss, "vs")


def test_the_csp_header_allows_only_same_origin_scripts(xss: Page):
    response = xss.goto("/")
    policy = dict(
        (d.split()[0], d.split()[1:])
        for d in response.headers["content-security-policy"].split(";")
    )
    assert policy["script-src"] == ["'self'"] and policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_the_csp_stops_markup_that_would_run(xss: Page):
    """Were markup ever injected, the browser refuses to run it (and the watch sees it)."""
    xss.goto("/")
    ran = xss.evaluate(
        """() => new Promise((resolve) => {
          window.__ran = [];
          const script = document.createElement("script");
          script.textContent = "window.__ran.push('inline script')";
          document.body.append(script);
          const box = document.createElement("div");
          box.innerHTML = `<img src="data:," onerror="window.__ran.push('onerror')">`;
          document.body.append(box);
          const a = document.createElement("a");
          a.href = "javascript:window.__ran.push('javascript: link')";
          document.body.append(a);
          a.click();
          setTimeout(() => resolve(window.__ran), 300);
        })"""
    )
    assert ran == []
    seen = " ".join(xss.violations)
    assert "script-src-elem" in seen and "script-src-attr" in seen, xss.violations
    xss.violations.clear()
    assert xss.dialogs == [] and xss.errors == []


def test_every_view_and_download_works_under_the_csp(xss: Page):
    """The page's own scripts, plotly.js and its PNG/SVG export, the capture download and
    every view and lab experiment, with not one violation of the policy."""
    xss.goto("/?text=猫追狗")
    ready(xss)
    xss.locator("#plot .nsewdrag").hover()
    expect(xss.locator("#readout")).to_contain_text("→")
    for title, head in (("PNG", b"\x89PNG"), ("SVG", b"<svg")):  # plotly's modebar
        with xss.expect_download() as download:
            xss.locator(f"#plot .modebar-btn[data-title*='{title}']").click()
        # named after what it shows: model, attention type, layer, head, kind
        name = f"attnviz-pronounce-decoder.cross-L2-H1-weights.{title.lower()}"
        assert download.value.suggested_filename == name
        assert download.value.path().read_bytes()[:4] == head
    with xss.expect_download() as download:
        xss.click("#export")
    assert download.value.path().read_bytes()[:2] == b"PK"  # .npz: a zip of arrays
    xss.select_option("#kind", "scores")
    ready(xss)
    xss.check("#overlay")
    ready(xss)
    xss.check("#average")
    ready(xss)
    xss.click("[data-view=model]")
    ready(xss)
    xss.locator("#grid .thumb").nth(3).click()
    ready(xss)
    for view in ("masks", "positional", "lab"):
        xss.click(f"[data-view={view}]")
        ready(xss)
    experiments = xss.locator("#lab-experiment option:not([disabled])").evaluate_all(
        "os => os.map(o => o.value)"
    )
    for experiment in experiments[1:]:  # every experiment of the lab, drawn in place
        xss.select_option("#lab-experiment", experiment)
        ready(xss)
        assert url_state(xss)["lab"] == experiment
    # the experiments only a model that generates runs (pronounce offers them disabled)
    for experiment in ("induction", "kv-cache"):
        xss.goto(f"/?model=smollm2&text=The capital of France is&view=lab&lab={experiment}")
        ready(xss)
        expect(xss.locator("#lab-out .plot .main-svg").first).to_be_visible()
    xss.click("#lang-zh")
    ready(xss)
    xss.goto("/?model=minilm&text=Tokenization helps.&compare=It helps.&words=1&hide=1")
    ready(xss)
    assert ticks(xss, "x") == ["tokenization", "helps", "."]
    xss.click("#lang-en")
    ready(xss)
    assert_quiet(xss, "every view")
