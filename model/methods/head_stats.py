"""What a head's attention does on one input, each statistic defined once: its name, its
explanation (what the API's `explain` answers), the attention it applies to and how it is
computed per head from one layer's weights (H, Tq, Tk), in float64, as a mean over query
rows. The lab's metrics (`analysis.head_metrics`) and a corpus run's statistics
(`corpus_stats.sentence_statistics`) are both read from `TABLE`; long runs compute the
same means a block of rows at a time (long/layer.py), from `entropy_bits` and
`near_diagonal` here.

A statistic that does not apply to an attention is None (`per_head`); one that applies
but has no query row to average over (`previous` with one row, `same` and `induction`
where no token repeats) is `empty` per head: NaN for a corpus, 0 for the lab."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

NAN = float("nan")

# any attention; self-attention (an encoder's or a decoder's); cross-attention; causal
# self-attention (a decoder's, each query seeing itself and the keys before it)
Applies = Literal["any", "self", "cross", "causal"]
APPLIES_TO = {"any": "", "self": "self-attention: ", "cross": "cross-attention: ",
              "causal": "causal self-attention: "}  # fmt: skip


def entropy_bits(weights: Tensor) -> Tensor:
    """Softmax entropy in bits of each row: (..., Tq, Tk) -> (..., Tq)."""
    return torch.special.entr(weights).sum(-1) / math.log(2)  # -w ln w, 0 where w is 0


def near_diagonal(peaks: Tensor, queries: Tensor, tq: int, tk: int) -> Tensor:
    """Whether each row's strongest key (`peaks`, of the rows at positions `queries`) lies
    within one token of the diagonal stretched over the two lengths (row q's point:
    q (tk - 1) / (tq - 1), rounded), as a monotonic alignment's would."""
    stretched = queries.double() * (tk - 1) / max(tq - 1, 1)
    return (peaks.double() - stretched.round()).abs() <= 1


@dataclass
class Weights:
    """One layer's weights (H, Tq, Tk) in float64 and what some statistics read besides:
    the key positions of special tokens, the query's and key's token ids, whether the
    attention is causal, and a head's value where no row applies (`empty`)."""

    w: Tensor
    special_keys: list[int]
    query_ids: list[int] | None = None
    key_ids: list[int] | None = None
    causal: bool = False
    empty: float = NAN

    @property
    def heads(self) -> int:
        return self.w.size(0)

    @functools.cached_property
    def queries(self) -> Tensor:
        """(Tq, 1) each row's position."""
        return torch.arange(self.w.size(1), dtype=torch.float64)[:, None]

    @functools.cached_property
    def keys(self) -> Tensor:
        """(1, Tk) each key's position."""
        return torch.arange(self.w.size(2), dtype=torch.float64)[None, :]

    def ids(self) -> tuple[Tensor, Tensor]:
        """(Tq, 1) the query's and (1, Tk) the key's token ids."""
        if self.query_ids is None or self.key_ids is None:
            raise ValueError("this statistic reads the token ids")
        return torch.tensor(self.query_ids)[:, None], torch.tensor(self.key_ids)[None, :]

    def mean(self, values: Tensor, rows: Tensor | None = None) -> Tensor:
        """(H, Tq) -> (H,): the mean over the rows where `rows` (Tq,) holds; `empty` if
        none."""
        if rows is not None:
            if not bool(rows.any()):
                return torch.full((self.heads,), self.empty, dtype=torch.float64)
            values = values[:, rows]
        return values.double().mean(-1)


def _entropy(x: Weights) -> Tensor:
    return x.mean(entropy_bits(x.w))


def _max_weight(x: Weights) -> Tensor:
    return x.mean(x.w.max(-1).values)


def _distance(x: Weights) -> Tensor:
    return x.mean((x.w * (x.queries - x.keys).abs()).sum(-1))


def _previous(x: Weights) -> Tensor:
    if x.w.size(1) < 2:
        return torch.full((x.heads,), x.empty, dtype=torch.float64)
    return x.w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def _first(x: Weights) -> Tensor:
    return x.mean(x.w[..., 0])


def _special(x: Weights) -> Tensor:
    if not x.special_keys:
        return torch.zeros(x.heads, dtype=torch.float64)
    return x.mean(x.w[..., x.special_keys].sum(-1))


def _same(x: Weights) -> Tensor:
    qi, ki = x.ids()
    _, tq, tk = x.w.shape
    same = (qi == ki) & ~torch.eye(tq, tk, dtype=torch.bool)
    if x.causal:  # a causal head sees only the earlier occurrences
        same &= x.keys <= x.queries
    return x.mean((x.w * same).sum(-1), same.any(-1))


def _induction(x: Weights) -> Tensor:
    qi, ki = x.ids()
    _, tq, tk = x.w.shape
    # key j follows an earlier occurrence (j - 1 < q) of the query's token
    before = torch.zeros(tq, tk, dtype=torch.bool)
    before[:, 1:] = (qi == ki[:, :-1]) & (x.keys[:, 1:] - 1 < x.queries)
    return x.mean((x.w * before).sum(-1), before.any(-1))


def _alignment(x: Weights) -> Tensor:
    _, tq, tk = x.w.shape
    hits = near_diagonal(x.w.argmax(-1), torch.arange(tq), tq, tk)
    return hits.double().mean(-1)


@dataclass(frozen=True)
class Statistic:
    """One statistic of a head: `compute` gives (H,) float64 from a layer's `Weights`."""

    name: str
    text: str  # what it is, past the attention it applies to
    applies: Applies
    compute: Callable[[Weights], Tensor]

    @property
    def explain(self) -> str:
        """One line: the attention it applies to (unless any) and what it is."""
        return APPLIES_TO[self.applies] + self.text

    def applies_to(self, self_attention: bool, causal: bool = False) -> bool:
        return {
            "any": True,
            "self": self_attention,
            "cross": not self_attention,
            "causal": self_attention and causal,
        }[self.applies]


TABLE: dict[str, Statistic] = {
    s.name: s
    for s in (
        Statistic(
            "entropy",
            "mean softmax entropy of a query row, in bits (low: focused)",
            "any",
            _entropy,
        ),
        Statistic("max_weight", "mean of each row's largest weight", "any", _max_weight),
        Statistic(
            "distance",
            "mean |query - key| in tokens, weighted by attention",
            "self",
            _distance,
        ),
        Statistic("previous", "mean weight on the token just before the query", "self", _previous),
        Statistic("first", "mean weight on the first key", "any", _first),
        Statistic(
            "special", "mean weight on special tokens ([CLS], [SEP], <bos>)", "any", _special
        ),
        Statistic(
            "same",
            "mean weight on other occurrences of the query's own token (a causal head: the "
            "earlier ones), over the rows whose token occurs again where the head can see it",
            "self",
            _same,
        ),
        Statistic(
            "induction",
            "mean weight on the tokens that followed earlier occurrences of the query's "
            "token, over the rows whose token occurred before",
            "causal",
            _induction,
        ),
        Statistic(
            "alignment",
            "share of rows whose strongest key is within one token of the diagonal "
            "stretched over both lengths",
            "cross",
            _alignment,
        ),
    )
}


def explained(names: Iterable[str]) -> dict[str, str]:
    """Each named statistic's one-line explanation, in the table's order."""
    chosen = set(names)
    return {s.name: s.explain for s in TABLE.values() if s.name in chosen}


def per_head(
    names: Iterable[str],
    weights: Tensor,
    self_attention: bool,
    special_keys: list[int],
    *,
    causal: bool = False,
    query_ids: list[int] | None = None,
    key_ids: list[int] | None = None,
    empty: float = NAN,
) -> dict[str, Tensor | None]:
    """Each named statistic of one layer's weights (H, Tq, Tk) per head, (H,) in float64;
    None where it does not apply to this attention, `empty` for a head where it applies
    but no query row does."""
    x = Weights(weights.double(), special_keys, query_ids, key_ids, causal, empty)
    out: dict[str, Tensor | None] = {}
    for name in names:
        statistic = TABLE[name]
        out[name] = statistic.compute(x) if statistic.applies_to(self_attention, causal) else None
    return out
