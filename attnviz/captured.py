"""`attnviz.capture(model, text)`: one run's captured attention for your own analysis, the
same data `POST /api/v1/attention` serves, as torch tensors (`.numpy()` for numpy).

    import attnviz
    run = attnviz.capture("minilm", "The cat sat on the mat.")
    run.weights(layer=2)            # (heads, queries, keys), after softmax
    run.get("scores", layer=2)      # scaled, before the mask; also "mask", "q", "k", "v"
    run.get("norms", layer=2)       # value-weighted norms ‖α f(x)‖ (Kobayashi et al. 2020)
    run.tokens("source")

`model` is a shipped model's id (`attnviz.capture("smollm2", ...)`) or a path the server
reads (a folder in Hugging Face's layout, the repo id of one in the Hugging Face cache, a
Llama-family .gguf file), or a transformers model you have in memory with its tokenizer
(`attnviz.capture(model, text, tokenizer=tokenizer)`: nothing is written to disk, and your
objects are left as they were), read by the same backends as the server. A text longer than the
model reads is cut (`truncated`, `source_length` say so); SmolLM2 reads up to 8,192 tokens,
and past 512 its run keeps q, k and v but no whole (T, T) matrix (`get` says so)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from torch import Tensor

from .model.attention_types import HOOK_OF_KIND
from .model.long import LongCapture
from .model.patches import ImagePosition

Kind = Literal["weights", "scores", "mask", "q", "k", "v", "norms"]


@dataclass
class Captured:
    """One run of a model on one text: its tokens, what it output and every attention
    module's tensors, read by type, layer and kind (see `get`)."""

    model: str
    text: str
    source_tokens: list[str]  # one per encoder position (a decoder-only model: the prompt)
    target_tokens: list[str]  # one per decoder position fed (<bos> and the output), or []
    output_tokens: list[str]  # what the model produced (transcription, continuation)
    truncated: bool  # the text was longer than the model reads: cut to its first tokens
    source_length: int  # the text's tokens before any cut
    types: dict[str, dict[str, Any]]  # each attention type: layers, heads, rows, columns
    _runner: Any = field(repr=False)
    _result: Any = field(repr=False)
    # a picture's run: what each position is (class, register, or a patch with its row,
    # column and box in the picture's pixels); a text's run: none
    positions: list[ImagePosition] = field(default_factory=list)

    @classmethod
    def of(cls, name: str, runner: Any, result: Any) -> Captured:
        """A runner's run (a `RunResult`), by the name the model was read as; a picture's
        run keeps what each of its positions is."""
        return cls(
            model=name,
            text=result.text,
            source_tokens=list(result.source_tokens),
            target_tokens=list(result.target_tokens),
            output_tokens=list(result.output_tokens),
            truncated=result.truncated,
            source_length=result.source_length,
            types=types_of(runner.attention),
            _runner=runner,
            _result=result,
            positions=result.image.positions if result.image is not None else [],
        )

    def tokens(self, side: Literal["source", "target"]) -> list[str]:
        """The tokens of one side (an attention type's rows and columns name theirs)."""
        return self.source_tokens if side == "source" else self.target_tokens

    def get(self, kind: Kind = "weights", layer: int = 0, type: str | None = None) -> Tensor:
        """One layer's tensor of one attention type (default: the model's last type, e.g.
        decoder.self): weights, scores (H, Tq, Tk); mask (Tq, Tk), True where a query may
        attend; q (H, Tq, d); k, v (H_kv, Tk, d); norms (H, Tq, Tk)."""
        spec = self._spec(type)
        if not 0 <= layer < spec.layers:
            raise IndexError(f"layer {layer} out of range: {spec.type} has 0..{spec.layers - 1}")
        capture = self._result.captured
        if isinstance(capture, LongCapture) and kind in ("weights", "scores", "mask", "norms"):
            raise ValueError(
                f"this text is {len(self.source_tokens):,} tokens: past 512 a run keeps no "
                f"whole {kind} matrix (q, k and v are kept); read it by windows through the "
                "server (/api/v1/attention with rows, columns or pool), or capture a shorter text"
            )
        if kind == "norms":
            from .model.methods.value_norms import layer_norms

            return layer_norms(self._runner.model, capture, spec, layer)
        if kind not in HOOK_OF_KIND:
            raise ValueError(f"kind {kind!r} is none of {[*HOOK_OF_KIND, 'norms']}")
        tensor = capture[spec.hook(layer, HOOK_OF_KIND[kind])][0]
        return tensor[0] if kind == "mask" else tensor

    def weights(self, layer: int = 0, type: str | None = None) -> Tensor:
        """One layer's attention weights (H, Tq, Tk): each row sums to 1."""
        return self.get("weights", layer, type)

    def numpy(self, kind: Kind = "weights", layer: int = 0, type: str | None = None) -> np.ndarray:
        """`get` as a numpy array (float32, or bool for the mask)."""
        found = self.get(kind, layer, type).detach().cpu()
        return (found.float() if found.is_floating_point() else found).numpy()

    def _spec(self, type: str | None):
        specs = {s.type: s for s in self._runner.attention}
        chosen = type or next(reversed(specs))
        if chosen not in specs:
            raise KeyError(f"{self.model} has no attention of type {chosen!r}: {[*specs]}")
        return specs[chosen]


def kind_of(model: Any, tokenizer: Any = None) -> Literal["id", "path", "memory"]:
    """What `model` is: a shipped model's id, a path the server reads, or a transformers
    model in memory (with its tokenizer); a TypeError that says what it takes otherwise."""
    from .app.catalog.zoo import REGISTRY

    if isinstance(model, str | Path):
        if tokenizer is not None:
            raise TypeError("tokenizer= goes with a model in memory; a path brings its own")
        return "id" if isinstance(model, str) and model in REGISTRY else "path"
    if tokenizer is None:
        raise TypeError(
            f"model is a shipped model's id {sorted(REGISTRY)}, a path (a folder, a repo id "
            "in the Hugging Face cache, a .gguf file) or a transformers model with its "
            f"tokenizer (tokenizer=...), not {type(model).__name__} alone"
        )
    return "memory"


def memory_name(model: Any) -> str:
    """A model in memory's name: its config's name_or_path, or its class's name."""
    return getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__


def load(model: Any, tokenizer: Any = None) -> tuple[Any, str]:
    """A runner and its name: a shipped model's id, a path the server reads, or a
    transformers model in memory with its tokenizer."""
    from .app.catalog.zoo import REGISTRY
    from .app.settings import Settings
    from .model.hf.memory import from_memory
    from .model.pretrained.sources import load_origin

    kind = kind_of(model, tokenizer)
    if kind == "id":
        return REGISTRY[model].load(Settings()), model
    if kind == "path":
        runner, origin = load_origin(model)
        return runner, origin.shown
    name = memory_name(model)
    return from_memory(model, tokenizer, name), name


def types_of(attention: list) -> dict[str, dict[str, Any]]:
    """Each attention type's shape, as `Captured.types` says it."""
    named = ("layers", "query_heads", "kv_heads", "head_dim", "rows", "columns")
    return {spec.type: {n: getattr(spec, n) for n in named} for spec in attention}


def picture_of(image: Any) -> Any:
    """An image as a run reads it (an RGB PIL image, upright): a path to a PNG, JPEG or
    WebP file (read within the server's bounds: app/images.py), a PIL image, or an (H, W)
    or (H, W, 3) uint8 array."""
    from PIL import Image

    from .app.images import as_rgb, read_image_file, upright

    if isinstance(image, str | Path):
        return read_image_file(Path(image)).pixels
    if isinstance(image, Image.Image):
        return as_rgb(upright(image))
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3) or image.shape[2:] not in ((), (3,)):
            raise TypeError(
                f"an image array is (H, W) or (H, W, 3) uint8, not {image.shape} {image.dtype}"
            )
        return Image.fromarray(image).convert("RGB")
    raise TypeError(f"image: a path, a PIL image or a uint8 array, not {type(image).__name__}")


def capture_image(model: Any, image: Any, processor: Any = None) -> Captured:
    """Run an image encoder on a picture with every hook captured: `model` a folder (with
    its image processor's preprocessor_config.json) or a transformers model in memory with
    its `processor`."""
    from .app.images import digest
    from .model.hf.pictures import image_encoder_of, load_image_encoder
    from .model.hf.vision import ImageRunner

    if isinstance(model, str | Path):
        if processor is not None:
            raise TypeError("processor= goes with a model in memory; a folder brings its own")
        encoder, name = load_image_encoder(model), str(model)
    else:
        if processor is None:
            raise TypeError("a model in memory reads a picture with its image processor=")
        encoder, name = image_encoder_of(model, processor), memory_name(model)
    rgb = picture_of(image)
    result = ImageRunner(encoder).read_picture(rgb, digest(rgb))
    assert result.image is not None
    return Captured.of(name, encoder, result)


def capture_both(model: Any, text: str, image: Any, given: Any = None) -> Captured:
    """A vision-language model's folder run on a picture and a text, every hook of its
    language model captured; its positions say which are text and which the picture's."""
    from .app.images import digest
    from .model.runner import pictures

    if not isinstance(model, str | Path) or given is not None:
        raise TypeError(
            "a picture and a text are read together by a vision-language model's folder "
            "(its processor saved in it); a model in memory reads one or the other"
        )
    runner, name = load(model)
    if not runner.capabilities.text:
        raise TypeError(f"{name} reads a picture alone: leave the text out")
    if not runner.capabilities.pictures:
        raise TypeError(f"{name} reads text alone: leave the image out")
    rgb = picture_of(image)
    result = pictures(runner).read_picture(rgb, digest(rgb), text)
    assert result.image is not None
    return Captured.of(name, runner, result)


def capture(
    model: Any,
    text: str | None = None,
    tokenizer: Any = None,
    *,
    image: Any = None,
    processor: Any = None,
) -> Captured:
    """Run `model` on `text` with every hook captured (see the module's docstring); an
    image encoder (ViT, DeiT, DINOv2, SigLIP's or CLIP's vision tower) on `image`
    instead: a path, a PIL image or an array; its positions say which patch each is. A
    vision-language model's folder reads `image` and `text` together."""
    if image is not None and text is not None:
        return capture_both(model, text, image, tokenizer or processor)
    if image is not None:
        if tokenizer is not None:
            raise TypeError("an image encoder reads a picture alone: image= without text")
        return capture_image(model, image, processor)
    if text is None:
        raise TypeError("capture(model, text) or capture(model, image=...)")
    runner, name = load(model, tokenizer)
    result = runner.run(text)
    if result.capture is None:
        raise ValueError(f"{name} captured nothing on this text")
    return Captured.of(name, runner, result)
