"""An SVG figure as a PDF, made by CairoSVG in a process of its own: the server runs this
file (`python -I svg_pdf.py FAMILIES`, the SVG on stdin, the PDF on stdout) with limits on
its CPU time and memory set before it reads a byte, and kills it past a wall-clock bound.
An SVG is untrusted input whose cost its size does not tell (five levels of nested `<use>`
in 1.4 KB took CairoSVG 14 s, ×10 a level), so no server thread ever draws one.

Before it is drawn, a figure's size as drawn is counted from its XML: each element once,
and each `<use>` again with all it draws (a use of a use of ... multiplies): past
DRAWN_AT_MOST elements or USES_AT_MOST uses, or a use chain deeper than USE_DEPTH, it is
refused at once with what to change. The limits stay the backstop for whatever else is
slow to draw (patterns, markers, filters).

Its text is drawn in a font that has its glyphs (`Fallback`, Chinese included where the
machine has such a font); its images are PNG from data: URLs within it (nothing is read
outside the SVG, no XML entity is resolved).

Exit status: 0 with the PDF on stdout; REFUSED with why on stderr (the SVG cannot be
read, or holds what a figure may not); NO_CAIRO where the machine has no cairo library.
This file imports nothing of attnviz (the child starts in ~0.3 s, not the app's
seconds)."""

from __future__ import annotations

import functools
import io
import json
import operator
import re
import resource
import struct
import sys
from collections.abc import Callable
from typing import Any

REFUSED = 3
NO_CAIRO = 4
FIGURE_PIXELS = 4096 * 4096  # pixels of the images in a figure (a heatmap's: one a cell)
# A figure as drawn: plotly.js's heatmap of 512 x 512 cells with its ticks is ~3,000
# elements and no use; a figure of 20,000 elements draws in ~2 s here
DRAWN_AT_MOST = 20_000
USES_AT_MOST = 500
USE_DEPTH = 4
# the fallback fonts looked at, and the distinct characters looked up in them (a figure's
# labels hold a few hundred): each a glyph lookup in C, ~1 µs
FALLBACK_CHARS = 20_000
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"


class Refused(Exception):
    """What a figure may not be (its message says why)."""


def limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    """This process's CPU time (SIGXCPU past it, which kills) and address space (an
    allocation past it fails: MemoryError, or cairo's NO_MEMORY)."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def check_drawn_size(root: Any) -> None:
    """Refuse a figure whose drawing would hold more than DRAWN_AT_MOST elements, more
    than USES_AT_MOST uses, or a chain of more than USE_DEPTH uses (a use of an element
    holding a use of ...), or a use of itself. Each element counts once where it is and
    once more for each use that draws it; counted bottom-up, each element once (a
    figure's count is found in time linear in its size, however many times it would be
    drawn)."""
    by_id: dict[str, list[Any]] = {}  # (an id given twice: a use counted as drawing both)
    for element in root.iter():
        if element.get("id") is not None:
            by_id.setdefault(element.get("id"), []).append(element)
    sizes: dict[int, tuple[int, int]] = {}  # id(element) -> (drawn, use depth)
    open_: set[int] = set()
    uses = sum(1 for e in root.iter() if _local(e.tag) == "use")
    if uses > USES_AT_MOST:
        raise Refused(f"a figure may hold {USES_AT_MOST:,} <use> elements; this one {uses:,}")
    # iterative post-order (a deep document must not reach Python's recursion limit)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        element, expanded = stack.pop()
        key = id(element)
        if key in sizes:
            continue
        targets = _used(element, by_id)
        below = [*element, *targets]
        if not expanded:
            if key in open_:
                raise Refused("a <use> in this figure draws itself (a cycle of references)")
            open_.add(key)
            stack.append((element, True))
            stack.extend((child, False) for child in below if id(child) not in sizes)
            continue
        if any(id(child) not in sizes for child in below):
            raise Refused("a <use> in this figure draws itself (a cycle of references)")
        drawn = 1 + sum(sizes[id(child)][0] for child in below)
        depth = max((sizes[id(child)][1] for child in below), default=0)
        depth += bool(targets)
        if drawn > DRAWN_AT_MOST or depth > USE_DEPTH:
            raise Refused(
                f"this figure draws over {DRAWN_AT_MOST:,} elements or nests <use> over "
                f"{USE_DEPTH} deep (its uses repeat what they draw): a figure the page "
                "exports draws a few thousand"
            )
        sizes[key] = (drawn, depth)
        open_.discard(key)


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _used(element: Any, by_id: dict[str, list[Any]]) -> list[Any]:
    """The elements a `<use>` may draw (by `#id` in this document; an element of another
    document is never read, `image_fetcher`)."""
    if _local(element.tag) != "use":
        return []
    href = (element.get("href") or element.get(XLINK_HREF) or "").strip()
    return by_id.get(href[1:], []) if href.startswith("#") else []


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


def needing_glyphs(text: str) -> list[str]:
    """A text's distinct characters a fallback may be needed for, in order: every font
    has ASCII's, and a space draws nothing."""
    return list(dict.fromkeys(c for c in text if not c.isascii() and not c.isspace()))


class Fallback:
    """Which family draws each text run of one figure. CairoSVG draws a run with cairo's
    "toy" font API: one face, the one fontconfig matches to the first name of its
    font-family (plotly's "Open Sans" is DejaVu Sans here), with no fallback glyph by glyph,
    so Chinese came out as boxes (.notdef) though a CJK font was installed. A run holding a
    character its face lacks is drawn in the first of `families` (fontconfig's fallback
    order, the server's `fallback_families`) with all its characters (else with all those
    its face lacks; else with its first one): the whole run, its Latin letters too, where a
    browser would take the missing glyphs alone."""

    def __init__(self, text: str, families: tuple[str, ...]) -> None:
        from cairocffi import ScaledFont, ToyFontFace

        self.face = lambda family: ScaledFont(ToyFontFace(family))
        self.faces: dict[str, Any] = {}
        self.families = families
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


def figure_pdf_surface() -> type:
    """CairoSVG's PDF surface with a `Fallback`: a text run's font-family starts with the
    fallback family where its own face lacks one of its glyphs."""
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


def to_pdf(svg: bytes, families: tuple[str, ...]) -> bytes:
    """CairoSVG's PDF of an SVG (no XML entity resolved; its drawn size checked first,
    `check_drawn_size`; images by `image_fetcher`; each text in a font with its glyphs,
    `Fallback`). Raises Refused where it cannot be read or holds what a figure may not;
    OSError where this machine has no cairo library."""
    from cairosvg.parser import Tree

    surface = figure_pdf_surface()
    # a heatmap's cells are its image's pixels, which plotly.js marks `pixelated` (CSS);
    # CairoSVG reads SVG 1.1's name for it alone, and would blur them otherwise
    svg = re.sub(rb"image-rendering:\s*pixelated", b"image-rendering: optimizeSpeed", svg)
    try:
        # (PDFSurface.convert's steps, with the document's size and characters read first)
        tree = Tree(bytestring=svg, unsafe=False, url_fetcher=image_fetcher())
        check_drawn_size(tree.xml_tree)
        output = io.BytesIO()
        surface(tree, output, Fallback("".join(tree.xml_tree.itertext()), families)).finish()
        return output.getvalue()
    except (Refused, MemoryError):
        raise
    except Exception as exc:  # (an SVG it cannot read: ParseError, ValueError, ...)
        raise Refused(f"the SVG cannot be read: {type(exc).__name__}: {exc}"[:300]) from None


def main() -> int:
    cpu_seconds, memory_bytes = int(sys.argv[1]), int(sys.argv[2])
    families = tuple(json.loads(sys.argv[3]))
    limit_self(cpu_seconds, memory_bytes)
    svg = sys.stdin.buffer.read()
    try:
        pdf = to_pdf(svg, families)
    except Refused as exc:
        sys.stderr.write(str(exc))
        return REFUSED
    except MemoryError:
        sys.stderr.write(f"drawing this figure needs over {memory_bytes // 2**20} MiB of memory")
        return REFUSED
    except OSError as exc:  # (cairocffi finds no libcairo)
        sys.stderr.write(f"{exc} (Debian: apt-get install libcairo2)")
        return NO_CAIRO
    sys.stdout.buffer.write(pdf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
