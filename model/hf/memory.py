"""A transformers model already in memory, with its tokenizer, as a runner over
transformers' code (`attnviz.capture` and `attnviz.show` take one): nothing is written to
disk, and the user's objects are left as they were."""

from __future__ import annotations

import copy
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from ..checkpoints import CheckpointError
from ..pretrained.causal import CausalLM
from ..pretrained.hf import causal_of, vocabulary_of
from .calls import BackendError, has_masked_lm_head, hf_architecture
from .capture import ATTENTION, register
from .encoders import HFEncoder
from .loading import encoding_runner, quiet_transformers, wrapped
from .seq2seq import HFSeq2Seq


def from_memory(hf, tokenizer, name: str = "") -> CausalLM | HFEncoder | HFSeq2Seq:
    """A transformers model already in memory and its tokenizer (a fast one of transformers',
    or a `tokenizers.Tokenizer`), as a runner over transformers' code: nothing is written to
    disk. The user's objects are left as they were (their attention implementation, mode,
    hooks and tokenizer settings): the runner runs a twin of the model that shares its
    tensors, on their devices and in their dtype (nothing is copied or converted; a model
    spread by a device map keeps accelerate's hooks, which move each layer's inputs), and a
    copy of the tokenizer. The masked-LM head is read where the model is a ...ForMaskedLM; a
    decoder-only model must have its LM head (a ...ForCausalLM)."""

    import transformers

    register()
    quiet_transformers()
    if not isinstance(hf, transformers.PreTrainedModel):
        raise TypeError(f"a transformers model (a PreTrainedModel), not {type(hf).__name__}")
    backend = tokenizer if isinstance(tokenizer, Tokenizer) else None
    backend = backend or getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(
            "tokenizer: the model's fast tokenizer (transformers' AutoTokenizer, whose "
            "backend_tokenizer is a tokenizers.Tokenizer) or a tokenizers.Tokenizer, not "
            f"{type(tokenizer).__name__}"
        )
    stated = copy.copy(hf.config)  # (its class says what it is, whatever config.json said)
    stated.architectures = [type(hf).__name__]
    try:
        architecture = hf_architecture(stated)
    except BackendError as exc:
        raise CheckpointError(str(exc)) from None
    masked = has_masked_lm_head(stated)
    if architecture == "encoder-only":
        architecture = "masked-lm" if masked else "encoder-only"
        hf = hf if masked else hf.base_model  # (a classifier's encoder: its base model)
    elif hf.get_output_embeddings() is None:
        raise CheckpointError(
            f"{type(hf).__name__} has no language-model head: pass the model with its head "
            "(AutoModelForCausalLM, AutoModelForSeq2SeqLM)"
        )
    model = wrapped(twin_of(hf), "encoder-only" if architecture == "masked-lm" else architecture)
    copied = Tokenizer.from_str(backend.to_str())
    copied.no_padding()  # (the user's settings for their batches: a run reads the whole text)
    copied.no_truncation()
    vocabulary, specials = vocabulary_of(copied, model.config.target_vocab_size)
    if architecture != "decoder-only":
        return encoding_runner(model, architecture, copied, vocabulary, specials)
    named = {k: getattr(tokenizer, k, None) for k in ("bos_token", "eos_token")}
    template = getattr(tokenizer, "chat_template", None)
    eos = getattr(hf.generation_config, "eos_token_id", None) if hf.can_generate() else None
    return causal_of(
        model, copied, vocabulary, specials, name or type(hf).__name__,
        template if isinstance(template, str) else None,
        eos if eos is not None else getattr(hf.config, "eos_token_id", None),
        {k: v for k, v in named.items() if isinstance(v, str)},
    )  # fmt: skip


def twin_of(hf: Any) -> Any:
    """A twin of a model in memory that shares its tensors (on their devices, in their
    dtype: nothing copied), rid of the user's hooks, its attention captured; the user's
    model is left as it was."""
    shared: dict[int, torch.Tensor] = {
        id(p): nn.Parameter(p.detach(), requires_grad=False) for p in hf.parameters()
    }
    for b in hf.buffers():
        shared[id(b)] = b.detach()
    for module in hf.modules():  # (accelerate's offloaded weights: read where they are)
        hook = module.__dict__.get("_hf_hook")
        for held in (getattr(hook, "weights_map", None), getattr(hook, "tied_params_map", None)):
            if held is not None:
                shared[id(held)] = held
    twin = copy.deepcopy(hf, memo=shared)  # (a tied matrix is one tensor in both places)
    twin.requires_grad_(False)
    without_hooks(twin)
    try:
        twin.set_attn_implementation(ATTENTION)
    except (ValueError, ImportError) as exc:
        raise CheckpointError(f"its attention cannot be captured: {exc}") from None
    return twin


HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
         "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
         "_forward_pre_hooks_with_kwargs")  # fmt: skip


def without_hooks(model: nn.Module) -> None:
    """A model's copy rid of the user's own forward and backward hooks that the copy
    brought with it, so that a run calls what transformers' modules compute alone
    (accelerate's, which a device map's layers need to run, are kept)."""
    for module in model.modules():
        for name in HOOKS:
            held = getattr(module, name, None)
            if held is not None:
                held.clear()
