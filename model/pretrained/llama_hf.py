"""The Llama family from a Hugging Face folder onto our model code: `llama`, `qwen2`
(biases on Q, K and V) and `mistral` (a sliding window): its config.json as our
decoder-only configuration (RMSNorm, SwiGLU, RoPE with its scaling) and its tensor names as
ours. (SmolLM2's GGUF file, the same family: model/pretrained/llama.py.)"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from .mapping import CHECKED_MAPPING, Adapter

# transformers' per-layer names (after `model.layers.{i}.`) -> ours (after `decoder.{i}.`)
LAYER_NAMES = {
    "input_layernorm": "self_attn_norm",
    "self_attn.q_proj": "self_attn.wq",
    "self_attn.k_proj": "self_attn.wk",
    "self_attn.v_proj": "self_attn.wv",
    "self_attn.o_proj": "self_attn.wo",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "feed_forward.w1",
    "mlp.up_proj": "feed_forward.w3",
    "mlp.down_proj": "feed_forward.w2",
}
GLOBAL_NAMES = {
    "embed_tokens": "decoder.tok_embed",
    "norm": "decoder.final_norm",
}


def rope_fields(hf: dict) -> dict:
    """RoPE's base and scaling as our config's fields, from `rope_theta`/`rope_scaling` or
    (transformers 5) `rope_parameters`: linear and llama3 scaling are read, any other
    (dynamic, yarn, longrope) is refused, named."""
    params, legacy = hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {}
    scaling = {**legacy, **params}
    named = (params.get("rope_type"), legacy.get("rope_type"), legacy.get("type"))
    rope_type = next((k for k in named if k not in (None, "default")), "default")
    if rope_type not in ("default", "linear", "llama3"):
        raise CheckpointError(
            f"RoPE scaling {rope_type!r} is not supported (default, linear and llama3 are)"
        )
    fields: dict[str, Any] = {
        "rope_theta": float(params.get("rope_theta") or hf.get("rope_theta") or 10000.0)
    }
    if rope_type == "default":
        return fields
    try:
        fields.update(rope_type=rope_type, rope_factor=float(scaling["factor"]))
        if rope_type == "llama3":
            fields.update(
                rope_low_freq_factor=float(scaling["low_freq_factor"]),
                rope_high_freq_factor=float(scaling["high_freq_factor"]),
                rope_original_max_positions=int(scaling["original_max_position_embeddings"]),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"its {rope_type} RoPE scaling lacks or misstates {exc}") from None
    return fields


def config_from_llama(hf: dict, model_type: str) -> ModelConfig:
    """Our decoder-only configuration from a Llama-family config.json."""
    d_model, heads = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or d_model // heads
    if head_dim * heads != d_model:
        raise CheckpointError(
            f"head_dim {head_dim} x {heads} heads is not hidden_size {d_model}: not supported"
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"the activation {hf['hidden_act']!r} is not supported (silu is)")
    if hf.get("attention_bias") or hf.get("mlp_bias"):
        raise CheckpointError("attention_bias / mlp_bias Llama models are not supported yet")
    if model_type == "qwen2" and hf.get("use_sliding_window"):
        raise CheckpointError("Qwen2's per-layer sliding window is not supported yet")
    eos = hf.get("eos_token_id")
    return ModelConfig(
        architecture="decoder-only",
        sliding_window=hf.get("sliding_window") if model_type == "mistral" else None,
        target_vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=heads,
        n_kv_heads=hf.get("num_key_value_heads") or heads,
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_seq_len=hf.get("max_position_embeddings", 2048),
        dropout=0.0,
        positional="rotary",
        **rope_fields(hf),
        norm_placement="pre",
        norm="rmsnorm",
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        activation="silu",
        gated_ffn=True,
        bias=False,
        qkv_bias=model_type == "qwen2",
        embed_scale=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        pad_id=-1,
        bos_id=int(hf["bos_token_id"]) if hf.get("bos_token_id") is not None else 1,
        eos_id=(eos[0] if isinstance(eos, list) else eos) if eos is not None else 2,
    )


def our_name(name: str) -> str | None:
    """Our parameter name for one of transformers' (a bare LlamaModel's, or under the
    `model.` of LlamaForCausalLM); None if it has none."""
    if name == "lm_head.weight":
        return "output.weight"
    name = name.removeprefix("model.")
    parts = name.split(".")
    if parts[0] == "layers" and len(parts) >= 4:
        inner, leaf = ".".join(parts[2:-1]), parts[-1]
        if inner in LAYER_NAMES:
            return f"decoder.{parts[1]}.{LAYER_NAMES[inner]}.{leaf}"
    if len(parts) == 2 and parts[0] in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[parts[0]]}.{parts[1]}"
    return None


ADAPTERS = (
    Adapter("llama", CHECKED_MAPPING, partial(config_from_llama, model_type="llama"), our_name),
    Adapter("mistral", CHECKED_MAPPING + " (its sliding window too)",
            partial(config_from_llama, model_type="mistral"), our_name),
    Adapter("qwen2", CHECKED_MAPPING + " (its Q/K/V biases too)",
            partial(config_from_llama, model_type="qwen2"), our_name),
)  # fmt: skip
