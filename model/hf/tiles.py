"""Placings of a vision-language model's picture tokens that cut the picture into tiles,
squares or slices read one by one by the vision tower: Idefics3's (SmolVLM's) tiles and
thumbnail, GotOcr2's canvas of tiles (Aya Vision, InternVL, Qianfan-OCR) and
GraniteDocling's grid of them, LLaVA-NeXT's (LLaVA-OneVision's, Granite 4 Vision's) base
square and any-resolution grid, MiniCPM-V's whole picture and its slices. The others, and
which placing a processor has: image_tokens.py."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from ..checkpoints import CheckpointError
from ..patches import Geometry, ImagePosition, PositionKind, cells
from .vision import shape_only


def per_tile(tiled: TiledTokens, stated: Any) -> TiledTokens:
    """The placing, where the tokens its processor writes a tile (its own setting, None
    where it states none) are those the vision tower makes of one; else a CheckpointError
    (a folder's setting is not trusted to size a prompt)."""
    if stated is not None and stated != tiled.side**2:
        raise CheckpointError(
            f"its processor writes {stated!r} tokens a tile, where its vision tower makes "
            f"{tiled.side**2}: its picture's tokens cannot be placed"
        )
    return tiled


def canvases(pinpoints: Any, side: int) -> list[tuple[int, int]]:
    """A config's grid pinpoints (LLaVA-NeXT's canvases: height, width), each of at most
    64 x 64 of its squares of `side` pixels; a CheckpointError for any other."""
    found = []
    for pair in pinpoints if isinstance(pinpoints, (list, tuple)) else [None]:
        h, w = pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else (0, 0)
        if not (isinstance(h, int) and isinstance(w, int) and min(h, w) > 0):
            raise CheckpointError(f"its grid pinpoints {str(pinpoints)[:80]} are not mapped")
        if max(h, w) > 64 * side:
            raise CheckpointError(f"its grid pinpoint {h} x {w} is past 64 squares a side")
        found.append((h, w))
    return found


@dataclass(frozen=True)
class CanvasGrid:
    """A picture on LLaVA-NeXT's canvas: where it lies (`canvas`), where the grid's kept
    tokens start on the canvas (left, top), their rows and columns as the model reads
    them, and a token's width and height in the canvas's pixels."""

    canvas: Geometry
    first: tuple[int, int]
    rows: int
    columns: int
    token: tuple[float, float]


class AnyResTokens:
    """LLaVA-NeXT's any resolution: first the whole picture resized to the vision tower's
    square (its base: "▣ r,c"), then the picture resized within the best of its grid
    pinpoints (the aspect kept), centred on that canvas with padding, cut into squares
    each read by the tower, their patches joined into one grid over the canvas less the
    rows or columns of padding (transformers' `unpad_image`), row by row ("▦ r,c"), each
    row ended by a newline token ("↵ r"). One token a patch (the class token dropped).
    LLaVA-OneVision's (`most`: its "anyres_max_9"'s 9) resamples that grid down
    (bilinear) where it holds more than 1.1² times `most` squares' patches: a token is
    then a blend of the patches under its box, and of their neighbours by a patch's
    fraction."""

    def __init__(
        self, image_processor: Any, patch: int, pinpoints: Any, most: int | None = None
    ) -> None:
        size, crop = dict(image_processor.size), dict(image_processor.crop_size or {})
        square = size.get("shortest_edge") or (
            size.get("height") == size.get("width") and size.get("height")
        )
        side = crop.get("height", square) if crop else square
        if not isinstance(side, int) or not side == crop.get("width", side) == square:
            raise CheckpointError(
                f"its image processor resizes to {size} and crops {crop}: only a square "
                "resize to its crop is mapped"
            )
        self.image_processor, self.patch, self.side = image_processor, patch, int(side)
        self.pinpoints, self.most = canvases(pinpoints, self.side), most
        # (the processor counts a picture's tokens by its own pinpoints, the model and this
        # placing by the config's)
        if canvases(image_processor.image_grid_pinpoints, self.side) != self.pinpoints:
            raise CheckpointError(
                "its image processor's grid pinpoints are not its config's: its picture's "
                "tokens cannot be placed"
            )

    def layout(self, width: int, height: int) -> CanvasGrid:
        """Where a picture of this size lies on its canvas, and the grid of tokens the model
        reads over it."""
        import torch
        from transformers.image_processing_utils import (
            get_patch_output_size,
            select_best_resolution,
        )
        from transformers.models.llava_next.modeling_llava_next import unpad_image

        best_h, best_w = select_best_resolution((height, width), self.pinpoints)
        shape = shape_only(3, height, width)
        new_h, new_w = get_patch_output_size(shape, (best_h, best_w), "channels_first")
        paste = ((best_w - new_w) // 2, (best_h - new_h) // 2)
        canvas = Geometry((width, height), (new_w, new_h), (-paste[0], -paste[1]),
                          (best_w, best_h))  # fmt: skip
        n, p = self.side // self.patch, self.patch
        rows, columns = best_h // self.side * n, best_w // self.side * n
        # (the model's own unpadding, of a grid that holds no memory: it cuts as many rows,
        # or columns, from either side; a banner far wider than tall keeps none of its rows,
        # its base alone, one far taller than wide none of its columns, its newlines too)
        kept = unpad_image(torch.zeros(1, 1, 1).expand(1, rows, columns), (height, width))
        _, kept_rows, kept_columns = kept.shape
        first = ((columns - kept_columns) // 2 * p, (rows - kept_rows) // 2 * p)
        # (LLaVA-OneVision's resampling down: its `pack_image_features`'s rule)
        ratio = math.sqrt(kept_rows * kept_columns / (self.most * n * n)) if self.most else 0.0
        read = (int(kept_rows // ratio), int(kept_columns // ratio)) if ratio > 1.1 else None
        rows, columns = read or (kept_rows, kept_columns)
        token = (kept_columns * p / columns if columns else p, kept_rows * p / rows if rows else p)
        return CanvasGrid(canvas, first, rows, columns, token)

    def count(self, width: int, height: int) -> int:
        grid = self.layout(width, height)
        return (self.side // self.patch) ** 2 + grid.rows * (grid.columns + 1)

    def token_size(self, width: int, height: int) -> tuple[float, float]:
        """(height, width) of a grid token in the pixels the model reads: a patch's, or
        more where LLaVA-OneVision resamples the grid down."""
        w, h = self.layout(width, height).token
        return h, w

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        grid = self.layout(width, height)
        n, p = self.side // self.patch, self.patch
        base = Geometry((width, height), (self.side, self.side), (0, 0), (self.side, self.side))
        found = cells(base, n, n, (p, p), "thumbnail")
        (x, y), (_, th) = grid.first, grid.token
        for r in range(grid.rows):
            found += cells(grid.canvas, 1, grid.columns, grid.token, first=(r, 0),
                           at=(x, y + r * th))  # fmt: skip
            found.append(ImagePosition("extra", f"↵ {r}"))
        return found


class TiledTokens:
    """Idefics3's tiles (SmolVLM's too): the picture resized (its longest side to
    `size`, then each side up to a multiple of the tile), cut into tiles row by row, each
    tile's patches merged `scale` x `scale` into one token (its pixel shuffle), row by
    row; then the whole picture as one more tile (its thumbnail). A tile's token is
    named by its place in the grid over the whole picture ("▦ 3,5"), a thumbnail's by its
    place in the thumbnail's grid ("▣ 1,0")."""

    def __init__(self, image_processor: Any, patch: int, scale: int) -> None:
        self.image_processor = image_processor
        self.tiled(int(image_processor.max_image_size["longest_edge"]), patch, scale)

    def tiled(self, tile: int, patch: int, scale: int) -> None:
        """Tiles of `tile` pixels a side, `patch` x `scale` pixels a token."""
        self.tile, self.side = tile, tile // patch // max(scale, 1)  # (tokens a tile's side)
        if self.side < 1:
            raise CheckpointError(f"its tiles of {tile} pixels hold no token of {patch * scale}")
        self.patch = self.tile // self.side

    def tiles(self, width: int, height: int) -> tuple[int, int, tuple[int, int]]:
        """(rows, columns) of tiles of a picture of this size (0, 0: one tile, no
        thumbnail), and the size (width, height) the tiles cover, as the processor's own
        count has them."""
        _, rows, columns = self.image_processor.get_number_of_image_patches(height, width)
        return rows, columns, (columns * self.tile, rows * self.tile)

    def count(self, width: int, height: int) -> int:
        rows, columns, _ = self.tiles(width, height)
        return (rows * columns + 1) * self.side**2

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        rows, columns, covered = self.tiles(width, height)
        found: list[ImagePosition] = []
        n, t = self.side, self.patch
        place = Geometry((width, height), covered, (0, 0), covered)
        for tr in range(rows):  # (each tile's tokens, named by their place over the picture)
            for tc in range(columns):
                found += cells(place, n, n, (t, t), first=(tr * n, tc * n),
                               at=(tc * n * t, tr * n * t))  # fmt: skip
        whole = Geometry((width, height), (self.tile, self.tile), (0, 0), (self.tile, self.tile))
        kind: PositionKind = "thumbnail" if rows * columns else "patch"
        return found + cells(whole, n, n, (t, t), kind)


TILING = ("crop_to_patches", "min_patches", "max_patches")


class CanvasTiles(TiledTokens):
    """GotOcr2's image processor's tiles (Aya Vision's, InternVL's, Qianfan-OCR's): the
    picture resized onto the canvas of whole square tiles whose shape is nearest its own
    (its `get_optimal_tiled_canvas`, between its least and most tiles), cut into tiles row
    by row, then the whole picture resized into one more (its thumbnail) where there are
    several; each tile's patches merged `scale` x `scale` into one token, row by row."""

    def __init__(self, image_processor: Any, patch: int, scale: int, tiling: dict) -> None:
        size = image_processor.size
        if size.get("height") != size.get("width"):
            raise CheckpointError(f"its image processor's tiles are {dict(size)}: not squares")
        self.image_processor = image_processor
        self.tiled(int(size["height"]), patch, scale)
        module = sys.modules[type(image_processor).__module__]
        self._canvas: Any = getattr(module, "get_optimal_tiled_canvas", None)
        self.tiling = tiling  # (TILING's settings, as the processor sends them)
        if self._canvas is None or None in self.tiling.values():
            raise CheckpointError(
                f"its image processor ({type(image_processor).__name__}) states no canvas of "
                "tiles: its picture's tokens cannot be placed"
            )
        # (transformers tries every canvas of up to its most tiles, on each picture)
        least, most = self.tiling["min_patches"], self.tiling["max_patches"]
        if not (isinstance(most, int) and isinstance(least, int) and 0 < least <= most <= 256):
            raise CheckpointError(f"its tiles, {least!r} to {most!r} a picture, are not mapped")

    def tiles(self, width: int, height: int) -> tuple[int, int, tuple[int, int]]:
        tiling, whole = self.tiling, (self.tile, self.tile)
        if not tiling["crop_to_patches"] or tiling["max_patches"] <= 1:
            return 0, 0, whole
        columns, rows = self._canvas((height, width), whole, tiling["min_patches"],
                                     tiling["max_patches"])  # fmt: skip
        if rows * columns <= 1:
            return 0, 0, whole
        return rows, columns, (columns * self.tile, rows * self.tile)


class DoclingTiles(CanvasTiles):
    """GraniteDocling's tiles: GotOcr2's canvas of square tiles (CanvasTiles), its grid by
    its image processor's own rule (`get_tile_grid`: at most 16 tiles a side, and its
    dense pages' spread), the whole picture's thumbnail after them where there are several;
    a tile's patches merged `scale` x `scale` into one token (Idefics3's pixel shuffle)."""

    def tiles(self, width: int, height: int) -> tuple[int, int, tuple[int, int]]:
        rows, columns = self.image_processor.get_tile_grid(height, width, dict(self.tiling))
        if rows * columns <= 1:
            return 0, 0, (self.tile, self.tile)
        return rows, columns, (columns * self.tile, rows * self.tile)


class SliceTokens:
    """MiniCPM-V's (4.6, 4.7): the whole picture resized (its image processor's
    find_best_resize: about scale_resolution² pixels, sides whole tokens), then, where the
    picture is larger than that, its slices (get_sliced_grid's rows x columns of the
    picture resized by get_refine_size), each slice its own grid, slice after slice, row by
    row; a token a `merge` x `merge` block of patches. The whole picture's tokens are a
    thumbnail ("▣ r,c") where it is sliced."""

    def __init__(self, image_processor: Any, patch: int, merge: int) -> None:
        if getattr(image_processor, "patch_size", None) != patch:
            raise CheckpointError("its image processor's patch_size is not its vision tower's")
        self.p, self.patch = image_processor, patch * merge

    def layout(self, width: int, height: int) -> tuple[tuple[int, int], Any, Any]:
        p, size = self.p, (height, width)
        grid = (p.get_sliced_grid(size, p.max_slice_nums, p.scale_resolution)
                if p.slice_mode else None)  # fmt: skip
        h, w = p.find_best_resize(size, p.scale_resolution, p.patch_size, p.downsample_mode,
                                  allow_upscale=grid is None)  # fmt: skip
        refine = grid and p.get_refine_size(size, grid, p.scale_resolution, p.patch_size,
                                            p.downsample_mode, allow_upscale=True)  # fmt: skip
        return (w, h), grid, refine

    def count(self, width: int, height: int) -> int:
        return len(self.positions(width, height))

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        (w, h), grid, refine = self.layout(width, height)
        t = self.patch
        whole = Geometry((width, height), (w, h), (0, 0), (w, h))
        found = cells(whole, h // t, w // t, (t, t), "thumbnail" if grid else "patch")
        if grid:
            (rh, rw), (rows, columns) = refine, grid
            sh, sw = rh // rows, rw // columns
            place = Geometry((width, height), (rw, rh), (0, 0), (rw, rh))
            for r in range(rows):
                for c in range(columns):
                    first, at = (r * (sh // t), c * (sw // t)), (c * sw, r * sh)
                    found += cells(place, sh // t, sw // t, (t, t), first=first, at=at)
        return found
