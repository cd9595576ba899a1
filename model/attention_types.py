"""The attention types a model has, as every layer names them: a type's stack, module,
layer and head counts, and the sides (source or target tokens) of its rows and columns.
The lowest of model/'s interfaces: the backends, the methods and the runners read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .config import ModelConfig

# Which token list an axis of an attention type belongs to: the encoder's input (source)
# or the tokens fed to the decoder (target).
Side = Literal["source", "target"]

# each captured kind's hook point in an attention module (AttentionSpec.hook names it)
HOOK_OF_KIND = {
    "weights": "hook_weights",
    "scores": "hook_scores",
    "mask": "hook_mask",
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
}


@dataclass(frozen=True)
class AttentionSpec:
    """One attention type of a model: where its modules sit and how many heads they have."""

    type: str  # "encoder.self", "decoder.self", "decoder.cross"
    stack: str  # the module holding the layers: "encoder" or "decoder"
    module: str  # the attention module within a layer: "self_attn" or "cross_attn"
    layers: int
    query_heads: int
    kv_heads: int  # equal to query_heads unless keys and values are shared (grouped-query)
    head_dim: int
    rows: Side  # the tokens of the queries
    columns: Side  # the tokens of the keys

    @property
    def self_attention(self) -> bool:
        return self.module == "self_attn"

    def hook(self, layer: int, point: str) -> str:
        """The hook name of `point` (e.g. "hook_weights") in `layer`."""
        return f"{self.stack}.{layer}.{self.module}.{point}"


# attention type -> (stack, module within a layer, query side, key side)
ATTENTION_TYPES: dict[str, tuple[str, str, Side, Side]] = {
    "encoder.self": ("encoder", "self_attn", "source", "source"),
    "decoder.self": ("decoder", "self_attn", "target", "target"),
    "decoder.cross": ("decoder", "cross_attn", "target", "source"),
}


def attention_specs(config: ModelConfig) -> list[AttentionSpec]:
    """The attention types a configuration builds, in the order of the forward pass."""
    present = {
        "encoder.self": config.has_encoder,
        "decoder.self": config.has_decoder,
        "decoder.cross": config.architecture == "encoder-decoder",
    }
    specs = []
    for name, (stack, module, rows, columns) in ATTENTION_TYPES.items():
        if present[name]:
            layers = config.n_layers if stack == "encoder" else config.decoder_layers
            heads = (config.n_heads, config.kv_heads, config.head_dim)  # query, key/value, dim
            specs.append(AttentionSpec(name, stack, module, layers, *heads, rows, columns))
    return specs
