"""Head statistics over a corpus (exBERT's search, AttentionViz's summaries): per sentence
and head, what its attention does, each a mean over the sentence's query rows, and
their means over the corpus. Each statistic is defined, computed and explained in
`head_stats.TABLE`. NaN where a statistic does not
apply to a sentence (no row to average over: `previous` with one token; no token
repeated, for `same` and `induction`) or to a head (`distance`, `previous`, `same` are
self-attention's, `induction` causal self-attention's, `alignment` cross-attention's);
the corpus means leave those out."""

from __future__ import annotations

import torch
from torch import Tensor

from .head_stats import NAN, per_head

STATISTICS = ("entropy", "distance", "previous", "first", "special", "same", "induction",
              "alignment")  # fmt: skip


def sentence_statistics(
    weights: Tensor,
    query_ids: list[int],
    key_ids: list[int],
    self_attention: bool,
    causal: bool,
    special_keys: list[int],
) -> Tensor:
    """(len(STATISTICS), H) for one layer's weights (H, Tq, Tk) of one sentence."""
    out = torch.full((len(STATISTICS), weights.size(0)), NAN, dtype=torch.float64)
    stats = per_head(
        STATISTICS,
        weights,
        self_attention,
        special_keys,
        causal=causal,
        query_ids=query_ids,
        key_ids=key_ids,
    )
    for i, values in enumerate(stats.values()):
        if values is not None:
            out[i] = values
    return out


def corpus_means(per_sentence: Tensor) -> Tensor:
    """(N, S, H) -> (S, H): each statistic's mean over the sentences it applies to."""
    return per_sentence.nanmean(0) if per_sentence.numel() else per_sentence.sum(0)
