"""GPT-2 (GPT2Model, GPT2LMHeadModel) from a Hugging Face folder onto our model code:
learned positions, Pre-LN LayerNorm, tanh-GELU, biases everywhere but the output, tied
embeddings, and the fused `c_attn` projection (a Conv1D: (d_model, 3 d_model), Q, K and V
side by side, the seed's fused-QKV layout) split into our wq, wk and wv."""

from __future__ import annotations

import torch

from ..checkpoints import CheckpointError
from ..config import Activation, ModelConfig
from .mapping import CHECKED_MAPPING, Adapter

ACTIVATIONS: dict[str, Activation] = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
}
# transformers' per-layer names (after `h.{i}.`) -> ours (after `decoder.{i}.`)
LAYER_NAMES = {
    "ln_1.weight": "self_attn_norm.gamma",
    "ln_1.bias": "self_attn_norm.beta",
    "attn.q.weight": "self_attn.wq.weight",
    "attn.q.bias": "self_attn.wq.bias",
    "attn.k.weight": "self_attn.wk.weight",
    "attn.k.bias": "self_attn.wk.bias",
    "attn.v.weight": "self_attn.wv.weight",
    "attn.v.bias": "self_attn.wv.bias",
    "attn.c_proj.weight": "self_attn.wo.weight",
    "attn.c_proj.bias": "self_attn.wo.bias",
    "ln_2.weight": "ffn_norm.gamma",
    "ln_2.bias": "ffn_norm.beta",
    "mlp.c_fc.weight": "feed_forward.w1.weight",
    "mlp.c_fc.bias": "feed_forward.w1.bias",
    "mlp.c_proj.weight": "feed_forward.w2.weight",
    "mlp.c_proj.bias": "feed_forward.w2.bias",
}
GLOBAL_NAMES = {
    "wte.weight": "decoder.tok_embed.weight",
    "wpe.weight": "decoder.pos.embedding.weight",
    "ln_f.weight": "decoder.final_norm.gamma",
    "ln_f.bias": "decoder.final_norm.beta",
    "lm_head.weight": "output.weight",
}
CONV1D = ("attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")  # stored (in, out)


def config_from_gpt2(hf: dict) -> ModelConfig:
    d_model = hf["n_embd"]
    activation = ACTIVATIONS.get(hf.get("activation_function", "gelu_new"))
    if activation is None:
        raise CheckpointError(f"the activation {hf['activation_function']!r} is not supported")
    if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("scale_attn_weights") is False:
        raise CheckpointError("GPT-2 attention scaled otherwise than by 1/sqrt(d_head)")
    return ModelConfig(
        architecture="decoder-only",
        target_vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=hf["n_head"],
        n_layers=hf["n_layer"],
        d_ff=hf.get("n_inner") or 4 * d_model,
        max_seq_len=hf["n_positions"],
        dropout=0.0,
        positional="learned",
        norm_placement="pre",
        norm="layernorm",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        fused_norm=True,  # torch's layer_norm, as transformers computes it
        activation=activation,
        bias=True,
        output_bias=False,
        embed_scale=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        pad_id=-1,
        bos_id=hf.get("bos_token_id", 50256),
        eos_id=hf.get("eos_token_id", 50256),
    )


def split_gpt2(tensors: dict[str, torch.Tensor], d_model: int) -> dict[str, torch.Tensor]:
    """The tensors in our Linear layout, under transformers' names: `c_attn` split into
    q, k and v, every Conv1D weight transposed; a tied lm_head left to the embedding."""
    out = {}
    for name, tensor in tensors.items():
        name = name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")) and tensor.dim() != 1:
            continue  # the causal-mask buffer older checkpoints saved: not a weight
        if name.endswith("attn.c_attn.weight"):
            for part, block in zip("qkv", tensor.split(d_model, dim=1), strict=True):
                out[name.replace("c_attn", part)] = block.t().contiguous()
        elif name.endswith("attn.c_attn.bias"):
            for part, block in zip("qkv", tensor.split(d_model), strict=True):
                out[name.replace("c_attn", part)] = block
        elif name.endswith(CONV1D):
            out[name] = tensor.t().contiguous()
        else:
            out[name] = tensor
    return out


def our_name(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] == "h" and len(parts) >= 3:
        inner = LAYER_NAMES.get(".".join(parts[2:]))
        return f"decoder.{parts[1]}.{inner}" if inner else None
    return GLOBAL_NAMES.get(name)


ADAPTER = Adapter(
    "gpt2",
    CHECKED_MAPPING + " (its fused c_attn split per head)",
    config_from_gpt2,
    our_name,
    split=lambda tensors, config: split_gpt2(tensors, config.d_model),
)
