"""A plot as PDF, for papers: the page sends the SVG plotly.js draws (title, axes, the
heatmap's image) and gets it back as a vector PDF made by CairoSVG."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Response

from .deps import BODY_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/figure", tags=["figures"])
FIGURE_BYTES = 8 * 2**20  # an SVG's bytes (a 512 x 512 heatmap's embedded image is ~1 MB)


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


def to_pdf(svg: bytes) -> bytes:
    """CairoSVG's PDF of an SVG (unsafe=False: data: URLs only, no entities); 422 where it
    cannot read it; 501 where this machine has no cairo library."""
    try:
        import cairosvg
    except OSError as exc:  # (cairocffi finds no libcairo)
        raise HTTPException(
            501, f"this server cannot make PDFs: {exc} (Debian: apt-get install libcairo2)"
        ) from None

    # a heatmap's cells are its image's pixels, which plotly.js marks `pixelated` (CSS);
    # CairoSVG reads SVG 1.1's name for it alone, and would blur them otherwise
    svg = svg.replace(b"image-rendering: pixelated", b"image-rendering: optimizeSpeed")
    try:
        return cairosvg.svg2pdf(bytestring=svg, unsafe=False)
    except Exception as exc:  # (an SVG it cannot read: ParseError, ValueError, ...)
        raise HTTPException(
            422, f"the SVG cannot be read: {type(exc).__name__}: {exc}"[:300]
        ) from None
