"""A picture read as learned queries, none of which has a place on it: a resampler's
(`QueryTokens`: Idefics2's perceiver, BLIP-2's and InstructBLIP's Q-Former, Aria's
projector, Kosmos-2's and Kosmos-2.5's latent queries) and DeepSeek-OCR-2's vision
encoder's queries of each view (`ViewQueries`)."""

from __future__ import annotations

from typing import Any

from ..checkpoints import CheckpointError
from ..patches import QUERY, ImagePosition


def queries(count: Any, stated: Any) -> QueryTokens:
    """A resampler's learned queries, where the tokens its processor writes a picture
    (its own setting) are as many; else a CheckpointError."""
    if not isinstance(count, int) or not 0 < count <= 4096 or stated != count:
        raise CheckpointError(
            f"its processor writes {stated!r} tokens a picture, where its resampler makes "
            f"{count!r}: its picture's tokens cannot be placed"
        )
    return QueryTokens(count)


class QueryTokens:
    """A resampler's learned queries (Idefics2's perceiver's latents, BLIP-2's and
    InstructBLIP's Q-Former's queries): a fixed number of tokens, each of which reads the
    whole picture through cross-attention, so none has a place on it ("◌ 3": no box)."""

    patch = 0  # (no patch: nothing of the picture is a token's own)

    def __init__(self, count: int) -> None:
        self.n = count

    def count(self, width: int, height: int) -> int:
        return self.n

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        return [ImagePosition("query", f"{QUERY} {k}") for k in range(self.n)]


# what DeepSeek-OCR-2's processor sends of its tiling
VIEWS = ("crop_to_patches", "min_patches", "max_patches", "tile_size")


class ViewQueries:
    """DeepSeek-OCR-2's: its vision encoder's learned queries (a causal flow over SAM's
    features of a view), those of each local tile of a picture wider than a tile first
    ("◌ 2,17": tile 2's query 17), then those of the whole picture letterboxed ("◌ ▣,17"),
    then one learned view separator; none has a place on the picture. `said`: VIEWS as
    its processor sends them; a view of `side` pixels has a query per `per` pixels of it,
    a side (its processor's patch_size x downsample_ratio)."""

    patch = 0

    def __init__(self, said: dict[str, Any], per: int, whole: int) -> None:
        self.said, self.per, self.whole = said, per, whole

    def _queries(self, side: int) -> int:
        n = -(-side // self.per)
        return n * n

    def tiles(self, width: int, height: int) -> int:
        from transformers.models.deepseek_ocr2 import image_processing_pil_deepseek_ocr2 as m

        said = self.said
        if not said["crop_to_patches"] or max(width, height) <= said["tile_size"]:
            return 0
        side = (said["tile_size"],) * 2
        columns, rows = m.get_optimal_tiled_canvas(
            (height, width), side, said["min_patches"], said["max_patches"]
        )
        return columns * rows

    def count(self, width: int, height: int) -> int:
        return len(self.positions(width, height))

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        found = [
            ImagePosition("query", f"{QUERY} {v},{k}")
            for v in range(self.tiles(width, height))
            for k in range(self._queries(self.said["tile_size"]))
        ]
        found += [
            ImagePosition("query", f"{QUERY} ▣,{k}") for k in range(self._queries(self.whole))
        ]
        return [*found, ImagePosition("extra", "⊢ views' separator")]
