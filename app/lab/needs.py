"""What an experiment or a head view may need of a model, each need once: how a model is
found to have it, and what a model that lacks it does not do (said in the 422 of an
experiment it cannot run). A new need is one line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..catalog.zoo import ModelEntry


@dataclass(frozen=True)
class Need:
    holds: Callable[[ModelEntry], bool]
    lacking: str  # what a model without it is said to do, after "it"


NEEDS: dict[str, Need] = {
    # (what every experiment reads so far: a model of pictures alone has none yet)
    "text": Need(lambda e: e.runner.capabilities.text, "reads pictures, and this reads a text"),
    "pictures": Need(
        lambda e: e.runner.capabilities.pictures,
        "reads no picture, and this measures a picture's patches",
    ),
    "encoder": Need(lambda e: e.config.has_encoder, "has no encoder"),
    "decoder": Need(lambda e: e.config.has_decoder, "has no decoder"),
    # (T5's relative bias: switched off at hook_pos too)
    "positions": Need(
        lambda e: e.config.positional in ("sinusoidal", "learned", "rotary", "relative"),
        "has no positional encoding to switch off",
    ),
    # decodes through a KV cache: an encoder-decoder's pieces or a generating model
    "cached_decoding": Need(
        lambda e: e.runner.capabilities.kv_cache or e.runner.capabilities.generation,
        "does not decode step by step, so there is no KV cache to show",
    ),
    "similarity": Need(lambda e: e.runner.capabilities.similarity, "makes no sentence embedding"),
    "generation": Need(
        lambda e: e.runner.capabilities.generation,
        "does not predict the next token of a text, so nothing is copied",
    ),
    "alti": Need(
        lambda e: e.alti,
        "has no self-attention stack ALTI reads (our model code's, or a decoder's whose "
        "residual stream is a sum of its blocks)",
    ),
    "residual_stream": Need(
        lambda e: e.residual_stream,
        "has no residual stream this reads: a decoder-only model whose layers add their "
        "attention's and feed-forward block's outputs to it",
    ),
    "serial_blocks": Need(
        lambda e: e.serial_blocks,
        "has no residual state between its attention and feed-forward blocks (they read "
        "the same input, or its stream is not read)",
    ),
    "value_norms": Need(
        lambda e: e.value_norms,
        "changes its attention's output (a gate, a norm) before its output projection "
        "reads it, so what each head adds is not one linear map of its values",
    ),
}


def lacking(entry: ModelEntry, needs: frozenset[str]) -> list[str]:
    """The needs a model lacks, by name."""
    return sorted(name for name in needs if not NEEDS[name].holds(entry))


# what a model whose matrices bitsandbytes packs cannot give: each reads a weight matrix
READS_WEIGHTS = frozenset({"alti", "residual_stream", "serial_blocks", "value_norms"})


def lacking_said(entry: ModelEntry, missing: list[str]) -> str:
    """Why a model lacks these needs, after "it": a quantized model's own reason where its
    packed matrices are why."""
    quantized = entry.origin.quantized if entry.origin is not None else None
    if quantized and READS_WEIGHTS & set(missing):
        rest = [NEEDS[n].lacking for n in missing if n not in READS_WEIGHTS]
        packed = f"stores its weight matrices in {quantized} (bitsandbytes), and this reads them"
        return " and ".join([packed, *rest])
    return " and ".join(NEEDS[n].lacking for n in missing)
