"""Interventions at the hook points and measures of attention: what the attention lab
runs. Hook functions here take (tensor, hook name) and return the replacement, as
`hooked(..., fwd_hooks=...)` and `run_with_hooks` expect."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

HookFn = Callable[[Tensor, str], Tensor]


def without_scaling(head_dim: int) -> HookFn:
    """Undo the 1/sqrt(d_k) on `hook_scores`: softmax then sees q kᵀ itself."""
    factor = math.sqrt(head_dim)
    return lambda scores, name: scores * factor


def without_positions(table: Tensor, name: str) -> Tensor:
    """For `hook_pos`: add nothing (sinusoidal or learned tables; rotary angles of 0)."""
    return torch.zeros_like(table)


def without_mask(mask: Tensor, name: str) -> Tensor:
    """For `hook_mask`: every query may attend to every key (padding and future too)."""
    return torch.ones_like(mask)


def ablate_heads(heads: Iterable[int]) -> HookFn:
    """For `hook_context` (B, H, T, d_head): zero the listed heads' output, so `wo` mixes
    only the others (the output projection's bias stays)."""
    chosen = sorted(set(heads))

    def hook(context: Tensor, name: str) -> Tensor:
        context = context.clone()
        context[:, chosen] = 0
        return context

    return hook


def entropy_bits(pattern: Tensor) -> Tensor:
    """Softmax entropy in bits of each row: (..., Tq, Tk) -> (..., Tq)."""
    logs = torch.where(pattern > 0, pattern.log2(), torch.zeros_like(pattern))
    return -(pattern * logs).sum(-1)


def head_metrics(
    pattern: Tensor, self_attention: bool, special_keys: list[int]
) -> dict[str, list[float | None]]:
    """Per head of one layer's weights (H, Tq, Tk), each a mean over query rows:

    entropy (bits); max_weight; distance (self-attention: sum_k w_qk |q - k|, in tokens);
    previous (self-attention: the weight on the token just before, rows q >= 1); first (the
    weight on key 0); special (the weight on special tokens such as [CLS], [SEP], <bos>);
    alignment (cross-attention: the share of rows whose strongest key lies within one token
    of the diagonal stretched over the two lengths, as a monotonic alignment would)."""
    heads, tq, tk = pattern.shape
    out: dict[str, Tensor | None] = {
        "entropy": entropy_bits(pattern).mean(-1),
        "max_weight": pattern.max(-1).values.mean(-1),
        "first": pattern[..., 0].mean(-1),
        "special": pattern[..., special_keys].sum(-1).mean(-1)
        if special_keys
        else torch.zeros(heads),
    }
    if self_attention:
        q = torch.arange(tq, dtype=pattern.dtype)[:, None]
        k = torch.arange(tk, dtype=pattern.dtype)[None, :]
        out["distance"] = (pattern * (q - k).abs()).sum(-1).mean(-1)
        out["previous"] = (
            pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1) if tq > 1 else torch.zeros(heads)
        )
        out["alignment"] = None
    else:
        out["distance"] = out["previous"] = None
        stretched = torch.arange(tq, dtype=torch.float64) * (tk - 1) / max(tq - 1, 1)
        hits = (pattern.argmax(-1).double() - stretched.round()).abs() <= 1
        out["alignment"] = hits.double().mean(-1)
    return {
        name: [None] * heads if values is None else [round(float(v), 6) for v in values]
        for name, values in out.items()
    }


def rollout(patterns: list[Tensor], residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020) through self-attention layers, first to last.

    Each layer's weights (H, T, T) are averaged over heads and mixed with the identity for
    the residual connection, A = (1 - residual) * mean_h W + residual * I, rows
    renormalised; the rollout is A_L ... A_2 A_1, row q telling how much each input token
    flows into position q. It assumes information moves only along attention weights and
    the residual stream, linearly, ignoring values, the output projection, the FFN and
    LayerNorm: a heuristic of where information comes from, not an attribution."""
    size = patterns[0].size(-1)
    eye = torch.eye(size, dtype=torch.float64)
    result = eye
    for weights in patterns:
        mixed = (1 - residual) * weights.double().mean(0) + residual * eye
        mixed = mixed / mixed.sum(-1, keepdim=True)
        result = mixed @ result
    return result


def permuted(matrix: Tensor, order: list[int]) -> Tensor:
    """P M Pᵀ over the last two axes: rows and columns taken in `order`."""
    index = torch.tensor(order)
    return matrix.index_select(-2, index).index_select(-1, index)
