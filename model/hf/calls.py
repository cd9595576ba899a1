"""Which attention calls a transformers model makes, found by tracing one short forward
pass through the capturing attention: its architecture (decoder-only, encoder-only,
encoder-decoder), each call's attention type, layer and head shapes, and what the capture
cannot reproduce (refused, saying why)."""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any

import torch
from torch import Tensor, nn

from ..attention_types import ATTENTION_TYPES, AttentionSpec
from ..placement import device_of
from .capture import Call, Traced, calling


class BackendError(ValueError):
    """What a transformers model has that the capture cannot reach, said plainly."""


@functools.cache
def image_model_types() -> frozenset[str]:
    """The model types of image encoders: transformers' image classification and image
    feature extraction mappings, and its stand-alone vision towers (`..._vision_model`)."""
    from transformers.models.auto import modeling_auto as auto

    found = set(auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)
    found |= set(getattr(auto, "MODEL_FOR_IMAGE_MAPPING_NAMES", {}))
    found |= {t for t in auto.MODEL_MAPPING_NAMES if t.endswith("_vision_model")}
    return frozenset(found)


@functools.cache
def vision_language_types() -> frozenset[str]:
    """The model types of vision-language models: transformers' image-text-to-text mapping."""
    from transformers.models.auto import modeling_auto as auto

    return frozenset(getattr(auto, "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", {}))


@functools.cache
def vision_language_classes() -> frozenset[str]:
    """transformers' vision-language classes (its image-text-to-text mapping's)."""
    from transformers.models.auto import modeling_auto as auto

    named = getattr(auto, "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", {}).values()
    return frozenset(n for n in named if isinstance(n, str))


def hf_architecture(config) -> str:
    """decoder-only, encoder-only, encoder-decoder, image-encoder (it reads pictures) or
    vision-language (a decoder that reads pictures and text), from a transformers config."""
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    from transformers.models.auto import modeling_auto as auto

    # (an image type that is no language model: Llama 4's, Mllama's and Perceiver's types
    # are mapped for pictures and for text too, and read as text)
    texts = {*auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, *auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES}
    if config.model_type in image_model_types() and config.model_type not in texts:
        return "image-encoder"
    arch = (getattr(config, "architectures", None) or [""])[0]
    if config.model_type in vision_language_types() and (
        config.model_type not in texts  # (Gemma 3's type is a text model's too: its folder
        # (Emu3's is too: its pictures are read by a VQ-VAE, its vq_config)
        or (
            arch in vision_language_classes()
            and (hasattr(config, "vision_config") or hasattr(config, "vq_config"))
        )  # says)
    ):
        return "vision-language"

    masked = set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())
    base = set(auto.MODEL_MAPPING_NAMES.values()) if hasattr(auto, "MODEL_MAPPING_NAMES") else ()
    causal_types = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if arch.endswith(("ForCausalLM", "LMHeadModel")):
        return "decoder-only"
    if arch in masked or (
        arch in base and config.model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        return "encoder-only"
    if config.model_type in causal_types and config.model_type not in (
        auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        return "decoder-only"
    if config.model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "encoder-only"
    raise BackendError(f"{config.model_type!r} is neither a language model nor a text encoder")


def has_masked_lm_head(config) -> bool:
    """Whether a config's architecture is an encoder with its masked-LM head (its
    `architectures` name a ...ForMaskedLM class transformers maps for masked LM)."""
    from transformers.models.auto import modeling_auto as auto

    arch = (getattr(config, "architectures", None) or [""])[0]
    return arch.endswith("ForMaskedLM") and arch in set(
        auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES.values()
    )


def pixel_shape(config) -> tuple[int, int, int] | None:
    """(channels, height, width) of the pictures an image encoder's config states, or None
    where it reads token ids (a text model's config states no image size)."""
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None)
    if size is None:
        return None
    frames = getattr(vision, "num_frames", None)
    if isinstance(frames, int) and frames > 1:
        raise BackendError(f"it reads videos ({frames} frames a clip), not one picture")
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    return int(getattr(vision, "num_channels", 3)), int(height), int(width)


def reads_pixels(hf: Any) -> bool:
    """Whether a transformers model reads pictures alone (`pixel_values`, no token ids)."""
    parameters = inspect.signature(hf.forward).parameters
    return "pixel_values" in parameters and "input_ids" not in parameters


def patch_sequence(hf: Any, device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """For an encoder that reads a picture at its own resolution as a padded sequence of
    flattened patches (SigLIP 2's NaFlex: `spatial_shapes` beside the pixels), a trace
    input: its config's number of patches, of seeded noise, in a grid as square as fits;
    nothing for any other model."""
    if "spatial_shapes" not in inspect.signature(hf.forward).parameters:
        return {}
    vision = getattr(hf.config, "vision_config", None) or hf.config
    n, patch = int(vision.num_patches), int(vision.patch_size)
    side = math.isqrt(n)
    noise = torch.Generator().manual_seed(0)
    flat = getattr(vision, "num_channels", 3) * patch * patch
    return {
        "pixel_values": torch.randn(1, n, flat, generator=noise).to(device),
        "pixel_attention_mask": (torch.arange(n, device=device) < side * (n // side))[None].long(),
        "spatial_shapes": torch.tensor([[side, n // side]], device=device),
    }


def trace_inputs(
    architecture: str,
    device: str | torch.device = "cpu",
    token: int = 0,
    pixels: tuple[int, int, int] | None = None,
) -> dict[str, Tensor]:
    """A short input of each side, of different lengths (a cross-attention call is the one
    whose keys are the source's), every position `token`; for an image encoder, a
    picture of `pixels` (channels, height, width) of seeded noise (no two patches alike)."""
    if pixels is not None:
        noise = torch.Generator().manual_seed(0)
        return {"pixel_values": torch.randn(1, *pixels, generator=noise).to(device)}
    source = torch.full((1, 5), token, dtype=torch.long, device=device)
    target = torch.full((1, 3), token, dtype=torch.long, device=device)
    # (a 2-D mask of ones spares transformers a check that cannot run on the meta device)
    if architecture == "encoder-decoder":
        return {"input_ids": source, "decoder_input_ids": target,
                "attention_mask": torch.ones_like(source)}  # fmt: skip
    ids = target if architecture == "decoder-only" else source
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def classify(
    architecture: str, traced: list[Traced], encoder: nn.Module | None
) -> dict[str, list[Traced]]:
    """The calls of one traced pass by attention type, in the order of the forward pass."""
    in_encoder = {id(m) for m in encoder.modules()} if encoder is not None else set()
    by_type: dict[str, list[Traced]] = {t: [] for t in ATTENTION_TYPES}
    for call in traced:
        if architecture == "encoder-only" or id(call.module) in in_encoder:
            by_type["encoder.self"].append(call)
        elif architecture == "encoder-decoder" and call.key_length != call.query_length:
            by_type["decoder.cross"].append(call)
        else:
            by_type["decoder.self"].append(call)
    return {t: calls for t, calls in by_type.items() if calls}


def specs_of(by_type: dict[str, list[Traced]]) -> list[AttentionSpec]:
    specs = []
    for name, calls in by_type.items():
        shapes = {(c.query_heads, c.kv_heads, c.head_dim) for c in calls}
        if len(shapes) != 1:
            raise BackendError(
                f"its {name} attention has heads of several shapes across layers "
                f"{sorted(shapes)} (query heads, key/value heads, width): not supported"
            )
        ((q_heads, kv_heads, head_dim),) = shapes
        if q_heads % kv_heads:
            raise BackendError(f"{q_heads} query heads do not share {kv_heads} key/value heads")
        stack, module, rows, columns = ATTENTION_TYPES[name]
        specs.append(
            AttentionSpec(
                name, stack, module, len(calls), q_heads, kv_heads, head_dim, rows, columns
            )
        )
    return specs


def probe_token(hf: Any) -> int:
    """A token id to trace with whose embedding is no padding's zeros (which would make
    every attention output zero: then a gated output would look unchanged): the last of
    the vocabulary, or the one before where that is the padding id."""
    last = hf.get_input_embeddings().num_embeddings - 1
    return last - 1 if getattr(hf.config, "pad_token_id", None) == last else last


def _reads_output(traced: list[Traced], module: nn.Module, args: tuple) -> None:
    """A Linear's (or Conv1D's) pre-hook while tracing: where its input is the last
    attention call's output unchanged ((B, Tq, H, d) as (B, Tq, H * d)), it is that call's
    output projection."""
    last = traced[-1] if traced else None
    if last is None or last.output is None or not args or not isinstance(args[0], Tensor):
        return
    seen, output = args[0], last.output
    last.output = None  # (only the first projection after the call can be its own)
    # (an output of zeros would match a gated one as well: no proof)
    if (
        seen.shape == (*output.shape[:2], output.shape[2] * output.shape[3])
        and output.device.type != "meta"
        and bool(output.ne(0).any())
        and torch.equal(seen, output.reshape(seen.shape))
    ):
        last.projection = module


# what a processor gives a prompt per token: its token types (Qwen2-VL's, PaliGemma's,
# Gemma 3's; ERNIE 4.5-VL's for its experts: 0 for text), Kosmos-2's and Kosmos-2.5's
# picture's places (0 for text)
PER_TOKEN = ("token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids",
             "image_embeds_position_mask")  # fmt: skip


def grown(inputs: dict[str, Tensor], length: int) -> dict[str, Tensor]:
    """What a prompt reads besides its ids, for a sequence of `length` tokens that
    continues it: its token types (and Kosmos-2's and Kosmos-2.5's picture's places) run
    on with zeros (text), its attention mask (the Qwen Omni thinkers') with ones, the rest
    (a picture's pixels) as it is."""
    return {
        k: torch.nn.functional.pad(v, (0, length - v.size(-1)), value=int(k == "attention_mask"))
        if k in (*PER_TOKEN, "attention_mask") else v
        for k, v in inputs.items()
    }  # fmt: skip


def text_reader(hf: Any) -> Any:
    """What reads a text alone: the model, or, where its pass asks for a picture every
    time (BLIP-2's, InstructBLIP's; Kosmos-2's and Kosmos-2.5's, though their picture's
    input has a default), its language model, whose attention is the model's own (the
    same modules)."""
    reads = inspect.signature(hf.forward).parameters
    asked = reads.get("pixel_values")
    if asked is not None and asked.default is inspect.Parameter.empty:
        return getattr(hf, "language_model", hf)
    if "image_embeds_position_mask" in reads:  # (Kosmos-2's and Kosmos-2.5's: their text model)
        return getattr(hf, "text_model", hf)
    return hf


def trace(hf: Any, architecture: str) -> dict[str, list[Traced]]:
    """Every attention call of one short pass, by type; a BackendError where none goes
    through the attention interface."""
    traced: list[Traced] = []
    call = Call({}, {}, trace=traced)
    pixels = reads_pixels(hf)
    # (an image encoder's first parameter: a convolution's patch embedding, for instance)
    device = next(hf.parameters()).device if pixels else device_of(hf.get_input_embeddings())
    hooks = [
        m.register_forward_pre_hook(functools.partial(_reads_output, traced))
        for m in hf.modules()
        if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"
    ]
    if pixels:
        inputs = patch_sequence(hf, device)  # (NaFlex's; else a picture of its stated size)
        if not inputs:
            shape = pixel_shape(hf.config)
            if shape is None:
                raise BackendError("its config states no image size: no picture to trace it with")
            inputs = trace_inputs(architecture, device, pixels=shape)
    else:
        inputs = trace_inputs(architecture, device, probe_token(hf))
    # (a vision-language model whose pass asks for a picture, BLIP-2's: its language model
    # alone reads the text, as any such model's does without one)
    reader = hf if pixels else text_reader(hf)
    try:
        with torch.no_grad(), calling(call):
            reader(**inputs, **({} if pixels else {"use_cache": False}))
    finally:
        for hook in hooks:
            hook.remove()
    unknown = sorted({name for c in traced for name in c.unknown})
    if unknown:
        raise BackendError(
            f"its attention is passed {', '.join(unknown)}, which its own eager attention "
            "uses and the capture does not reproduce"
        )
    if not traced:
        raise BackendError(
            "its attention does not go through transformers' attention interface "
            "(attn_implementation): nothing to capture"
        )
    encoder = hf.get_encoder() if architecture == "encoder-decoder" else None
    by_type = classify(architecture, traced, encoder)
    if any(c.sees_later for c in by_type.get("decoder.self", [])):
        raise BackendError(
            "its decoder's tokens attend to later tokens (as a config with is_decoder "
            "false or bidirectional attention makes them): it cannot continue a prompt "
            "token by token"
        )
    if architecture == "encoder-decoder":
        missing = [t for t in ATTENTION_TYPES if t not in by_type]
        if missing:
            raise BackendError(
                f"its {' and '.join(missing)} attention does not go through transformers' "
                "attention interface (its own sparse or local attention): it cannot be captured"
            )
    return by_type
