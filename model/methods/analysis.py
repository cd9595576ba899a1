"""Interventions at the hook points and measures of attention: what the attention lab
runs. Hook functions here take (tensor, hook name) and return the replacement, as
`hooked(..., fwd_hooks=...)` and `run_with_hooks` expect."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..hooks import HookFn
from .head_stats import TABLE, Weights, per_head

if TYPE_CHECKING:
    from ..attention_types import AttentionSpec
    from ..runner import RunResult


def without_scaling(head_dim: int) -> HookFn:
    """Undo the 1/sqrt(d_k) on `hook_scores`: softmax then sees q kᵀ itself."""
    factor = math.sqrt(head_dim)
    return lambda scores, name: scores * factor


def without_positions(table: Tensor, name: str) -> Tensor:
    """For `hook_pos`: add nothing (sinusoidal or learned tables; rotary angles of 0; a
    relative bias of 0, T5's)."""
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


def focus(weights: Tensor) -> tuple[Tensor, Tensor]:
    """Per head of one layer's weights (H, Tq, Tk): the mean over query rows of the row's
    entropy in bits, and of its largest weight (H,) each, in float64."""
    x = Weights(weights.double(), [])
    return TABLE["entropy"].compute(x), TABLE["max_weight"].compute(x)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (sentence embeddings), rounded to 6 decimals."""
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    return round(float(torch.nn.functional.cosine_similarity(x, y, dim=0)), 6)


# the lab's metrics of a head (head_stats.TABLE: what each is), in the order it gives them
METRICS = ("entropy", "max_weight", "first", "special", "distance", "previous", "alignment")


def head_metrics(
    weights: Tensor, self_attention: bool, special_keys: list[int]
) -> dict[str, list[float | None]]:
    """Per head of one layer's weights (H, Tq, Tk), each of METRICS (head_stats.TABLE), a
    mean over query rows in float64 rounded to 6 decimals: None where it does not apply to
    this attention, 0 where no row does (`previous` with one row)."""
    heads = weights.size(0)
    out = per_head(METRICS, weights, self_attention, special_keys, empty=0.0)
    return {
        name: [None] * heads if values is None else [round(float(v), 6) for v in values]
        for name, values in out.items()
    }


def layer_weights(
    result: RunResult, spec: AttentionSpec, special_tokens: Iterable[str]
) -> Iterator[tuple[int, Tensor, list[int]]]:
    """Per layer of one attention type of a captured run: the layer, its heads' weights
    (H, Tq, Tk) in float32, and the key positions holding special tokens (what
    head_metrics and head_roles take)."""
    specials = set(special_tokens)
    keys = result.tokens(spec.columns)
    special = [i for i, token in enumerate(keys) if token in specials]
    capture = result.capture
    if capture is None:
        raise ValueError("the run was not captured")
    for layer in range(spec.layers):
        yield layer, capture[spec.hook(layer, "hook_weights")][0].float(), special


def head_roles(
    weights: Tensor,
    self_attention: bool,
    special_keys: list[int],
    metrics: dict[str, list[float | None]] | None = None,
) -> list[str | None]:
    """Per head of one layer's weights (H, Tq, Tk), what it does on this input, or None:
    alignment (cross-attention: alignment >= 0.8), previous-token (previous >= 0.5),
    first-token (weight on key 0 >= 0.5: [CLS] or <bos>, a resting place), positional
    (self-attention: >= 70 % of rows peak at one fixed offset from themselves, other than
    -1), broad (row entropy >= 75 % of the uniform row's). `metrics`: head_metrics of
    the same weights, where the caller has them already."""
    heads, tq, tk = weights.shape
    metrics = metrics or head_metrics(weights, self_attention, special_keys)
    offsets = weights.argmax(-1) - torch.arange(tq)[None, :]  # (H, Tq)
    return [
        role_of(
            {name: values[h] for name, values in metrics.items()},
            _fixed_offset_share(offsets[h]) if self_attention else 0.0,
            self_attention,
            tq,
            tk,
        )
        for h in range(heads)
    ]


def role_of(
    means: dict[str, float | None], fixed_offset: float, self_attention: bool, tq: int, tk: int
) -> str | None:
    """One head's role (`head_roles`) from its metrics' means and the share of its rows
    peaking at the commonest offset other than -1."""
    uniform = math.log2(tk) if tk > 1 else 1.0
    if not self_attention and (means["alignment"] or 0) >= 0.8:
        return "alignment"
    if self_attention and (means["previous"] or 0) >= 0.5:
        return "previous-token"
    if (means["first"] or 0) >= 0.5:
        return "first-token"
    if self_attention and tq > 2 and fixed_offset >= 0.7:
        return "positional"
    if tk > 1 and (means["entropy"] or 0) >= 0.75 * uniform:
        return "broad"
    return None


def _fixed_offset_share(offsets: Tensor) -> float:
    """The share of rows whose peak lies at the most common offset (not -1)."""
    values, counts = offsets.unique(return_counts=True)
    counts = counts[values != -1]
    return float(counts.max()) / offsets.numel() if counts.numel() else 0.0


def rollout(layers: list[Tensor], residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020) through self-attention layers, first to last.

    Each layer's weights (H, T, T) are averaged over heads and mixed with the identity for
    the residual connection, A = (1 - residual) * mean_h W + residual * I, rows
    renormalised; the rollout is A_L ... A_2 A_1, row q telling how much each input token
    flows into position q. It assumes information moves only along attention weights and
    the residual stream, linearly, ignoring values, the output projection, the FFN and
    LayerNorm: a heuristic of where information comes from, not an attribution."""
    size = layers[0].size(-1)
    eye = torch.eye(size, dtype=torch.float64)
    result = eye
    for weights in layers:
        mixed = (1 - residual) * weights.double().mean(0) + residual * eye
        mixed = mixed / mixed.sum(-1, keepdim=True)
        result = mixed @ result
    return result


def permuted(matrix: Tensor, order: list[int]) -> Tensor:
    """P M Pᵀ over the last two axes: rows and columns taken in `order`."""
    index = torch.tensor(order)
    return matrix.index_select(-2, index).index_select(-1, index)
