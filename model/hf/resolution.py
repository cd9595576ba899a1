"""A picture read at its own resolution: resized to whole tokens within the image
processor's bounds, never cropped, its tokens the cells of one grid over it, row by row
(`GridTokens`): Qwen2-VL's and those that share its settings (`DynamicTokens`; GLM-5's,
the picture at the top left of a canvas bounded in tokens, `PaddedDynamicTokens`;
HunYuanVL's and HY-V4's with a newline a row, `HunyuanTokens`), LightOnOCR's
Pixtral-sized picture (`RowTokens`), and Emu3's VQ codes with a row-end token after each
row (`RowEndTokens`)."""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any

from ..checkpoints import CheckpointError
from ..patches import Geometry, ImagePosition, cells, padding_named
from .vision import shape_only


class GridTokens:
    """Tokens that are the cells of one grid over the processor's whole picture (no
    crop), row by row: each a `patch` x `patch` block of its pixels; `place` says where
    those pixels lie in the picture."""

    patch: int

    def place(self, width: int, height: int) -> Geometry:
        raise NotImplementedError

    def count(self, width: int, height: int) -> int:
        w, h = self.place(width, height).size
        return (w // self.patch) * (h // self.patch)

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        place, t = self.place(width, height), self.patch
        return cells(place, place.size[1] // t, place.size[0] // t, (t, t))

    def rows_ended(self, width: int, height: int) -> list[ImagePosition]:
        """The cells row by row, each row followed by its end token ("↵ r": no box), as
        Emu3's and HunYuanVL's processors write them."""
        place, t = self.place(width, height), self.patch
        rows, columns = place.size[1] // t, place.size[0] // t
        grid, found = cells(place, rows, columns, (t, t)), []
        for r in range(rows):
            found += grid[r * columns : (r + 1) * columns]
            found.append(ImagePosition("extra", f"↵ {r}", 0, r, columns))
        return found


# pictures a placing's count is checked on against its image processor's own
PROBES = ((70, 50), (640, 480), (1000, 200), (30, 900))


class DynamicTokens(GridTokens):
    """Qwen2-VL's own resolution: the picture resized to the nearest multiple of a
    merged token's side whose pixels lie within the processor's bounds (its
    `smart_resize`, no crop), its patches merged `merge` x `merge` into one token, the
    tokens row by row."""

    def __init__(self, image_processor: Any) -> None:
        self.image_processor = image_processor
        self.merge = int(image_processor.merge_size)
        self.patch = int(image_processor.patch_size) * self.merge
        module = sys.modules[type(image_processor).__module__]
        self._resize: Any = getattr(module, "smart_resize", None)
        if self._resize is None:
            raise CheckpointError(
                f"its image processor ({type(image_processor).__name__}) states no resize "
                "rule: its picture's patches cannot be placed"
            )
        # (GLM-4V's rule counts a picture's frames: its own signature says so)
        self._frames = "num_frames" in inspect.signature(self._resize).parameters
        self._agrees()

    def _agrees(self) -> None:
        """A CheckpointError unless the image processor's own count of a picture's patches
        is this placing's, on pictures wide, tall, small and large (a rule of the same
        name that reads other settings, or pads after it resizes, is not Qwen2-VL's)."""
        counted = getattr(self.image_processor, "get_number_of_image_patches", None)
        named = type(self.image_processor).__name__
        for width, height in PROBES:
            try:  # (a picture its own count refuses, too long or thin, is no probe)
                theirs = counted(height, width, {}) if counted else None
            except (TypeError, ValueError, KeyError, ArithmeticError):
                continue
            try:  # (its patches' count, or HunYuanVL's grid of them: rows and columns)
                w, h = self.place(width, height).size
            except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
                raise CheckpointError(
                    f"its image processor ({named}) resizes by a rule not mapped yet: {exc}"
                ) from None
            rows, columns = h // self.patch * self.merge, w // self.patch * self.merge
            grid = isinstance(theirs, (tuple, list))
            ours: Any = (rows, columns) if grid else rows * columns
            if theirs is not None and ours != (tuple(theirs) if grid else theirs):
                raise CheckpointError(
                    f"its image processor ({named}) reads a {width} x {height} picture as "
                    f"{theirs} patches where Qwen2-VL's rule gives {ours}: not mapped yet"
                )

    def canvas(self, width: int, height: int, least: int, most: int) -> tuple[int, int]:
        """(height, width) of the processor's pixels for a picture of this size: its rule
        within `least` and `most` (GLM-4V's and GLM-5's over a temporal patch's frames)."""
        bounds = {"min_pixels": least, "max_pixels": most}
        if self._frames:  # (GLM-4V's: a picture is read as its temporal patch's frames)
            frames = int(self.image_processor.temporal_patch_size)
            return self._resize(num_frames=frames, height=height, width=width,
                                temporal_factor=frames, factor=self.patch, **bounds)  # fmt: skip
        return self._resize(height, width, self.patch, **bounds)

    def place(self, width: int, height: int) -> Geometry:
        """Where the processor's pixels lie in a picture of this size."""
        size = self.image_processor.size
        h, w = self.canvas(width, height, size["shortest_edge"], size["longest_edge"])
        return Geometry((width, height), (w, h), (0, 0), (w, h))


class PaddedDynamicTokens(DynamicTokens):
    """GLM-5's: a canvas of whole merged tokens within its bounds in tokens
    (`min_image_tokens`, `max_image_tokens`: its `smart_resize`), the picture scaled to
    fit it, its aspect kept (not up where it holds the fewest tokens' pixels already), at
    its top left, the rest padding (its `resize`). A token wholly in the padding has no
    place on the picture: it is named "░ r,c", no patch."""

    def place(self, width: int, height: int) -> Geometry:
        p = self.image_processor
        h, w = self.canvas(width, height, p.min_image_tokens, p.max_image_tokens)
        scale = min(h / height, w / width)
        if height * width >= self.patch**2 * p.min_image_tokens:
            scale = min(1.0, scale)
        inside = (max(1, min(w, math.floor(width * scale))),
                  max(1, min(h, math.floor(height * scale))))  # fmt: skip
        return Geometry((width, height), inside, (0, 0), (w, h))

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        return padding_named(super().positions(width, height))


class HunyuanTokens(DynamicTokens):
    """HunYuanVL's: Qwen2-VL's own resolution, its merged tokens row by row, each row
    ended by its merger's newline token ("↵ r"), the whole between its merger's begin and
    end tokens ("[begin]", "[end]": its processor's `cat_extra_token`), all written as the
    image token."""

    def __init__(self, image_processor: Any, ends: bool) -> None:
        self.ends = ends
        super().__init__(image_processor)

    def count(self, width: int, height: int) -> int:
        return len(self.positions(width, height))

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        ends = [[ImagePosition("extra", e)] if self.ends else [] for e in ("[begin]", "[end]")]
        return ends[0] + self.rows_ended(width, height) + ends[1]


class RowTokens(GridTokens):
    """Pixtral's image processor (LightOnOcr's): the picture scaled down, never up, to
    fit its longest edge, each side then rounded up to whole patches of the processor's
    (its `get_resize_output_image_size`, no crop); the vision tower's patches merged
    `merge` x `merge` into one token, the tokens row by row."""

    def __init__(self, image_processor: Any, patch: int, merge: int) -> None:
        from transformers.models.pixtral import image_processing_pil_pixtral as pixtral

        if not isinstance(image_processor, pixtral.PixtralImageProcessorPil):
            raise CheckpointError(
                f"its image processor ({type(image_processor).__name__}) is not Pixtral's: "
                "its picture's tokens cannot be placed"
            )
        self.image_processor, self.patch = image_processor, patch * merge
        self._resize = pixtral.get_resize_output_image_size
        sides = image_processor.patch_size
        self.sides = (sides["height"], sides["width"]) if isinstance(sides, dict) else sides
        size = dict(image_processor.size)  # (its longest edge, or a most height and width)
        edge = size.get("longest_edge")
        most = (edge, edge) if edge else (size.get("height"), size.get("width"))
        if not all(isinstance(m, int) and m > 0 for m in most):
            raise CheckpointError(f"its image processor resizes to {size}: not mapped")
        self.most: tuple[int, int] = most  # type: ignore[assignment]

    def place(self, width: int, height: int) -> Geometry:
        h, w = self._resize(shape_only(height, width, 3), size=self.most, patch_size=self.sides,
                            input_data_format="channels_last")  # fmt: skip
        return Geometry((width, height), (int(w), int(h)), (0, 0), (int(w), int(h)))


class RowEndTokens(GridTokens):
    """Emu3's: the picture resized to multiples of its VQ-VAE's block within the image
    processor's pixel bounds (its `smart_resize`, no crop), a code a block, row by row,
    each row followed by a row-end token its processor writes as an image token too
    ("↵ r": no box)."""

    def __init__(self, image_processor: Any, patch: int) -> None:
        from transformers.models.emu3 import image_processing_emu3 as emu3

        if getattr(image_processor, "spatial_factor", None) != patch:
            raise CheckpointError(
                f"its image processor's spatial_factor is not its VQ-VAE's block ({patch})"
            )
        self.image_processor, self.patch, self._resize = image_processor, patch, emu3.smart_resize

    def place(self, width: int, height: int) -> Geometry:
        p = self.image_processor
        h, w = self._resize(height, width, factor=p.spatial_factor, min_pixels=p.min_pixels,
                            max_pixels=p.max_pixels)  # fmt: skip
        return Geometry((width, height), (w, h), (0, 0), (w, h))

    def count(self, width: int, height: int) -> int:
        w, h = self.place(width, height).size
        return (h // self.patch) * (w // self.patch + 1)

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        return self.rows_ended(width, height)
