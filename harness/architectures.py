"""A tiny random model of each text architecture the installed transformers has (from its
own auto mappings, not a hand list): made from its config class with SIZES (and what its
code needs besides, OVERRIDES), seeded, saved with `save_pretrained`, and its reference:
the same model run by transformers' eager attention. Used by the architecture matrix
(harness/matrix.py) and the tests that need a model of one architecture."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch

from attnviz.model.pretrained.backends import uses_attention_interface

VOCAB = 320  # harness/checkpoints.py's byte-level BPE tokenizer
SIZES = {  # what a tiny model has, by transformers' common attribute names
    "vocab_size": VOCAB, "hidden_size": 64, "d_model": 64, "n_embd": 64,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "num_attention_heads": 4,
    "n_head": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
    "ffn_dim": 96, "d_ff": 96, "max_position_embeddings": 256, "n_positions": 256,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "kv_lora_rank": 16,
    "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    # DeepSeek's sparse attention: each query's 4 keys (fewer than the prompt has)
    "index_topk": 4, "index_n_heads": 2, "index_head_dim": 16,
    "v_head_dim": 16, "rotary_dim": 8, "embedding_size": 64,
    "encoder_layers": 2, "decoder_layers": 2, "num_decoder_layers": 2,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_heads": 4, "d_kv": 16,
    "encoder_ffn_dim": 96, "decoder_ffn_dim": 96,
}  # fmt: skip
# What an architecture's default config needs besides SIZES to make a tiny model its own
# code accepts (a hybrid's attention layer where its default has none, sizes its
# validation ties together, a setting its forward pass requires)
OVERRIDES: dict[str, dict] = {
    "bamba": {"attn_layer_indices": [1]},  # (its default: state-space layers only)
    "bert-generation": {"is_decoder": True},  # (as its decoders' checkpoints state)
    "granitemoehybrid": {"layer_types": ["linear_attention", "attention"],
                         "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_chunk_size": 16},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}}},
    "qwen4_exp_text": {"indexer_budget": 8, "indexer_compress_ratio": 2, "indexer_n_heads": 2,
                       "indexer_kv_heads": 1, "indexer_head_dim": 16},
    "esmc": {"num_key_value_heads": 4},  # (no grouped-query attention)
    "zaya": {"num_experts_per_tok": 1},
    "xmod": {"default_language": "en_XX"},  # (its adapters' language)
    **{t: {"unpadded_vocab_size": VOCAB, "swa_num_attention_heads": 4, "swa_head_dim": 16,
           "swa_num_key_value_heads": 2}  # (as its full layers, as in its default)
       for t in ("inkling2_text", "inkling2_loop_text")},
    "gemma3n_text": {"vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 16,
                     "num_hidden_layers": 4, "num_kv_shared_layers": 2,
                     "layer_types": ["sliding_attention", "full_attention"] * 2},
}  # fmt: skip


def text_architectures() -> dict[str, str]:
    """model_type -> kind of every text architecture transformers' auto mappings name for
    language modelling (a config with sub-configs is multimodal and left out)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto as auto

    kinds: dict[str, str] = {}
    for model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        kinds[model_type] = "encoder-decoder"
    for model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        kinds.setdefault(model_type, "encoder-only")
    for model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        kinds.setdefault(model_type, "decoder-only")
    text = {}
    for model_type, kind in sorted(kinds.items()):
        try:
            config_class = CONFIG_MAPPING[model_type]
        except KeyError:
            continue
        if getattr(config_class, "sub_configs", None):
            continue  # multimodal (text_config, vision_config, ...)
        text[model_type] = kind
    return text


def interface_architectures() -> dict[str, str]:
    """The text architectures whose attention goes through the attention interface."""
    return {t: k for t, k in text_architectures().items() if uses_attention_interface(t)}


def stated(config, name: str):
    """A config's attribute, or None where it has none (or states it per layer only)."""
    try:
        return getattr(config, name, None)
    except Exception:  # (transformers' per-layer attributes raise their own error)
        return None


def has(config, name: str) -> bool:
    """Whether a config has an attribute stated for the whole model."""
    try:
        getattr(config, name)
    except Exception:  # missing, or per-layer only (transformers' own error)
        return False
    return True


def tiny_config(model_type: str, keep_layers: bool | int = False):
    """The architecture's default config made tiny: the sizes SIZES names that it has,
    passed to its constructor (so that what it derives from them, per-layer lists
    included, follows), no dropout, special ids within the vocabulary. `keep_layers`
    keeps its number of layers (a hybrid whose first layers have no attention, or one
    whose layer pattern is validated against it)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    sizes = {k: v for k, v in SIZES.items() if has(default, k)}
    if keep_layers:
        for name in ("num_hidden_layers", "num_layers", "n_layer"):
            sizes.pop(name, None)
    if "qk_rope_head_dim" in sizes and "head_dim" in sizes:  # MLA: head_dim is RoPE's part
        sizes["head_dim"] = sizes["qk_rope_head_dim"]
    if "kv_lora_rank" in sizes and "num_key_value_heads" in sizes:  # MLA: a key per head
        sizes["num_key_value_heads"] = sizes["num_attention_heads"]
    for value in vars(default).values():  # a hybrid's first attention layer kept
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            found = [i for i, v in enumerate(value) if "attention" in v and "linear" not in v]
            if found and found[0] >= sizes.get("num_hidden_layers", 2):
                sizes["num_hidden_layers"] = found[0] + 1
    sizes.update(OVERRIDES.get(model_type, {}))
    if stated(default, "sliding_window"):
        sizes["sliding_window"] = 6  # shorter than the prompt: the window hides keys
    for name, value in vars(default).items():
        if ("dropout" in name or name.endswith("_pdrop")) and isinstance(value, float):
            sizes[name] = 0.0
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = stated(default, name)
        if (isinstance(value, int) and value >= VOCAB) or isinstance(value, list):
            sizes[name] = 0
    try:
        return AutoConfig.for_model(model_type, **sizes)
    except Exception:  # sizes its validation refuses
        if keep_layers is not True:
            return tiny_config(model_type, keep_layers=True)
        raise


def reference(model_type: str, kind: str, folder: Path, eager: bool):

    from attnviz.model.hf.loading import model_class

    implementation = {"attn_implementation": "eager"} if eager else {}
    with contextlib.redirect_stderr(io.StringIO()):
        return model_class(kind).from_pretrained(folder, **implementation).eval()


def build_model(model_type: str, kind: str, keep_layers: bool | int = False):
    """A tiny seeded random model of the architecture (eager attention, float32)."""
    from attnviz.model.hf.loading import model_class, quiet_transformers

    quiet_transformers()
    config = tiny_config(model_type, keep_layers)
    torch.manual_seed(0)
    with contextlib.redirect_stderr(io.StringIO()):
        model = model_class(kind).from_config(config, attn_implementation="eager").eval()
    generation = getattr(model, "generation_config", None)
    if kind == "encoder-decoder" and generation and generation.decoder_start_token_id is None:
        generation.decoder_start_token_id = 0  # (T5's checkpoints state it there)
    with torch.no_grad():  # away from the initialisation's near-uniform attention
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "embed" not in name:
                p.normal_(0, 0.15)
    return model


def build(model_type: str, kind: str, folder: Path, keep_layers: bool | int = False) -> None:
    """A tiny seeded random model of the architecture, saved with its tokenizer."""
    from harness.checkpoints import tokenizer

    model = build_model(model_type, kind, keep_layers)
    model.save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))


def save_masked_roberta(folder: Path) -> Path:
    """A tiny RobertaForMaskedLM with a tokenizer that has RoBERTa's specials (<s> 0,
    <pad> 1, </s> 2, <mask>)."""
    from harness.checkpoints import tokenizer

    build_model("roberta", "masked-lm").save_pretrained(folder)
    tokenizer(("<s>", "<pad>", "</s>", "<mask>")).save(str(folder / "tokenizer.json"))
    return folder
