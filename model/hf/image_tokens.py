"""What a vision-language model's processor turns a picture into in the prompt: the token
written where the picture goes, the tokens around it, and where each of the image tokens
it becomes lies in the picture (`ImageTokens`), by the placing its processor's class
names (`image_tokens`): one per patch of the vision tower's grid after the processor's
resize and crop (LLaVA, Video-LLaVA, PaliGemma; DeepSeek-VL's, DeepSeek-VL-Hybrid's and
Janus's letterboxed square; Chameleon's VQ codes), a block of patches (Ovis2's), a square
grid of pooled patches (Gemma 3); tiles of merged patches and the whole picture's
thumbnail (tiles.py: Idefics3, SmolVLM, GraniteDocling; the canvas of tiles of Aya Vision,
InternVL and Qianfan-OCR; the base and any-resolution grid of LLaVA-NeXT, its Video and
OneVision, and Granite 4 Vision; MiniCPM-V's slices); the picture at its own resolution,
patches merged (resolution.py: Qwen2-VL and its kin, HunYuanVL's and HY-V4's rows, GLM-5's
padded canvas, LightOnOCR's Pixtral-sized picture, Emu3's codes); or learned queries with
no place on it (queries.py: Idefics2, BLIP-2, InstructBLIP, Aria, Kosmos-2 and 2.5,
DeepSeek-OCR-2's views)."""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

from ..checkpoints import CheckpointError
from ..patches import Geometry, ImagePosition, cells, padding_named
from .queries import VIEWS, ViewQueries, queries
from .resolution import (
    DynamicTokens,
    HunyuanTokens,
    PaddedDynamicTokens,
    RowEndTokens,
    RowTokens,
)
from .tiles import (
    TILING,
    AnyResTokens,
    CanvasTiles,
    DoclingTiles,
    SliceTokens,
    TiledTokens,
    per_tile,
)
from .vision import geometry


def image_token_of(config: Any, processor: Any) -> tuple[str, int]:
    """The token a prompt writes where a picture goes (the processor's), and the id of
    the tokens it becomes, one per position of the picture (the model's config's: Gemma
    3's processor writes <start_of_image>, which it expands into its soft tokens)."""
    token = getattr(processor, "image_token", None)
    token = getattr(token, "content", token)  # (BLIP-2's: an AddedToken)
    if {c.__name__ for c in type(processor).__mro__} & {"Kosmos2Processor", "Kosmos2_5Processor"}:
        # (their picture's tokens are placed by their image_embeds_position_mask, their
        # configs name no id: Kosmos-2.5's processor names its token, Kosmos-2's none, its
        # picture's tokens of distinct ids after the <image> it writes, its boi_token)
        token = token if isinstance(token, str) else processor.boi_token
        return token, processor.tokenizer.convert_tokens_to_ids(token)
    token_id = getattr(config, "image_token_id", None)
    token_id = getattr(config, "image_token_index", None) if token_id is None else token_id
    if token_id is None:
        token_id = getattr(processor, "image_token_id", None)
    if not isinstance(token, str) or not isinstance(token_id, int):
        raise CheckpointError(
            f"its processor ({type(processor).__name__}) names no image token: where a "
            "picture's patches lie in the prompt is unknown"
        )
    return token, token_id


def around_image(config: Any, processor: Any) -> tuple[str, str]:
    """The tokens a model's prompts write before and after a picture's image token, where
    its config names them (Qwen2-VL's <|vision_start|> and <|vision_end|>, which its
    positions over the picture are found by); else none."""
    ids = [getattr(config, f"vision_{edge}_token_id", None) for edge in ("start", "end")]
    tokenizer = getattr(processor, "tokenizer", None)
    # (else its processor's, where it names both: HunYuanVL's, which it requires around one)
    named = [getattr(processor, f"image_{edge}_token", None) for edge in ("start", "end")]
    if not all(isinstance(i, int) for i in ids) and all(isinstance(t, str) for t in named):
        return str(named[0]), str(named[1])
    if tokenizer is None or not all(isinstance(i, int) for i in ids):
        return "", ""
    before, after = tokenizer.convert_ids_to_tokens(ids)
    return str(before or ""), str(after or "")


class ImageTokens(Protocol):
    """Where a processor puts a picture's image tokens in the prompt, and what each is."""

    # a token's height and width in the pixels the model reads (a patch, or a block of
    # them merged into one token)
    patch: int

    def count(self, width: int, height: int) -> int:
        """The image tokens a picture of this size becomes."""
        ...

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        """What each image token of a picture is, in the prompt's order."""
        ...


# the placings mapped, as a refusal names them
MAPPED = (
    "LLaVA's, Video-LLaVA's, PaliGemma's, DeepSeek-VL's (and its Hybrid's) and Janus's (a "
    "token a patch), Ovis2's "
    "(a token a block of patches, the picture untiled), Gemma 3's (pooled), Idefics3's, "
    "SmolVLM's, GraniteDocling's, Aya Vision's, InternVL's and Qianfan-OCR's (tiles and a "
    "thumbnail), LLaVA-NeXT's, LLaVA-OneVision's and Granite 4 Vision's (a base and an "
    "any-resolution grid), Qwen2-VL's and its kin's, HunYuanVL's and LightOnOCR's (its own "
    "resolution, patches merged), Idefics2's, BLIP-2's, InstructBLIP's, Kosmos-2's, "
    "Kosmos-2.5's and Aria's (a resampler's learned queries, no place on the picture), "
    "Chameleon's and Emu3's (a VQ-VAE's codes), DeepSeek-OCR-2's (its encoder's queries of "
    "each view) and MiniCPM-V's (the picture and its slices) are"
)


def sent(processor: Any, name: str) -> Any:
    """An image processor's setting as its processor sends it: the processor's class's own
    (Aya Vision's and InternVL's crop_to_patches, Aria's max_image_size), else the image
    processor's."""
    said = dict(getattr(processor, "images_kwargs", None) or {})
    return said[name] if name in said else getattr(processor.image_processor, name, None)


def image_tokens(config: Any, processor: Any) -> ImageTokens:
    """How the folder's processor places a picture's tokens (by its class, or its
    pictures' half's: see the module's docstring); a CheckpointError naming why for any
    other, or for settings a placing does not map."""
    kinds = {c.__name__ for c in type(processor).__mro__}  # (a pictures-only half: its own)
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        raise CheckpointError("its processor has no image processor: its picture is not read")
    vq = getattr(config, "vq_config", None)  # (Chameleon's and Emu3's VQ-VAE: a code a
    # block of 2^(levels - 1) pixels a side, its channel_multiplier's levels)
    block = 2 ** (len(vq.channel_multiplier) - 1) if vq is not None else 0
    if "ChameleonProcessor" in kinds and block:
        placed = PatchTokens(image_processor, block, cls_kept=False)
        stated = getattr(processor, "image_seq_length", None)
        if placed.count(1, 1) != stated:
            raise CheckpointError(
                f"its processor writes {stated!r} tokens a picture, where its VQ-VAE's grid "
                f"has {placed.count(1, 1)}: its picture's tokens cannot be placed"
            )
        return placed
    if "Emu3Processor" in kinds and block:
        if getattr(processor, "downsample_ratio", None) != block:
            raise CheckpointError("its processor's downsample_ratio is not its VQ-VAE's block")
        return RowEndTokens(image_processor, block)
    if "DeepseekOcr2Processor" in kinds:
        per = processor.patch_size * processor.downsample_ratio
        views = {name: sent(processor, name) for name in VIEWS}
        return ViewQueries(views, per, image_processor.size["height"])
    if kinds & {"Kosmos2Processor", "Kosmos2_5Processor"}:  # (its latent queries, as many
        # as its processor writes; Kosmos-2.5's over Pix2Struct's patches, no grid of a size)
        stated = getattr(processor, "num_image_tokens", None)
        return queries(getattr(config, "latent_query_num", None), stated)
    vision = getattr(config, "vision_config", None)
    patch = getattr(vision, "patch_size", None)
    if isinstance(patch, (list, tuple)) and len(set(patch)) == 1:  # (InternVL's: square)
        patch = patch[0]
    if not isinstance(patch, int) or patch <= 0:
        raise CheckpointError(
            f"its vision tower's patches are {patch!r}, not squares of a size: its picture's "
            "patches cannot be placed"
        )
    named = type(processor).__name__.removesuffix("Pictures")  # (vlm.pictures_half's)
    if "Granite4VisionProcessor" in kinds:  # (LLaVA-NeXT's grid, its patches' grid
        # shrunk by a windowed Q-Former: a query a block of its "q/w" rate's patches)
        if getattr(config, "vision_feature_select_strategy", "default") != "default":
            raise CheckpointError("Granite 4 Vision keeping its class tokens is not mapped yet")
        rate, said = str(getattr(config, "downsample_rate", "")), str(
            getattr(processor, "downsample_rate", ""))  # fmt: skip
        shrunk = re.fullmatch(r"([1-9][0-9]*)/([1-9][0-9]*)", rate)
        if rate != said or shrunk is None or (patch * int(shrunk[2])) % int(shrunk[1]):
            raise CheckpointError(f"its downsample rate {rate!r} ({said!r}) is not mapped")
        block = patch * int(shrunk[2]) // int(shrunk[1])
        return AnyResTokens(image_processor, block, getattr(config, "image_grid_pinpoints", None))
    if kinds & {"LlavaNextProcessor", "LlavaNextVideoProcessor"}:
        if getattr(config, "vision_feature_select_strategy", "default") != "default":
            raise CheckpointError("LLaVA-NeXT keeping its class tokens is not mapped yet")
        return AnyResTokens(image_processor, patch, getattr(config, "image_grid_pinpoints", None))
    if "LlavaOnevisionProcessor" in kinds:  # (SigLIP's patches, no class token)
        said = str(getattr(config, "vision_aspect_ratio", ""))
        most = re.fullmatch(r"anyres_max_([1-9][0-9]{0,2})", said)
        if most is None:
            raise CheckpointError(f"its vision_aspect_ratio {said[:40]!r} is not mapped")
        pinpoints = getattr(config, "image_grid_pinpoints", None)
        return AnyResTokens(image_processor, patch, pinpoints, int(most.group(1)))
    if kinds & {"LlavaProcessor", "VideoLlavaProcessor"}:
        strategy = getattr(config, "vision_feature_select_strategy", "default")
        if strategy in ("default", "full"):
            return PatchTokens(image_processor, patch, cls_kept=strategy == "full")
    if "PaliGemmaProcessor" in kinds:  # (SigLIP's patches, no class token)
        return PatchTokens(image_processor, patch, cls_kept=False)
    if kinds & {"DeepseekVLProcessor", "JanusProcessor", "DeepseekVLHybridProcessor"}:
        return SquareTokens(image_processor, patch)
    if "Ovis2Processor" in kinds:  # (the whole picture alone, patches merged stride x stride)
        if sent(processor, "crop_to_patches"):
            raise CheckpointError("Ovis2's pictures cut into tiles are not mapped yet")
        stride = getattr(vision, "hidden_stride", 1)
        if not isinstance(stride, int) or stride < 1:
            raise CheckpointError(f"its vision tower's hidden_stride {stride!r} is not mapped")
        return PatchTokens(image_processor, patch * stride, cls_kept=False)
    if "Gemma3Processor" in kinds:
        return PooledTokens(image_processor, int(getattr(config, "mm_tokens_per_image", 0)))
    if "LightOnOcrProcessor" in kinds:
        return RowTokens(image_processor, patch, int(getattr(config, "spatial_merge_size", 1)))
    if kinds & {"AyaVisionProcessor", "InternVLProcessor", "QianfanOCRProcessor"}:
        # (patches merged scale x scale: Aya Vision's downsample_factor, InternVL's and
        # Qianfan-OCR's downsample_ratio its inverse)
        ratio = getattr(config, "downsample_ratio", None)
        scale = round(1 / ratio) if ratio else int(getattr(config, "downsample_factor", 1))
        tiling = {name: sent(processor, name) for name in TILING}
        canvas = CanvasTiles(image_processor, patch, scale, tiling)
        return per_tile(canvas, getattr(processor, "image_seq_length", None))
    if "GraniteDoclingProcessor" in kinds:  # (its own grid of tiles, Idefics3's prompt)
        if sent(processor, "fine_route"):
            raise CheckpointError(
                "GraniteDocling's fine route (4 x a tile's tokens) is not mapped yet"
            )
        tiling = {name: sent(processor, name) for name in TILING}
        scale = int(getattr(vision, "scale_factor", 1))
        docling = DoclingTiles(image_processor, patch, scale, tiling)
        return per_tile(docling, getattr(processor, "image_seq_len", None))
    if kinds & {"Blip2Processor", "InstructBlipProcessor"}:  # (its Q-Former's queries)
        if not getattr(config, "use_decoder_only_language_model", True):
            raise CheckpointError(
                "its language model is an encoder-decoder (Flan-T5's): a picture read by one "
                "is not mapped yet"
            )
        stated = getattr(processor, "num_query_tokens", None)
        return queries(getattr(config, "num_query_tokens", None), stated)
    if "AriaProcessor" in kinds:  # (its projector's queries, by the picture's size)
        if sent(processor, "split_image"):
            raise CheckpointError("Aria's pictures split into crops are not mapped yet")
        side = sent(processor, "max_image_size")
        stated = dict(getattr(processor, "size_conversion", None) or {}).get(side)
        made = dict(getattr(config, "projector_patch_to_query_dict", None) or {})
        patches = (side // patch) ** 2 if isinstance(side, int) else None
        return queries(made.get(patches, made.get(str(patches))), stated)
    if "Idefics2Processor" in kinds:  # (its perceiver's latents)
        if sent(processor, "do_image_splitting"):
            raise CheckpointError("Idefics2's pictures split into four are not mapped yet")
        latents = getattr(getattr(config, "perceiver_config", None), "resampler_n_latents", 0)
        return queries(latents, getattr(processor, "image_seq_len", None))
    if kinds & {"Idefics3Processor", "SmolVLMProcessor"}:  # (SmolVLM: Idefics3's tiles)
        tiled = TiledTokens(image_processor, patch, int(getattr(config, "scale_factor", 1)))
        return per_tile(tiled, getattr(processor, "image_seq_len", None))
    if kinds & {"MiniCPMV4_6Processor", "MiniCPMV4_7Processor"}:
        # (its window merger's 2 x 2 and its merger's 2 x 2: "16x"; "4x" skips the first)
        merge = 2 if getattr(config, "downsample_mode", "16x") == "4x" else 4
        mapped = (
            tuple(getattr(config, "merge_kernel_size", ())) == (2, 2)
            and getattr(config, "merger_times", 1) == 1
            and tuple(getattr(vision, "window_kernel_size", ())) == (2, 2)
            and getattr(config, "insert_layer_id", 0) >= 0  # (else no window merger)
        )
        if not mapped:
            raise CheckpointError("its mergers' kernels, rounds or layer are not mapped")
        return SliceTokens(image_processor, patch, merge)
    if kinds & {"HunYuanVLProcessor", "HYV4VLProcessor"}:  # (its merger's newline a row;
        # HunYuanVL's begin and end too, HY-V4's none)
        if getattr(image_processor, "spatial_patch_size", 1) != 1:
            raise CheckpointError("HunYuanVL's spatial_patch_size other than 1 is not mapped")
        ends = "HunYuanVLProcessor" in kinds and getattr(processor, "cat_extra_token", True)
        return HunyuanTokens(image_processor, bool(ends))
    # (Qwen2-VL's image processor, which Qwen2.5-VL's and Qwen3-VL's processors use too)
    if {"merge_size", "temporal_patch_size"} <= set(vars(image_processor)):
        if hasattr(image_processor, "min_image_tokens"):  # (GLM-5's: bounded in tokens)
            return PaddedDynamicTokens(image_processor)
        return DynamicTokens(image_processor)
    raise CheckpointError(
        f"its processor ({named}) places a picture's tokens in a way not mapped yet: {MAPPED}"
    )


class PatchTokens:
    """One image token per patch of the vision tower's grid over the processor's pixels
    (its resize and centre crop: `geometry`), the class token first where it is kept
    (LLaVA's `vision_feature_select_strategy` "full")."""

    def __init__(self, image_processor: Any, patch: int, cls_kept: bool) -> None:
        self.image_processor, self.patch, self.cls_kept = image_processor, patch, cls_kept
        geometry(image_processor, 1, 1)  # (a resize it does not map refused when read)

    def grid(self, width: int, height: int) -> tuple[Any, int, int]:
        """(the geometry, rows, columns) of a picture of this size."""
        place = geometry(self.image_processor, width, height)
        return place, place.size[1] // self.patch, place.size[0] // self.patch

    def count(self, width: int, height: int) -> int:
        _, rows, columns = self.grid(width, height)
        return rows * columns + int(self.cls_kept)

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        place, rows, columns = self.grid(width, height)
        found = [ImagePosition("cls", "[CLS]")] if self.cls_kept else []
        return found + cells(place, rows, columns, (self.patch, self.patch))


class SquareTokens(PatchTokens):
    """DeepSeek-VL's and Janus's: the picture's longest side resized to the vision tower's
    square (each side rounded, at least `min_size`), the other padded on both sides to a
    square of a background colour (its `pad_to_square`); one token a patch, row by row. A
    token wholly in the padding (a banner's top rows) has no place on the picture: it is
    named "░ r,c", no patch."""

    def __init__(self, image_processor: Any, patch: int) -> None:
        self.image_processor, self.patch, self.cls_kept = image_processor, patch, False
        size = dict(image_processor.size)
        square, least = size.get("height"), getattr(image_processor, "min_size", None)
        if not isinstance(square, int) or square != size.get("width") or square < patch:
            raise CheckpointError(f"its image processor resizes to {size}: not a square")
        if not (image_processor.do_resize and image_processor.do_pad):
            raise CheckpointError("its image processor does not resize and pad to its square")
        if not isinstance(least, int) or not 0 < least <= square:
            raise CheckpointError(f"its image processor's min_size {least!r} is not mapped")
        self.square, self.least = square, least

    def grid(self, width: int, height: int) -> tuple[Any, int, int]:
        least, scale = self.least, self.square / max(width, height)
        w, h = max(round(width * scale), least), max(round(height * scale), least)
        side = max(w, h)
        place = Geometry((width, height), (w, h), (-((side - w) // 2), -((side - h) // 2)),
                         (side, side))  # fmt: skip
        return place, side // self.patch, side // self.patch

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        return padding_named(super().positions(width, height))


class PooledTokens:
    """Gemma 3's: the picture resized to the vision tower's square (no crop), its patches
    averaged into a grid of `tokens` (a square number), one token a cell, row by row."""

    def __init__(self, image_processor: Any, tokens: int) -> None:
        self.image_processor = image_processor
        self.side = math.isqrt(tokens)
        if tokens <= 0 or self.side**2 != tokens:
            raise CheckpointError(f"its config states {tokens} tokens a picture: no square grid")
        # (a cell's side in the pixels the model reads)
        self.patch = int(geometry(image_processor, 1, 1).size[0] // self.side)

    def grid(self, width: int, height: int) -> tuple[Geometry, float]:
        place = geometry(self.image_processor, width, height)
        return place, place.size[0] / self.side

    def count(self, width: int, height: int) -> int:
        return self.side**2

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        place, t = self.grid(width, height)
        return cells(place, self.side, self.side, (t, t))
