"""What each position of a picture's run is (`ImagePosition`): a class, distillation,
register or detection token, or a patch with its row and column in the patch grid and its
box in the picture's own pixels; and where a processor's pixels lie in the picture
(`Geometry`). Backend-free: the runners make them, the app and the notebook read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# (a vision-language model's run: its text tokens too, beside the picture's patches)
PositionKind = Literal[
    "cls",
    "distillation",
    "register",
    "detection",
    "patch",
    "thumbnail",
    "query",
    "extra",
    "text",
]
PATCH = "▦"  # a patch's label: "▦ 3,5" (row 3, column 5)
# a learned query of a resampler that reads the whole picture (Idefics2's perceiver's
# latents, BLIP-2's Q-Former's queries): "◌ 3", no place on the picture
QUERY = "◌"
# a token of the padding a processor adds around the picture, wholly outside it: "░ 0,3"
PADDING = "░"
# a token of the whole picture read again small beside its tiles (Idefics3's, GotOcr2's;
# LLaVA-NeXT's base square): "▣ 1,0"
THUMBNAIL = "▣"


@dataclass(frozen=True)
class ImagePosition:
    """What one position of an image encoder's run is."""

    kind: PositionKind
    label: str  # "[CLS]", "[DIST]", "[REG 2]", "▦ 3,5"; a text token as shown
    image: int = 0  # which picture of the run
    row: int | None = None  # a patch's row and column in its picture's patch grid
    column: int | None = None
    # a patch's box in the picture's own pixels (left, top, right, bottom), clipped to it
    box: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class Geometry:
    """Where the processor's pixels lie in a picture: resized from `original` to
    `resized` (width, height), then the window of `size` at `offset` (left, top; negative
    where the processor pads) taken from the resized picture."""

    original: tuple[int, int]
    resized: tuple[int, int]
    offset: tuple[int, int]
    size: tuple[int, int]

    def box(
        self, left: float, top: float, right: float, bottom: float
    ) -> tuple[float, float, float, float]:
        """A box of the processor's pixels as a box of the picture's, clipped to it."""
        (w0, h0), (w1, h1), (dx, dy) = self.original, self.resized, self.offset
        sx, sy = w0 / w1, h0 / h1
        return (
            min(max((left + dx) * sx, 0.0), w0),
            min(max((top + dy) * sy, 0.0), h0),
            min(max((right + dx) * sx, 0.0), w0),
            min(max((bottom + dy) * sy, 0.0), h0),
        )


def cells(
    place: Geometry,
    rows: int,
    columns: int,
    size: tuple[float, float],
    kind: PositionKind = "patch",
    first: tuple[int, int] = (0, 0),
    at: tuple[float, float] = (0.0, 0.0),
) -> list[ImagePosition]:
    """A grid of tokens, row by row: each a cell of `size` (width, height) of the
    processor's pixels from `at` (left, top), its box in the picture's by `place`, and
    named by its row and column counted from `first` ("▦ 3,5"; a thumbnail's "▣ 1,0")."""
    (w, h), (x, y), mark = size, at, THUMBNAIL if kind == "thumbnail" else PATCH
    found = []
    for i in range(rows):
        for j in range(columns):
            r, c = first[0] + i, first[1] + j
            box = place.box(x + j * w, y + i * h, x + (j + 1) * w, y + (i + 1) * h)
            found.append(ImagePosition(kind, f"{mark} {r},{c}", 0, r, c, box))
    return found


@dataclass(frozen=True)
class ImageMap:
    """A picture's run: which picture (its digest: app/images.py's), its size as seen
    (width, height), and what each position of the run is."""

    digest: str
    size: tuple[int, int]
    positions: list[ImagePosition]
    # a patch's height and width in the pixels the model reads (the processor's picture)
    patch: tuple[float, float] = (0, 0)
    # (rows, columns) of the whole grid, where the run reads some of its patches only (a
    # masked autoencoder's); else the grid is its patches'
    whole: tuple[int, int] | None = None

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, columns) of its patch grid."""
        if self.whole:
            return self.whole
        patches = [p for p in self.positions if p.kind == "patch"]
        if not patches:
            return (0, 0)
        return (
            max(p.row or 0 for p in patches) + 1,
            max(p.column or 0 for p in patches) + 1,
        )


@dataclass
class PicturePrompt:
    """A picture and a text as a vision-language model's processor makes them."""

    prompt: str  # the prompt's text (the image token where the picture goes)
    ids: list[int]  # its ids, the image token repeated once per position of the picture
    inputs: dict[str, Any]  # the tensors the model reads besides them (pixel_values, ...)
    positions: list[ImagePosition]  # what each of the ids is: a text token, or a patch

    def shown(self, tokens: list[str]) -> list[str]:
        """A sequence's tokens as shown (the prompt's and any after it), each image token
        named by its position in the picture ("▦ 3,5")."""
        named = [p.label if p.kind != "text" else t
                 for p, t in zip(self.positions, tokens, strict=False)]  # fmt: skip
        return named + tokens[len(named) :]


def padding_named(positions: list[ImagePosition]) -> list[ImagePosition]:
    """The positions, those whose box is empty (a token wholly in a letterbox's or a
    canvas's padding: its box clipped to nothing) named as padding ("░ r,c"), no patch."""
    return [
        p if p.box and p.box[0] < p.box[2] and p.box[1] < p.box[3]
        else ImagePosition("extra", f"{PADDING} {p.row},{p.column}")
        for p in positions
    ]  # fmt: skip
