"""A plot as PDF, for papers: the page sends the SVG plotly.js draws (title, axes, the
heatmap's image) and gets it back as a vector PDF made by CairoSVG, its text in fonts
that have its glyphs (Chinese included, where this machine has such a font).

The SVG is drawn in a process of its own (app/edge/svg_pdf.py) with bounded CPU time,
memory and wall-clock time, FIGURE_PROCESSES at once: an SVG's cost is not its size, and
the run threads, the event loop and the other clients never wait on one."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Response

from .. import svg_pdf
from .deps import FIGURE_ERRORS

router = APIRouter(prefix="/api/v1/figure", tags=["figures"])
FIGURE_BYTES = 8 * 2**20  # an SVG's bytes (a 512 x 512 heatmap's embedded image is ~1 MB)
FALLBACK_FAMILIES = 32  # fontconfig's fallback fonts a text may be drawn in
# One figure's process: CPU seconds, address space (Python and cairo take ~150 MB; a
# 512 x 512 heatmap's figure peaks at ~250 MB), and wall-clock seconds (its start, a
# slow reader of the SVG, a process descheduled: twice the CPU time)
FIGURE_CPU_SECONDS = 4
FIGURE_MEMORY = 1024 * 2**20
FIGURE_SECONDS = 8.0
FIGURE_PROCESSES = 2  # figures drawn at once; the next waits, QUEUE_SECONDS at most
QUEUE_SECONDS = 10.0
WORKER = Path(svg_pdf.__file__)


@router.post(
    "/pdf",
    responses={**FIGURE_ERRORS, 200: {"content": {"application/pdf": {}}}},
    response_class=Response,
)
async def figure_pdf(
    svg: Annotated[bytes, Body(media_type="image/svg+xml", description="The plot as SVG.")],
) -> Response:
    """The SVG of a plot (the page's toolbar sends plotly.js's) as a PDF: its text stays
    text, in a font with its glyphs (the PDF embeds it), its shapes vector; its images PNG
    from data: URLs within it, 16.7 M pixels in all (nothing is fetched, no XML entity is
    resolved). A figure that would draw over 20,000 elements (its `<use>`s counted with
    what they draw) is refused before drawing; one that takes over 4 s of CPU or 1 GiB of
    memory to draw is stopped: 422, saying which."""
    if not svg.lstrip().startswith((b"<svg", b"<?xml")):
        raise HTTPException(422, "the body is not an SVG document (image/svg+xml)")
    return Response(
        await draw(svg),
        media_type="application/pdf",
        headers={"content-disposition": 'attachment; filename="attnviz-figure.pdf"'},
    )


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> asyncio.Semaphore:
    """The figure processes' slots (one set an event loop: a semaphore is bound to one)."""
    loop = asyncio.get_running_loop()
    if loop not in _SLOTS:
        _SLOTS[loop] = asyncio.Semaphore(FIGURE_PROCESSES)
    return _SLOTS[loop]


async def draw(svg: bytes) -> bytes:
    """svg_pdf.py's PDF of `svg`, in a process with its limits; killed when the request is
    cancelled (its client went away) or past FIGURE_SECONDS."""
    families = await asyncio.to_thread(fallback_families)
    slots = _slots()
    try:
        async with asyncio.timeout(QUEUE_SECONDS):
            await slots.acquire()
    except TimeoutError:
        raise HTTPException(
            503,
            f"{FIGURE_PROCESSES} figures are being drawn; retry in a few seconds",
            headers={"Retry-After": "5"},
        ) from None
    try:
        return await _drawn(svg, families)
    finally:
        slots.release()


async def _drawn(svg: bytes, families: tuple[str, ...]) -> bytes:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",  # (isolated: no PYTHON* variables, no user site, not the working folder)
        str(WORKER),
        str(FIGURE_CPU_SECONDS),
        str(FIGURE_MEMORY),
        json.dumps(families),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(FIGURE_SECONDS):
            pdf, said = await child.communicate(svg)
    except TimeoutError:
        raise HTTPException(
            422, f"this figure took over {FIGURE_SECONDS:g} s to draw and was stopped"
        ) from None
    finally:
        if child.returncode is None:  # (timed out, or the request was cancelled)
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
    why = said.decode("utf-8", "replace")[:500]
    if child.returncode == 0:
        return pdf
    if child.returncode == svg_pdf.REFUSED:
        raise HTTPException(422, why)
    if child.returncode == svg_pdf.NO_CAIRO:
        raise HTTPException(501, f"this server cannot make PDFs: {why}")
    if child.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise HTTPException(
            422, f"this figure took over {FIGURE_CPU_SECONDS} s of CPU to draw and was stopped"
        )
    raise HTTPException(
        422, f"drawing this figure failed (the drawing process ended with {child.returncode})"
    )


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
