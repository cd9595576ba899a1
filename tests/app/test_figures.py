"""POST /api/v1/figure/pdf: a plot's SVG as a PDF (CairoSVG), read back by poppler's
pdftotext and pdftoppm; nothing outside the SVG is read, bad bodies get a 4xx."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SVG = b"""<svg xmlns="http://www.w3.org/2000/svg" width="200" height="80">
<rect width="200" height="80" fill="#440154"/>
<text x="10" y="40" font-size="16" fill="white">Layer 2 \xc2\xb7 Head 3</text></svg>"""


@pytest.fixture(scope="module")
def poppler():
    if not shutil.which("pdftoppm"):
        pytest.fail("Debian's poppler-utils is not installed: `make test` installs it (as root)")


def test_an_svg_becomes_a_pdf_that_renders_with_its_text(client, poppler, tmp_path):
    answer = client.post(
        "/api/v1/figure/pdf", content=SVG, headers={"content-type": "image/svg+xml"}
    )
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/pdf"
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(answer.content)
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert "Layer 2 · Head 3" in text
    subprocess.run(["pdftoppm", "-png", "-r", "50", str(pdf), str(tmp_path / "page")], check=True)
    assert (tmp_path / "page-1.png").stat().st_size > 200


def test_nothing_outside_the_svg_is_read_and_bad_bodies_are_refused(client, poppler, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    xxe = (
        f'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY s SYSTEM "file://{secret}">]>'
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'width="100" height="50"><text x="5" y="20">&s;</text>'
        f'<image href="file://{secret}" width="10" height="10"/></svg>'
    ).encode()
    answer = client.post(
        "/api/v1/figure/pdf", content=xxe, headers={"content-type": "image/svg+xml"}
    )
    if answer.status_code == 200:  # (drawn without the entity, or refused: never read)
        pdf = tmp_path / "x.pdf"
        pdf.write_bytes(answer.content)
        said = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True)
        assert "TOPSECRET" not in said.stdout
    else:
        assert answer.status_code == 422 and "TOPSECRET" not in answer.text
    for body in (b"hello", b"<svg xmlns='http://www.w3.org/2000/svg'><rect"):
        refused = client.post(
            "/api/v1/figure/pdf", content=body, headers={"content-type": "image/svg+xml"}
        )
        assert refused.status_code == 422 and refused.json()["detail"], body
    for image in (b"data:image/svg+xml;base64,PHN2Zz4=", b"data:image/png,%89PNG"):
        svg = figure(b'<image width="9" height="9" href="' + image + b'"/>')
        refused = client.post(
            "/api/v1/figure/pdf", content=svg, headers={"content-type": "image/svg+xml"}
        )
        assert refused.status_code == 422 and "images are PNG" in refused.json()["detail"]
    large = b"<svg>" + b" " * (9 * 2**20)
    too_large = client.post(
        "/api/v1/figure/pdf", content=large, headers={"content-type": "image/svg+xml"}
    )
    assert too_large.status_code == 413


def test_no_url_outside_the_svg_is_fetched(client, poppler):
    """An image at an http:// URL (a server's own network, SSRF) is never asked for."""
    import http.server
    import threading

    asked: list[str] = []

    class Counting(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/inside.png".encode()
        svg = (
            b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
            b' width="100" height="50"><image xlink:href="' + url + b'" width="50" height="50"/>'
            b'<image href="' + url + b'" width="50" height="50"/></svg>'
        )
        answer = client.post(
            "/api/v1/figure/pdf", content=svg, headers={"content-type": "image/svg+xml"}
        )
        assert answer.status_code == 422 and "nothing is fetched" in answer.json()["detail"]
        assert asked == []
    finally:
        server.shutdown()


def png(width: int, height: int) -> bytes:
    """A one-bit PNG of that size, base64 (a few kilobytes for millions of pixels)."""
    import base64
    import io

    from PIL import Image

    made = io.BytesIO()
    Image.new("1", (width, height)).save(made, "PNG")
    return base64.b64encode(made.getvalue())


def figure(body: bytes) -> bytes:
    return (
        b'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'
        b' width="100" height="100">' + body + b"</svg>"
    )


@pytest.mark.parametrize(
    "spelled",
    [
        b'<image width="100" height="100" href="data:image/png;base64,{png}"/>',
        b'<image width="9" height="9" href="data:image/png;x=y;base64,{png}"/>',  # a parameter
        b'<image width="9" height="9" href="&#100;ata:image/png;base64,{png}"/>',  # a reference
        b'<image width="9" height="9" href="DATA:image/PNG;base64,{png}"/>',
    ],
)
def test_an_image_of_too_many_pixels_is_refused_before_it_is_decoded(client, spelled):
    """A small PNG can declare a huge image (its bytes compress to nothing): refused from
    its header, however its data: URL is spelled, in well under the time decoding takes."""
    import time

    big = png(6000, 6000)  # 36 M pixels in a few kilobytes
    assert len(big) < 200_000
    start = time.monotonic()
    answer = client.post(
        "/api/v1/figure/pdf",
        content=figure(spelled.replace(b"{png}", big)),
        headers={"content-type": "image/svg+xml"},
    )
    assert answer.status_code == 422 and "36,000,000" in answer.json()["detail"]
    assert time.monotonic() - start < 2


def test_an_image_drawn_many_times_counts_each_time(client):
    """`<use>` draws an image again, decoding it again: the figure's pixels are counted in
    all. Two uses of a 3,000² image (9 M pixels each) pass 16.7 M; one is drawn."""
    image = b'<image id="i" width="50" height="50" href="data:image/png;base64,' + png(3000, 3000)
    once = client.post(
        "/api/v1/figure/pdf",
        content=figure(image + b'"/>'),
        headers={"content-type": "image/svg+xml"},
    )
    assert once.status_code == 200 and once.content.startswith(b"%PDF")
    used = image + b'"/>' + b'<use xlink:href="#i" x="50"/>' * 30
    answer = client.post(
        "/api/v1/figure/pdf", content=figure(used), headers={"content-type": "image/svg+xml"}
    )
    assert answer.status_code == 422 and "drawn twice counts twice" in answer.json()["detail"]


# plotly.js's title markup (its font-family, the one the page's figures name), in Chinese:
# six distinct characters, 40 px each, full-width in a CJK font
CHINESE = "编码器注意力"
CHINESE_SVG = f"""<svg xmlns="http://www.w3.org/2000/svg" width="300" height="80">
<rect width="300" height="80" style="fill: rgb(255, 255, 255);"/>
<text class="gtitle" x="20" y="55" style="font-family: 'Open Sans', verdana, arial, sans-serif;
 font-size: 40px; fill: rgb(0, 0, 0); white-space: pre;">{CHINESE}</text>
<text x="20" y="75" style="font-family: 'Open Sans', verdana, arial, sans-serif;
 font-size: 12px;">Layer 2 · Head 3</text></svg>""".encode()


@pytest.fixture(scope="module")
def cjk_families(poppler) -> list[str]:
    """The Chinese fonts fontconfig has (Debian's fonts-wqy-zenhei here and in the image)."""
    listed = subprocess.run(
        ["fc-list", ":lang=zh", "family"], capture_output=True, text=True, check=True
    ).stdout
    families = [line.split(",")[0] for line in listed.splitlines() if line]
    if not families:
        pytest.fail("no Chinese font is installed: apt-get install fonts-wqy-zenhei (Debian)")
    return families


def ink(png, box: tuple[int, int, int, int]):
    """A rendering's ink (0 white .. 1 black) in a box of it, 2 x 2 px blocks averaged (a
    pixel's offset between two renderers is not a difference of glyph)."""
    import numpy as np
    from PIL import Image

    grey = np.asarray(Image.open(png).convert("L").crop(box), dtype=float)
    height, width = grey.shape[0] // 2 * 2, grey.shape[1] // 2 * 2
    blocks = grey[:height, :width].reshape(height // 2, 2, width // 2, 2).mean(axis=(1, 3))
    return 1 - blocks / 255


def test_chinese_is_drawn_in_an_embedded_cjk_font_as_chromium_draws_the_svg(
    client, cjk_families, tmp_path
):
    """CairoSVG drew a text in the one face fontconfig gives its first font name (DejaVu
    Sans for plotly's "Open Sans"), Chinese as boxes: the PDF embeds a CJK font for the
    Chinese text, and its rendering (poppler) shows the characters Chromium draws for the
    same SVG, each where Chromium draws it, no two alike (boxes are)."""
    import numpy as np

    answer = client.post(
        "/api/v1/figure/pdf", content=CHINESE_SVG, headers={"content-type": "image/svg+xml"}
    )
    assert answer.status_code == 200
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(answer.content)
    # the fonts the PDF embeds: pdffonts' rows end "emb sub uni object-id generation"; a
    # subset's name is its PostScript name (the family's, unspaced) after a "+" tag
    fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in fonts.stdout.splitlines()[2:]]
    embedded = {row[0].split("+")[-1] for row in rows if row[-5] == "yes"}
    cjk = {family.replace(" ", "") for family in cjk_families}
    assert embedded & cjk, (fonts.stdout, cjk_families)
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert CHINESE in text and "Layer 2 · Head 3" in text  # (text stays text)

    # the PDF at 96 dpi is the SVG's 300 x 80 px; the SVG drawn by Chromium at its size
    subprocess.run(
        ["pdftoppm", "-png", "-r", "96", "-singlefile", str(pdf), str(tmp_path / "pdf")],
        check=True,
    )
    svg = tmp_path / "figure.svg"
    svg.write_bytes(CHINESE_SVG)
    # (in a process of its own: a test process may hold a Playwright session already)
    script = (
        "import sys; from playwright.sync_api import sync_playwright\n"
        "from harness.browser import CHROMIUM, FLAGS\n"
        "with sync_playwright() as p:\n"
        "    browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)\n"
        "    page = browser.new_page(viewport={'width': 300, 'height': 80})\n"
        "    page.goto(sys.argv[1])\n"
        "    page.screenshot(path=sys.argv[2])\n"
        "    browser.close()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, svg.as_uri(), str(tmp_path / "chromium.png")],
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    # the title's six 40 px cells (x 20..260, y 10..65), in each rendering
    cells = [(20 + 40 * i, 10, 60 + 40 * i, 65) for i in range(len(CHINESE))]
    drawn = [ink(tmp_path / "pdf.png", cell) for cell in cells]
    shown = [ink(tmp_path / "chromium.png", cell) for cell in cells]
    for i, cell in enumerate(drawn):
        assert cell.sum() > 15, f"{CHINESE[i]} has no ink in the PDF"
        # no two alike: a box (.notdef) is one shape for every character
        for j in range(i):
            assert np.abs(cell - drawn[j]).mean() > 0.05, (CHINESE[i], CHINESE[j])
        # each character is the one Chromium draws in that cell, and no other
        alike = [np.corrcoef(cell.ravel(), other.ravel())[0, 1] for other in shown]
        assert alike[i] > 0.8 and alike[i] == max(alike), (CHINESE[i], alike)


def use_bomb(levels: int, fan: int = 10) -> bytes:
    """`levels` of groups each drawing the one below `fan` times (`<use>`): a few hundred
    bytes a level, ×`fan` the work a level (five levels took CairoSVG 14 s in-process)."""
    rows = [b'<defs><g id="a0"><rect width="1" height="1"/><text>x</text></g>']
    for k in range(1, levels + 1):
        uses = b"".join(b'<use xlink:href="#a%d" x="%d"/>' % (k - 1, i) for i in range(fan))
        rows.append(b'<g id="a%d">' % k + uses + b"</g>")
    rows.append(b'</defs><use xlink:href="#a%d"/>' % levels)
    return figure(b"".join(rows))


def post_svg(client, svg: bytes):
    return client.post("/api/v1/figure/pdf", content=svg, headers={"content-type": "image/svg+xml"})


def test_a_use_bomb_is_refused_before_it_is_drawn(client):
    """Nested `<use>`s are counted with what they draw, from the XML, before CairoSVG
    draws a thing: a 2 KB bomb is a 422 in well under a second; two levels draw."""
    import time

    drawn = post_svg(client, use_bomb(2))
    assert drawn.status_code == 200 and drawn.content.startswith(b"%PDF")
    bomb = use_bomb(7)
    assert len(bomb) < 2500
    began = time.monotonic()
    refused = post_svg(client, bomb)
    assert time.monotonic() - began < 5
    assert refused.status_code == 422
    assert "over 20,000 elements or nests <use> over 4 deep" in refused.json()["detail"]
    cycle = figure(b'<g id="a"><rect width="1" height="1"/><use xlink:href="#a"/></g>')
    refused = post_svg(client, cycle)
    assert refused.status_code == 422 and "draws itself" in refused.json()["detail"]
    many = figure(b'<rect id="r" width="1" height="1"/>' + b'<use href="#r"/>' * 501)
    refused = post_svg(client, many)
    assert refused.status_code == 422
    assert refused.json()["detail"] == "a figure may hold 500 <use> elements; this one 501"


def long_path(segments: int) -> bytes:
    """One element whose drawing takes CairoSVG seconds (its path parsed in Python)."""
    return figure(b'<path stroke="black" d="M0 0 ' + b"L1 2 " * segments + b'"/>')


def test_a_figure_past_its_cpu_time_or_wall_time_is_stopped(client, monkeypatch):
    """The drawing process has bounded CPU time (the kernel's SIGXCPU kills it) and wall
    time (the server kills it): 422 saying which; the server goes on."""
    from attnviz.app.edge.routes import figures

    monkeypatch.setattr(figures, "FIGURE_CPU_SECONDS", 1)
    answer = post_svg(client, long_path(1_500_000))  # (7.5 MB: ~4 s of CPU here)
    assert answer.status_code == 422
    assert answer.json()["detail"] == "this figure took over 1 s of CPU to draw and was stopped"
    monkeypatch.setattr(figures, "FIGURE_SECONDS", 0.2)
    answer = post_svg(client, long_path(300_000))
    assert answer.status_code == 422
    assert answer.json()["detail"] == "this figure took over 0.2 s to draw and was stopped"
    monkeypatch.undo()
    assert post_svg(client, SVG).status_code == 200
