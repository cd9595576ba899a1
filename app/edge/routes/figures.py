"""A plot as PDF, for papers: the page sends the SVG plotly.js draws (title, axes, the
heatmap's image) and gets it back as a vector PDF made by CairoSVG, its text in fonts
that have its glyphs (Chinese included, where this machine has such a font)."""

from __future__ import annotations

import functools
import io
import operator
import struct
import subprocess
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Response

from .deps import FIGURE_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/figure", tags=["figures"])
FIGURE_BYTES = 8 * 2**20  # an SVG's bytes (a 512 x 512 heatmap's embedded image is ~1 MB)
FIGURE_PIXELS = 4096 * 4096  # pixels of an image in it (a heatmap's: one a cell)
# the fallback fonts looked at, and the distinct characters looked up in them (a figure's
# labels hold a few hundred): each a glyph lookup in C, ~1 µs
FALLBACK_FAMILIES = 32
FALLBACK_CHARS = 20_000


@router.post(
    "/pdf",
    responses={**FIGURE_ERRORS, 200: {"content": {"application/pdf": {}}}},
    response_class=Response,
)
async def figure_pdf(
    inference: InferenceDep,
    svg: Annotated[bytes, Body(media_type="image/svg+xml", description="The plot as SVG.")],
) -> Response:
    """The SVG of a plot (the page's toolbar sends plotly.js's) as a PDF: its text stays
    text, in a font with its glyphs (the PDF embeds it), its shapes vector; its images PNG
    from data: URLs within it, 16.7 M pixels in all (nothing is fetched, no XML entity is
    resolved)."""
    if not svg.lstrip().startswith((b"<svg", b"<?xml")):
        raise HTTPException(422, "the body is not an SVG document (image/svg+xml)")
    return Response(
        await inference.on_tensor_thread(to_pdf, svg),
        media_type="application/pdf",
        headers={"content-disposition": 'attachment; filename="attnviz-figure.pdf"'},
    )


class Refused(Exception):
    """An image a figure may not hold (its message says why)."""


def image_fetcher() -> Callable[[str, str], bytes]:
    """CairoSVG's fetcher for one figure: data: URLs only (nothing outside the SVG is
    read, however its URL is spelled), PNG only (plotly.js's heatmaps; no nested SVG, no
    other decoder), and at most FIGURE_PIXELS pixels decoded in all, an image drawn
    twice (`<use>`) counted twice: read from each PNG's header before it is decoded (a
    small PNG can say 12,000 x 12,000 and take 700 MB)."""
    from cairosvg.url import fetch as read_data  # (urllib's reading of a data: URL)

    left = FIGURE_PIXELS

    def fetch(url: str, resource_type: str) -> bytes:
        nonlocal left
        if not url.lower().startswith("data:"):
            raise Refused("a figure's images are in its SVG (data: URLs); nothing is fetched")
        data = read_data(url, resource_type)
        if not data.startswith(b"\x89PNG\r\n\x1a\n") or data[12:16] != b"IHDR":
            raise Refused("a figure's images are PNG (plotly.js's)")
        width, height = struct.unpack(">II", data[16:24])
        left -= width * height
        if left < 0:
            raise Refused(
                f"a figure's images may have {FIGURE_PIXELS:,} pixels in all (an image drawn "
                f"twice counts twice); this one's reach {FIGURE_PIXELS - left:,}"
            )
        return data

    return fetch


def fallback_families() -> tuple[str, ...]:
    """fontconfig's fallback order for sans-serif (`fc-match --sort`, the order a browser
    falls back in), each family once, the first FALLBACK_FAMILIES: where a text's font
    lacks a glyph it is looked for in these. Empty where fontconfig's tools are missing or
    fail: the PDF then draws each text in its own font, a missing glyph as a box."""
    try:
        return sorted_families()
    except (OSError, subprocess.SubprocessError):
        return ()


@functools.cache  # (once a process: a failure raises, is not cached, is asked again)
def sorted_families() -> tuple[str, ...]:
    listed = subprocess.run(
        ["fc-match", "--sort", "--format", "%{family[0]}\n", "sans-serif"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    # (CairoSVG takes a font-family's first name, up to a comma, its quotes stripped)
    named = (f for f in listed.splitlines() if f and not any(c in f for c in ",\"'"))
    return tuple(dict.fromkeys(named))[:FALLBACK_FAMILIES]


def needing_glyphs(text: str) -> list[str]:
    """A text's distinct characters a fallback may be needed for, in order: every font
    has ASCII's, and a space draws nothing."""
    return list(dict.fromkeys(c for c in text if not c.isascii() and not c.isspace()))


class Fallback:
    """Which family draws each text run of one figure. CairoSVG draws a run with cairo's
    "toy" font API: one face, the one fontconfig matches to the first name of its
    font-family (plotly's "Open Sans" is DejaVu Sans here), with no fallback glyph by glyph,
    so Chinese came out as boxes (.notdef) though a CJK font was installed. A run holding a
    character its face lacks is drawn in the first of `fallback_families` with all its
    characters (else with all those its face lacks; else with its first one): the whole
    run, its Latin letters too, where a browser would take the missing glyphs alone."""

    def __init__(self, text: str) -> None:
        from cairocffi import ScaledFont, ToyFontFace

        self.face = lambda family: ScaledFont(ToyFontFace(family))
        self.faces: dict[str, Any] = {}
        self.families = fallback_families()
        # each of the figure's characters (the first FALLBACK_CHARS) -> the fallback
        # families with a glyph for it, as bits in their order: a lookup a family in all
        chars = "".join(needing_glyphs(text)[:FALLBACK_CHARS])
        self.masks = dict.fromkeys(chars, 0)
        for bit, family in enumerate(self.families if chars else ()):
            for char, has in zip(chars, self.glyphs(family, chars), strict=True):
                self.masks[char] |= has << bit

    def glyphs(self, family: str, chars: str) -> list[bool]:
        """Whether the face cairo matches to `family` has a glyph for each character (a toy
        font maps a character to one glyph; index 0 is .notdef, the box)."""
        if family not in self.faces:
            if len(self.faces) >= 256:  # (a figure naming a family a text)
                self.faces.clear()
            self.faces[family] = self.face(family)
        return [g[0] != 0 for g in self.faces[family].text_to_glyphs(0, 0, chars, False)]

    def family_for(self, family: str, text: str) -> str | None:
        """The family to draw `text` in where `family`'s face lacks one of its glyphs; None
        where it has them all, or no fallback has one it lacks."""
        chars = needing_glyphs(text)
        if not chars or not self.families:
            return None
        has = self.glyphs(family, "".join(chars))
        missing = [c for c, drawn in zip(chars, has, strict=True) if not drawn]
        if not missing:
            return None
        every = (1 << len(self.families)) - 1
        for wanted in (chars, missing, missing[:1]):
            common = functools.reduce(operator.and_, (self.masks.get(c, 0) for c in wanted), every)
            if common:
                return self.families[(common & -common).bit_length() - 1]
        return None


@functools.cache
def figure_pdf_surface() -> type:
    """CairoSVG's PDF surface with a `Fallback`: a text run's font-family starts with the
    fallback family where its own face lacks one of its glyphs. Made at the first figure
    (importing cairosvg needs libcairo)."""
    from cairosvg.surface import PDFSurface, parse_font

    class FigurePDF(PDFSurface):  # type: ignore[misc]
        def __init__(self, tree: Any, output: Any, fallback: Fallback) -> None:
            self.fallback = fallback  # (set first: the surface draws as it is made)
            super().__init__(tree, output, 96)

        def draw(self, node: Any) -> None:
            if node.tag in ("text", "tspan", "textPath", "a") and node.text:
                if "font" in node:  # (as `draw` does first: the shorthand's family)
                    for name, value in parse_font(node["font"]).items():
                        node.setdefault(name, value)
                named = node.get("font-family") or "sans-serif"
                # (the name `cairosvg.text.text` selects its face by)
                fallback = self.fallback.family_for(named.split(",")[0].strip("\"' "), node.text)
                if fallback:
                    node["font-family"] = f'"{fallback}", {named}'
            super().draw(node)

    return FigurePDF


def to_pdf(svg: bytes) -> bytes:
    """CairoSVG's PDF of an SVG (no XML entity resolved; images by `image_fetcher`; each
    text in a font with its glyphs, `Fallback`); 422 where it cannot read it or holds what
    a figure may not; 501 where this machine has no cairo library."""
    try:
        from cairosvg.parser import Tree

        surface = figure_pdf_surface()
    except OSError as exc:  # (cairocffi finds no libcairo)
        raise HTTPException(
            501, f"this server cannot make PDFs: {exc} (Debian: apt-get install libcairo2)"
        ) from None
    # a heatmap's cells are its image's pixels, which plotly.js marks `pixelated` (CSS);
    # CairoSVG reads SVG 1.1's name for it alone, and would blur them otherwise
    svg = svg.replace(b"image-rendering: pixelated", b"image-rendering: optimizeSpeed")
    try:
        # (PDFSurface.convert's steps, with the document's characters read first)
        tree = Tree(bytestring=svg, unsafe=False, url_fetcher=image_fetcher())
        output = io.BytesIO()
        surface(tree, output, Fallback("".join(tree.xml_tree.itertext()))).finish()
        return output.getvalue()
    except Refused as exc:
        raise HTTPException(422, str(exc)) from None
    except Exception as exc:  # (an SVG it cannot read: ParseError, ValueError, ...)
        raise HTTPException(
            422, f"the SVG cannot be read: {type(exc).__name__}: {exc}"[:300]
        ) from None
