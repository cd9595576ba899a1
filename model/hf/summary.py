"""Our `ModelConfig` of a transformers model: what the app reads of it (sizes, ids,
positions), from its config and the attention types its trace found."""

from __future__ import annotations

from typing import cast

from ..attention_types import AttentionSpec
from ..config import Architecture, ModelConfig, Positional


def widest(width) -> int:
    """A feed-forward width, the widest where a config gives one per layer (Gemma 3n)."""
    return int(max(width) if isinstance(width, list) and width else width or 1)


def summary(
    hf_config,
    architecture: str,
    specs: list[AttentionSpec],
    positional: str,
    vocab: int | None = None,
    logits: int | None = None,
) -> ModelConfig:
    """Our config stating what the app reads of a transformers model (sizes, ids,
    positions; the computation itself is transformers'): from its config alone before
    its weights are read, with the loaded model's `vocab` and `logits` sizes after."""
    by_type = {s.type: s for s in specs}
    first = specs[0]
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    d_model = int(
        getattr(text, "hidden_size", 0)
        or getattr(text, "d_model", 0)
        or first.query_heads * first.head_dim
    )
    vocab = vocab or int(getattr(text, "vocab_size", 0) or 1)

    def token(name: str, default: int) -> int:
        value = getattr(text, name, None)
        if isinstance(value, list):
            value = value[0] if value else None
        return int(value) if isinstance(value, int) and value >= 0 else default

    encoder = by_type.get("encoder.self")
    decoder = by_type.get("decoder.self")
    theta = 10000.0
    params = getattr(text, "rope_parameters", None) or {}
    if isinstance(params, dict) and params.get("rope_theta"):
        theta = float(params["rope_theta"])
    return ModelConfig(
        architecture=cast(Architecture, architecture),
        source_vocab_size=vocab,
        target_vocab_size=(logits or vocab) if architecture != "encoder-only" else vocab,
        d_model=d_model,
        n_heads=first.query_heads,
        n_kv_heads=first.kv_heads,
        head_size=None if d_model == first.query_heads * first.head_dim else first.head_dim,
        n_layers=(encoder or decoder or first).layers,
        n_decoder_layers=decoder.layers if decoder is not None and encoder is not None else None,
        d_ff=widest(getattr(text, "intermediate_size", 0)),
        max_seq_len=int(getattr(text, "max_position_embeddings", 0) or 4096),
        dropout=0.0,
        positional=cast(Positional, positional),
        rope_theta=theta,
        pad_id=token("pad_token_id", -1)
        if architecture == "decoder-only"
        else token("pad_token_id", 0),
        bos_id=token("bos_token_id", 1),
        eos_id=token("eos_token_id", 2),
    )
