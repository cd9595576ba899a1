"""Attention at any length, from what is linear in it.

A long run keeps per attention module its queries (after RoPE, one per query head) and
keys (one per key/value head) and a description of its mask (`MaskRule`: causal, sliding
window, padded keys), never an N x N tensor. A head's scores, mask and weights are
recomputed from them on demand, in float32, as the forward pass computes them
(`attention_scores`, then the softmax over the keys the mask allows), a block of query
rows at a time: each row's softmax normaliser (its log-sum-exp over every key it may see)
from one pass over its keys, kept per head, then any window of the head exactly, or the
whole head pooled to at most `pool` cells per axis (the max or mean of the exact values in
each cell). No call holds more than one block of one head (`BLOCK_ENTRIES` values).

The same pass gives each head's metrics (`head_stats`: entropy, largest weight, distance,
previous, first, special, alignment, the share of rows peaking at one offset), equal to
`analysis.head_metrics` over the whole matrix.
"""

from __future__ import annotations

from .capture import DERIVED, LongCapture, heads_of, long_names
from .heads import BLOCK_ENTRIES, Heads, Kind, Reduce, StoredAttention, ValueWeighted, edges
from .layer import HeadStats, LayerAttention
from .masks import DenseMask, Mask, MaskRule

__all__ = [
    "BLOCK_ENTRIES",
    "DERIVED",
    "DenseMask",
    "HeadStats",
    "Heads",
    "Kind",
    "LayerAttention",
    "LongCapture",
    "Mask",
    "MaskRule",
    "Reduce",
    "StoredAttention",
    "ValueWeighted",
    "edges",
    "heads_of",
    "long_names",
]
