"""Vision-language models on transformers' own code: a folder's model with its processor,
read offline; a picture and a text read in one captured pass of the language model, whose
sequence holds the picture's tokens.

Every position of that sequence says what it is (`ImagePosition`): a text token, or a
token of the picture with its place and its box in the picture's own pixels, by how the
folder's processor makes them (`ImageTokens`): one per patch of the vision tower's grid
after the processor's resize and crop (LLaVA), tiles of merged patches and the whole
picture's thumbnail (Idefics3, SmolVLM's shape), or the picture at its own resolution,
2 x 2 patches a token (Qwen2-VL). A text token's attention is drawn over the picture by
these boxes. The language model's attention is captured, as a decoder's is; the vision
tower's calls run through the same attention function, uncaptured (its own view is not
served yet)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ..checkpoints import CheckpointError
from ..hooks import NamesFilter
from ..long.reading import LONG_FROM, too_long
from ..patches import (
    PATCH,
    THUMBNAIL,
    Geometry,
    ImageMap,
    ImagePosition,
    PicturePrompt,
    PositionKind,
)
from ..pretrained.causal import CausalLM, but_logits
from ..runner import Capabilities, RunResult
from ..served import ServedModel
from .calls import BackendError
from .vision import geometry


def load_processor(folder: str | Path) -> Any:
    """A folder's processor (its image processor's PIL backend: torchvision is not
    installed), read offline; where its class also reads videos, which need torchvision,
    its pictures' half (`pictures_half`)."""
    import transformers

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return transformers.AutoProcessor.from_pretrained(
                folder, backend="pil", local_files_only=True, trust_remote_code=False
            )
    except ImportError as exc:
        half = pictures_half(Path(folder))
        if half is None:
            raise CheckpointError(f"transformers cannot read its processor: {exc}") from None
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                return half.from_pretrained(
                    folder, backend="pil", local_files_only=True, trust_remote_code=False
                )
        except (OSError, ValueError, KeyError, TypeError, ImportError) as again:
            raise CheckpointError(f"transformers cannot read its processor: {again}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"transformers cannot read its processor: {exc}") from None


def pictures_half(folder: Path) -> Any:
    """The folder's processor class without its video processor (which needs torchvision):
    transformers' own class, its pictures read by its own code; None where the class
    named takes no video processor."""
    import transformers

    named = None
    for file in ("processor_config.json", "preprocessor_config.json"):
        try:
            named = json.loads((folder / file).read_text(encoding="utf-8")).get("processor_class")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(named, str):
            break
    cls = getattr(transformers, named, None) if isinstance(named, str) else None
    if cls is None or "video_processor" not in inspect.signature(cls.__init__).parameters:
        return None

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        cls.__init__(self, image_processor, tokenizer, chat_template=chat_template, **kwargs)

    return type(f"{cls.__name__}Pictures", (cls,), {"__init__": __init__})


def image_token_of(config: Any, processor: Any) -> tuple[str, int]:
    """The token a prompt writes where a picture goes (the processor's), and the id of
    the tokens it becomes, one per position of the picture (the model's config's: Gemma
    3's processor writes <start_of_image>, which it expands into its soft tokens)."""
    token = getattr(processor, "image_token", None)
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


def image_tokens(config: Any, processor: Any) -> ImageTokens:
    """How the folder's processor places a picture's tokens: one token per patch of the
    vision tower's grid (LLaVA's), or tiles of merged patches and the whole picture's
    thumbnail (Idefics3's); a CheckpointError naming why for any other."""
    vision = getattr(config, "vision_config", None)
    patch = getattr(vision, "patch_size", None)
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None or not isinstance(patch, int):
        raise CheckpointError(
            "its processor has no image processor, or its vision tower states no patch "
            "size: its picture's patches cannot be placed"
        )
    named = type(processor).__name__
    kinds = {c.__name__ for c in type(processor).__mro__}  # (a pictures-only half: its own)
    if "LlavaProcessor" in kinds:
        strategy = getattr(config, "vision_feature_select_strategy", "default")
        if strategy in ("default", "full"):
            return PatchTokens(image_processor, patch, cls_kept=strategy == "full")
    if "PaliGemmaProcessor" in kinds:  # (SigLIP's patches, no class token)
        return PatchTokens(image_processor, patch, cls_kept=False)
    if "Gemma3Processor" in kinds:
        return PooledTokens(image_processor, int(getattr(config, "mm_tokens_per_image", 0)))
    if "Idefics3Processor" in kinds:
        return TiledTokens(image_processor, patch, int(getattr(config, "scale_factor", 1)))
    # (Qwen2-VL's image processor, which Qwen2.5-VL's and Qwen3-VL's processors use too)
    if {"merge_size", "temporal_patch_size"} <= set(vars(image_processor)):
        return DynamicTokens(image_processor)
    raise CheckpointError(
        f"its processor ({named}) places a picture's tokens in a way not mapped yet: "
        "LLaVA's (a token per patch), Idefics3's (tiles and a thumbnail) and Qwen2-VL's "
        "(its own resolution, patches merged) are"
    )


class PatchTokens:
    """One image token per patch of the vision tower's grid over the processor's pixels
    (its resize and centre crop: `geometry`), the class token first where it is kept
    (LLaVA's `vision_feature_select_strategy` "full")."""

    def __init__(self, image_processor: Any, patch: int, cls_kept: bool) -> None:
        self.image_processor, self.patch, self.cls_kept = image_processor, patch, cls_kept

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
        p = self.patch
        for r in range(rows):
            for c in range(columns):
                box = place.box(c * p, r * p, (c + 1) * p, (r + 1) * p)
                found.append(ImagePosition("patch", f"{PATCH} {r},{c}", 0, r, c, box))
        return found


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
        found = []
        for r in range(self.side):
            for c in range(self.side):
                box = place.box(c * t, r * t, (c + 1) * t, (r + 1) * t)
                found.append(ImagePosition("patch", f"{PATCH} {r},{c}", 0, r, c, box))
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
        self.tile = int(image_processor.max_image_size["longest_edge"])
        self.side = self.tile // patch // max(scale, 1)  # tokens a tile's side
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
        if rows * columns:
            place = Geometry((width, height), covered, (0, 0), covered)
            for tr in range(rows):
                for tc in range(columns):
                    for i in range(n):
                        for j in range(n):
                            r, c = tr * n + i, tc * n + j
                            box = place.box(c * t, r * t, (c + 1) * t, (r + 1) * t)
                            found.append(ImagePosition("patch", f"{PATCH} {r},{c}", 0, r, c, box))
        whole = Geometry((width, height), (self.tile, self.tile), (0, 0), (self.tile, self.tile))
        kind: PositionKind = "thumbnail" if rows * columns else "patch"
        mark = THUMBNAIL if rows * columns else PATCH
        for i in range(n):
            for j in range(n):
                box = whole.box(j * t, i * t, (j + 1) * t, (i + 1) * t)
                found.append(ImagePosition(kind, f"{mark} {i},{j}", 0, i, j, box))
        return found


class DynamicTokens:
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

    def place(self, width: int, height: int) -> Geometry:
        """Where the processor's pixels lie in a picture of this size."""
        size = self.image_processor.size
        h, w = self._resize(height, width, self.patch, min_pixels=size["shortest_edge"],
                            max_pixels=size["longest_edge"])  # fmt: skip
        return Geometry((width, height), (w, h), (0, 0), (w, h))

    def count(self, width: int, height: int) -> int:
        w, h = self.place(width, height).size
        return (w // self.patch) * (h // self.patch)

    def positions(self, width: int, height: int) -> list[ImagePosition]:
        place, t = self.place(width, height), self.patch
        found = []
        for r in range(place.size[1] // t):
            for c in range(place.size[0] // t):
                box = place.box(c * t, r * t, (c + 1) * t, (r + 1) * t)
                found.append(ImagePosition("patch", f"{PATCH} {r},{c}", 0, r, c, box))
        return found


class VisionLanguageLM(CausalLM):
    """A vision-language model served: a run reads a picture and a text (the prompt: the
    picture's token, between the tokens the model writes around one, a line break and the
    text; or the text as written where it names the picture's token itself), the language
    model's pass over both captured; without a picture, its language model reads text as
    any decoder does."""

    capabilities = Capabilities(generation=True, pictures=True)
    processor: Any  # the folder's processor (AutoProcessor's)
    image_token: str  # what the processor writes where a picture goes, and its id
    image_token_id: int
    patches: ImageTokens
    around: tuple[str, str]  # what the model's prompts write before and after a picture
    separator: str  # what comes between the picture and the text

    @classmethod
    def of(cls, runner: CausalLM, processor: Any) -> VisionLanguageLM:
        """A decoder's runner (its tokenizer, stops, chat template) with its processor."""
        made = cls.__new__(cls)
        made.__dict__.update(runner.__dict__)
        made.processor = processor
        hf: Any = getattr(runner.model, "hf", None)  # (an HFTransformer's)
        made.image_token, made.image_token_id = image_token_of(hf.config, processor)
        made.patches = image_tokens(hf.config, processor)
        made.special_tokens = runner.special_tokens | {made.image_token}
        made.around = around_image(hf.config, processor)
        # (PaliGemma's and Gemma 3's processors write their own bos and line breaks)
        kinds = {c.__name__ for c in type(processor).__mro__}
        made.separator = "" if kinds & {"PaliGemmaProcessor", "Gemma3Processor"} else "\n"
        return made

    def with_model(self, model: ServedModel) -> VisionLanguageLM:
        twin = super().with_model(model)
        return VisionLanguageLM.of(twin, self.processor)

    def read_long(self, max_capture_bytes: int) -> VisionLanguageLM:
        return VisionLanguageLM.of(super().read_long(max_capture_bytes), self.processor)

    def picture_prompt(self, text: str | None) -> str:
        """The prompt a picture and a text make (see the class)."""
        text = text or ""
        if self.image_token in text:
            return text
        before, after = self.around
        return f"{before}{self.image_token}{after}{self.separator}{text}"

    def positions_read(self, width: int, height: int) -> int:
        return self.patches.count(width, height)

    def read_prompt(self, picture: Any, text: str | None) -> PicturePrompt:
        """A picture and a text as the processor makes them: the prompt, its ids, what
        the model reads besides them (the picture's pixels), and what each position is."""
        prompt = self.picture_prompt(text)
        made = self.processor(images=picture, text=prompt, return_tensors="pt")
        ids: list[int] = made["input_ids"][0].tolist()
        most = min(self.max_tokens, LONG_FROM)
        if len(ids) > most:
            raise too_long(len(ids), most, self.model.config.max_seq_len)
        placed = self.patches.positions(*picture.size)
        at = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(at) != len(placed):
            raise BackendError(
                f"its processor put {len(at)} image tokens in the prompt where its vision "
                f"tower's grid has {len(placed)}: its patches cannot be placed"
            )
        model: Any = self.model  # (an HFTransformer)
        inputs = {
            k: v.to(model.input_device, model.hf.dtype if v.is_floating_point() else v.dtype)
            for k, v in made.items()
            if k not in ("input_ids", "attention_mask", "labels") and isinstance(v, torch.Tensor)
        }
        positions = [ImagePosition("text", token) for token in self.shown(ids)]
        for i, position in zip(at, placed, strict=True):
            positions[i] = position
        return PicturePrompt(prompt, ids, inputs, positions)

    @torch.no_grad()
    def read_picture(
        self,
        picture: Any,
        digest: str,
        text: str | None = None,
        names_filter: NamesFilter = None,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        """One pass of the language model over the prompt a picture and a text make, and
        the tokens generated after it (`continuation`)."""
        read = self.read_prompt(picture, text)
        ids, generated = read.ids, list(continuation)
        context = self.model.config.max_seq_len
        if len(ids) + len(generated) > context:
            raise too_long(len(ids) + len(generated), context, context)
        names = but_logits if names_filter is None else names_filter
        model: Any = self.model
        # what the processor gives per token (Qwen2-VL's token types: 0 for text) runs on
        # over the generated tokens
        inputs = {
            k: F.pad(v, (0, len(generated))) if v.dim() == 2 and v.shape[-1] == len(ids) else v
            for k, v in read.inputs.items()
        }
        logits, capture = model.run_with_capture(
            torch.tensor([[*ids, *generated]]), names_filter=names, **inputs
        )
        predicted = logits[0].argmax(-1).tolist()
        last = logits[0, len(ids) - 1 :]
        result = self._result(read.prompt, ids, generated, capture, predicted, last, False, None)
        shown = read.shown(result.source_tokens)
        result.source_tokens = result.target_tokens = shown
        positions = read.positions + [ImagePosition("text", t) for t in shown[len(ids) :]]
        result.image = ImageMap(digest, picture.size, positions, (self.patches.patch,) * 2)
        return result
