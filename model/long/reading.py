"""How our model code reads a long prompt: what its capture holds (and so the longest
prompt a budget allows), the pass itself (fused attention, queries and keys kept, logits a
chunk at a time), and a cached generation step's newest attention row."""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import ModelConfig
from ..hooks import Capture
from .layer import LayerAttention
from .masks import DenseMask, Mask, MaskRule

# prompts longer than this run the long path: no (T, T) matrix captured
LONG_FROM = 512
LOGIT_CHUNK = 512  # positions whose logits (49,152 each for SmolLM2) are made at once


class PromptTooLong(ValueError):
    """A prompt longer than a long-context runner reads (its `max_tokens`)."""


def capture_bytes(cfg: ModelConfig, tokens: int) -> int:
    """The most a long run of this many tokens holds (our model code's): per token and
    layer its queries, keys and values, the embeddings, the output and the rotary angles
    (float32); and its (T, T) boolean mask with what building it takes."""
    per_layer = (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim
    per_token = 4 * (cfg.decoder_layers * per_layer + 2 * cfg.d_model + cfg.head_dim // 2)
    return per_token * tokens + 3 * tokens * tokens


def longest_prompt(cfg: ModelConfig, max_capture_bytes: int) -> int:
    """The most tokens of its context whose long run's capture fits in the bytes, and
    never fewer than the 512 (or its context) a short run reads."""
    longest, step = 0, 1 << 20
    while step:  # the largest count that fits, by halving steps
        if longest + step <= cfg.max_seq_len and (
            capture_bytes(cfg, longest + step) <= max_capture_bytes
        ):
            longest += step
        else:
            step //= 2
    return max(longest, min(LONG_FROM, cfg.max_seq_len))


def too_long(tokens: int, most: int, context: int) -> PromptTooLong:
    """The refusal of a prompt of `tokens` where `most` are read (of a `context`)."""
    why = (
        "its context"
        if most == context
        else f"what ATTNVIZ_MAX_CAPTURE_BYTES holds; its context is {context:,}"
    )
    return PromptTooLong(
        f"the prompt has {tokens:,} tokens; this server reads at most {most:,} of this "
        f"model ({why}): shorten it"
    )


def newest_row(
    capture: Capture, prefix: str, cfg: ModelConfig, noted: tuple[Mask, float] | None = None
) -> Tensor:
    """The newest query's attention weights (1, H, 1, keys) of one module of a cached
    step, from its captured query and keys: with the mask and scaling the step `noted`
    (a transformers model's), else our model code's (every key, or the `sliding_window`
    newest; scores over sqrt(d))."""
    q, k = capture[f"{prefix}.hook_q"][0], capture[f"{prefix}.hook_k"][0]
    keys = k.size(1)
    mask: Mask = MaskRule(1, keys, causal=True, window=cfg.sliding_window)
    scale = None
    if noted is not None:
        mask, scale = last_row(noted[0]), noted[1]
    heads = LayerAttention(q[:, -1:], k, mask, scale)
    rows = [heads.block("weights", h, 0, 1, 0, keys) for h in range(heads.heads)]
    return torch.stack(rows)[None]


def last_row(mask: Mask) -> Mask:
    """A mask's newest query alone (its last row)."""
    if isinstance(mask, MaskRule):
        return MaskRule(1, mask.keys, mask.causal, mask.window, mask.valid)
    row = mask.block(mask.queries - 1, mask.queries, 0, mask.keys)
    return MaskRule(1, mask.keys) if row is None else DenseMask(row)
