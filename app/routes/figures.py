"""A plot as PDF, for papers: the page sends the SVG plotly.js draws (title, axes, the
heatmap's image) and gets it back as a vector PDF made by CairoSVG."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Response

from .deps import BODY_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/figure", tags=["figures"])
FIGURE_BYTES = 8 * 2**20  # an SVG's bytes (a 512 x 512 heatmap's embedded image is ~1 MB)
FIGURE_PIXELS = 4096 * 4096  # pixels of an image in it (a heatmap's: one a cell)


@router.post(
    "/pdf",
    responses={**BODY_ERRORS, 200: {"content": {"application/pdf": {}}}},
    response_class=Response,
)
async def figure_pdf(
    inference: InferenceDep,
    svg: Annotated[bytes, Body(media_type="image/svg+xml", description="The plot as SVG.")],
) -> Response:
    """The SVG of a plot (the page's toolbar sends plotly.js's) as a PDF: its text stays
    text, its shapes vector; its images PNG from data: URLs within it, 16.7 M pixels in
    all (nothing is fetched, no XML entity is resolved)."""
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


def to_pdf(svg: bytes) -> bytes:
    """CairoSVG's PDF of an SVG (no XML entity resolved; images by `image_fetcher`); 422
    where it cannot read it or holds what a figure may not; 501 where this machine has no
    cairo library."""
    try:
        from cairosvg.surface import PDFSurface
    except OSError as exc:  # (cairocffi finds no libcairo)
        raise HTTPException(
            501, f"this server cannot make PDFs: {exc} (Debian: apt-get install libcairo2)"
        ) from None
    # a heatmap's cells are its image's pixels, which plotly.js marks `pixelated` (CSS);
    # CairoSVG reads SVG 1.1's name for it alone, and would blur them otherwise
    svg = svg.replace(b"image-rendering: pixelated", b"image-rendering: optimizeSpeed")
    try:
        return PDFSurface.convert(bytestring=svg, unsafe=False, url_fetcher=image_fetcher())
    except Refused as exc:
        raise HTTPException(422, str(exc)) from None
    except Exception as exc:  # (an SVG it cannot read: ParseError, ValueError, ...)
        raise HTTPException(
            422, f"the SVG cannot be read: {type(exc).__name__}: {exc}"[:300]
        ) from None
