"""Head statistics over a corpus (exBERT's search, AttentionViz's summaries): per sentence
and head, what its attention does, each a mean over the sentence's query rows, and
their means over the corpus. NaN where a statistic does not apply to a sentence (no token
repeated: neither `same` nor `induction`) or to a head (`alignment` is cross-attention's);
the corpus means leave those out.

    entropy     bits of each row's weights
    distance    sum_k w_qk |q - k| in tokens (self-attention)
    previous    the weight on the token just before (self-attention, rows q >= 1)
    first       the weight on key 0 (a sink)
    special     the weight on special tokens ([CLS], [SEP], <bos>, ...)
    same        the weight on other occurrences of the query's own token (self-attention,
                rows whose token occurs again where the head can see it: a causal head,
                before the row)
    induction   the weight on the tokens that followed earlier occurrences of the query's
                token (causal self-attention, rows whose token occurred before)
    alignment   1 where the row's strongest key lies within one token of the diagonal
                stretched over the two lengths (cross-attention)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

STATISTICS = ("entropy", "distance", "previous", "first", "special", "same", "induction",
              "alignment")  # fmt: skip
NAN = float("nan")


def _row_mean(values: Tensor, rows: Tensor | None = None) -> Tensor:
    """(H, Tq) -> (H,): the mean over the rows where `rows` (Tq,) holds; NaN if none."""
    if rows is not None:
        if not bool(rows.any()):
            return torch.full(values.shape[:1], NAN, dtype=torch.float64)
        values = values[:, rows]
    return values.double().mean(-1)


def sentence_statistics(
    weights: Tensor,
    query_ids: list[int],
    key_ids: list[int],
    self_attention: bool,
    causal: bool,
    special_keys: list[int],
) -> Tensor:
    """(len(STATISTICS), H) for one layer's weights (H, Tq, Tk) of one sentence."""
    heads, tq, tk = weights.shape
    w = weights.double()
    out = torch.full((len(STATISTICS), heads), NAN, dtype=torch.float64)
    out[0] = _row_mean(torch.special.entr(w).sum(-1) / math.log(2))
    out[3] = _row_mean(w[..., 0])
    out[4] = _row_mean(w[..., special_keys].sum(-1)) if special_keys else 0.0
    if self_attention:
        q = torch.arange(tq, dtype=torch.float64)[:, None]
        k = torch.arange(tk, dtype=torch.float64)[None, :]
        out[1] = _row_mean((w * (q - k).abs()).sum(-1))
        if tq > 1:
            out[2] = w.diagonal(offset=-1, dim1=-2, dim2=-1).double().mean(-1)
        qi = torch.tensor(query_ids)[:, None]
        ki = torch.tensor(key_ids)[None, :]
        same = (qi == ki) & ~torch.eye(tq, tk, dtype=torch.bool)
        if causal:  # a causal head sees only the earlier occurrences
            same &= k <= q
        out[5] = _row_mean((w * same).sum(-1), same.any(-1))
        if causal:
            # key j follows an earlier occurrence (j - 1 < q) of the query's token
            before = torch.zeros(tq, tk, dtype=torch.bool)
            before[:, 1:] = (qi == ki[:, :-1]) & (k[:, 1:] - 1 < q)
            out[6] = _row_mean((w * before).sum(-1), before.any(-1))
    else:
        stretched = torch.arange(tq, dtype=torch.float64) * (tk - 1) / max(tq - 1, 1)
        hits = (w.argmax(-1).double() - stretched.round()).abs() <= 1
        out[7] = hits.double().mean(-1)
    return out


def corpus_means(per_sentence: Tensor) -> Tensor:
    """(N, S, H) -> (S, H): each statistic's mean over the sentences it applies to."""
    return per_sentence.nanmean(0) if per_sentence.numel() else per_sentence.sum(0)
