"""A toy family of pretrained weights on our model code: what adding one takes. Phi-3 is
the Llama family with two fused projections, `qkv_proj` (Q, K and V stacked) and
`gate_up_proj` (the gate and the up projection stacked): its adapter splits them into
Llama's names and reads the rest as Llama's. This module and one line in
model/pretrained/adapters.py (the test puts it in `ADAPTERS`) are all it needs."""

from __future__ import annotations

import torch

from attnviz.model.config import ModelConfig
from attnviz.model.pretrained.llama_hf import config_from_llama, our_name
from attnviz.model.pretrained.mapping import Adapter

FUSED = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
         "mlp.gate_up_proj": ("gate_proj", "up_proj")}  # fmt: skip


def split(tensors: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Each fused weight as Llama's separate ones (Q's rows, then K's and V's)."""
    out = {}
    for name, tensor in tensors.items():
        inner = next((k for k in FUSED if f".{k}." in name), None)
        if inner is None:
            out[name] = tensor
            continue
        prefix, leaf = name.split(f".{inner}.")
        block = inner.split(".")[0]
        if block == "self_attn":
            kv = config.kv_heads * config.head_dim
            sizes = [config.d_model, kv, kv]
        else:
            sizes = [tensor.size(0) // 2] * 2
        for part, piece in zip(FUSED[inner], tensor.split(sizes), strict=True):
            out[f"{prefix}.{block}.{part}.{leaf}"] = piece
    return out


ADAPTER = Adapter(
    "phi3",
    "a toy: the Llama family with its projections fused",
    lambda hf: config_from_llama(hf, "llama"),
    our_name,
    split=split,
)
