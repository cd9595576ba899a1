"""The head statistics are defined once (model/methods/head_stats.py): the lab's metrics and a
corpus's statistics are read from the same table, explained by the same lines, and differ
only where the table says they do (None or NaN where a statistic does not apply)."""

from __future__ import annotations

import math

import torch

from attnviz.model.methods.analysis import METRICS, head_metrics
from attnviz.model.methods.corpus_stats import STATISTICS, sentence_statistics
from attnviz.model.methods.head_stats import TABLE, explained


def weights(heads: int, tq: int, tk: int) -> torch.Tensor:
    w = torch.rand(heads, tq, tk, generator=torch.Generator().manual_seed(0))
    return w / w.sum(-1, keepdim=True)


def test_both_read_one_table_and_its_explanations():
    assert set(METRICS) | set(STATISTICS) == set(TABLE)
    lab = explained(METRICS)  # the lab's `explain`
    assert list(lab) == [n for n in TABLE if n in METRICS]
    assert list(explained(STATISTICS)) == list(STATISTICS)
    assert lab["previous"] == "self-attention: " + TABLE["previous"].text
    assert lab["alignment"].startswith("cross-attention: ")
    assert TABLE["induction"].explain.startswith("causal self-attention: ")


def test_the_lab_and_a_corpus_give_the_same_means():
    ids = [3, 4, 3, 5, 4]
    for self_attention, tq, tk in ((True, 5, 5), (False, 5, 7)):
        w = weights(2, tq, tk)
        lab = head_metrics(w, self_attention, [0])
        corpus = sentence_statistics(w, ids[:tq], ids[:tk], self_attention, False, [0])
        for i, name in enumerate(STATISTICS):
            if name not in lab:
                continue
            for h in range(2):
                got, want = lab[name][h], float(corpus[i, h])
                if math.isnan(want):
                    assert got is None, name
                else:
                    assert got is not None and abs(got - want) <= 1e-6, name


def test_one_row_has_no_previous_token():
    """The lab says 0, a corpus NaN (left out of its means)."""
    w = weights(3, 1, 1)
    assert head_metrics(w, True, [])["previous"] == [0.0] * 3
    out = sentence_statistics(w, [7], [7], True, True, [])
    for name in ("previous", "same", "induction", "alignment"):
        assert out[STATISTICS.index(name)].isnan().all(), name
    assert out[STATISTICS.index("entropy")].eq(0).all()
