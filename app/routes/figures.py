"""A plot as PDF, for papers: the page sends the SVG plotly.js draws (title, axes, the
heatmap's image) and gets it back as a vector PDF made by CairoSVG."""

from __future__ import annotations

import base64
import re
import struct
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Response

from .deps import BODY_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/figure", tags=["figures"])
FIGURE_BYTES = 8 * 2**20  # an SVG's bytes (a 512 x 512 heatmap's embedded image is ~1 MB)
FIGURE_PIXELS = 4096 * 4096  # pixels of an image in it (a heatmap's: one a cell)
DATA_URL = re.compile(rb"data:([^,;\s\"']*)(;base64)?,", re.IGNORECASE)
DATA_PNG = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/=\s]{44,})", re.IGNORECASE)


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
    text, its shapes vector; images only from data: URLs within it (nothing is fetched,
    no XML entity is resolved: CairoSVG's safe mode)."""
    if not svg.lstrip().startswith((b"<svg", b"<?xml")):
        raise HTTPException(422, "the body is not an SVG document (image/svg+xml)")
    return Response(
        await inference.on_tensor_thread(to_pdf, svg),
        media_type="application/pdf",
        headers={"content-disposition": 'attachment; filename="attnviz-figure.pdf"'},
    )


def embedded_sizes(svg: bytes) -> list[tuple[int, int]]:
    """The (width, height) of each image in the SVG's data: URLs, read from its header
    (PNG's IHDR: plotly.js embeds base64 PNG); 422 for a data: URL of anything else."""
    urls = DATA_URL.findall(svg)
    for kind, encoded in urls:
        if kind.lower() != b"image/png" or not encoded:
            raise HTTPException(422, "a figure's embedded images are base64 PNG (plotly.js's)")
    sizes = []
    for found in DATA_PNG.finditer(svg):
        head = base64.b64decode(b"".join(found.group(1)[:44].split()) + b"==")[:24]
        if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
            raise HTTPException(422, "an image in the SVG is no PNG it says it is")
        sizes.append(struct.unpack(">II", head[16:24]))
    if len(sizes) != len(urls):
        raise HTTPException(422, "an image in the SVG is no PNG it says it is")
    return sizes


def to_pdf(svg: bytes) -> bytes:
    """CairoSVG's PDF of an SVG (unsafe=False: data: URLs only, no entities); 422 where it
    cannot read it; 501 where this machine has no cairo library."""
    try:
        import cairosvg
    except OSError as exc:  # (cairocffi finds no libcairo)
        raise HTTPException(
            501, f"this server cannot make PDFs: {exc} (Debian: apt-get install libcairo2)"
        ) from None

    # a plot's images are its heatmaps, a pixel a cell: one of more than FIGURE_PIXELS (a
    # small PNG can say 12,000 x 12,000 and take 700 MB to decode) is refused unread
    for width, height in embedded_sizes(svg):
        if width * height > FIGURE_PIXELS:
            raise HTTPException(
                422,
                f"an image of {width} x {height} pixels: a figure's may have at most "
                f"{FIGURE_PIXELS:,}",
            )
    # a heatmap's cells are its image's pixels, which plotly.js marks `pixelated` (CSS);
    # CairoSVG reads SVG 1.1's name for it alone, and would blur them otherwise
    svg = svg.replace(b"image-rendering: pixelated", b"image-rendering: optimizeSpeed")
    try:
        return cairosvg.svg2pdf(bytestring=svg, unsafe=False)
    except Exception as exc:  # (an SVG it cannot read: ParseError, ValueError, ...)
        raise HTTPException(
            422, f"the SVG cannot be read: {type(exc).__name__}: {exc}"[:300]
        ) from None
