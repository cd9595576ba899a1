"""Tiny configurations shared by the model tests."""

from __future__ import annotations

import pytest
import torch

from attnviz.model import ModelConfig, Transformer


def tiny_config(**overrides) -> ModelConfig:
    base = dict(
        source_vocab_size=50,
        target_vocab_size=40,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        max_seq_len=128,
        dropout=0.0,
    )
    return ModelConfig(**{**base, **overrides})


def build(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(**overrides)).eval()


ARCH_CONFIGS = {
    "encoder-decoder": {},
    "encoder-only": dict(
        architecture="encoder-only",
        positional="learned",
        type_vocab_size=2,
        embed_norm=True,
        embed_scale=False,
        activation="gelu",
        norm_eps=1e-12,
    ),
    "decoder-only": dict(architecture="decoder-only", positional="rotary", norm_placement="pre"),
}
# the Llama family's options: RMSNorm, gated SwiGLU, grouped-query attention (2 key/value
# heads for 4 query heads), RoPE with its own base, tied embeddings, no biases, no padding
LLAMA = dict(
    architecture="decoder-only",
    positional="rotary",
    rope_theta=100000.0,
    norm_placement="pre",
    norm="rmsnorm",
    norm_eps=1e-5,
    activation="silu",
    gated_ffn=True,
    n_kv_heads=2,
    tie_embeddings=True,
    bias=False,
    embed_scale=False,
    pad_id=-1,
)
ARCH_CONFIGS["llama"] = LLAMA


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(1234)
