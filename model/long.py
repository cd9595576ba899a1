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

import itertools
import math
import threading
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch
from torch import Tensor

from .attention import attention_scores
from .hooks import Capture

BLOCK_ENTRIES = 1 << 22  # values of one head computed at once (16 MB of float32)
Kind = Literal["weights", "scores", "mask"]
Reduce = Literal["max", "mean"]


class Mask(Protocol):
    """Which keys each query may attend, read a block at a time."""

    queries: int
    keys: int

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        """(r1 - r0, c1 - c0) bool, True = may attend; None where every key may be seen."""
        ...

    def seen(self, r0: int, r1: int) -> tuple[int, int]:
        """[lo, hi): the keys any of the rows r0..r1 may see lie within (the others are 0)."""
        ...


@dataclass(frozen=True)
class MaskRule:
    """The mask of `masks.decoder_mask` / `padding_mask`, described: `queries` rows are the
    newest of `keys` positions; `causal` lets each see itself and what came before (within
    the `window` newest with a sliding window); `valid` (keys,) marks keys that are not
    padding (None: all are)."""

    queries: int
    keys: int
    causal: bool = False
    window: int | None = None
    valid: Tensor | None = None

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        out = None
        if self.causal:
            offset = self.keys - self.queries
            q = torch.arange(r0, r1)[:, None] + offset
            k = torch.arange(c0, c1)[None, :]
            out = k <= q
            if self.window is not None:
                out &= k > q - self.window
        if self.valid is not None:
            valid = self.valid[c0:c1][None, :]
            out = valid.expand(r1 - r0, c1 - c0) if out is None else out & valid
        return out

    def seen(self, r0: int, r1: int) -> tuple[int, int]:
        if not self.causal:
            return 0, self.keys
        offset = self.keys - self.queries
        hi = min(self.keys, r1 - 1 + offset + 1)
        lo = 0 if self.window is None else max(0, r0 + offset - self.window + 1)
        return min(lo, hi), hi

    def dense(self) -> Tensor:
        """The whole (queries, keys) mask (for tests and short inputs)."""
        out = self.block(0, self.queries, 0, self.keys)
        return torch.ones(self.queries, self.keys, dtype=torch.bool) if out is None else out


@dataclass(frozen=True)
class DenseMask:
    """A captured (queries, keys) mask tensor, read as a `Mask`."""

    mask: Tensor

    @property
    def queries(self) -> int:
        return self.mask.size(0)

    @property
    def keys(self) -> int:
        return self.mask.size(1)

    def block(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        return self.mask[r0:r1, c0:c1]

    def seen(self, r0: int, r1: int) -> tuple[int, int]:
        return 0, self.keys


def edges(start: int, stop: int, pool: int | None) -> list[int]:
    """Where each cell of [start, stop) begins, and the end: cells of one position, or of
    ceil(n / pool) positions each (the last takes the rest), at most `pool` of them."""
    width = 1 if not pool else max(1, math.ceil((stop - start) / pool))
    return [*range(start, stop, width), stop]


@dataclass
class HeadStats:
    """Per head, sums over query rows (`head_stats`; divided by `rows` for the means)."""

    rows: int = 0
    entropy: float = 0.0
    max_weight: float = 0.0
    first: float = 0.0
    special: float = 0.0
    distance: float = 0.0
    previous: float = 0.0
    previous_rows: int = 0
    alignment: float = 0.0
    offsets: dict[int, int] = field(default_factory=dict)  # offset of each row's peak: count

    def means(self) -> dict[str, float]:
        """The means `analysis.head_metrics` gives (self-attention's or cross-attention's
        are 0 for the other), and the share of rows peaking at the commonest offset other
        than -1 (what `head_roles` calls positional)."""
        rows = max(self.rows, 1)
        fixed = max((c for o, c in self.offsets.items() if o != -1), default=0)
        return {
            "entropy": self.entropy / rows,
            "max_weight": self.max_weight / rows,
            "first": self.first / rows,
            "special": self.special / rows,
            "distance": self.distance / rows,
            "previous": self.previous / max(self.previous_rows, 1),
            "alignment": self.alignment / rows,
            "fixed_offset": fixed / rows,
        }


class Heads:
    """The heads of one attention module, read a window at a time: `block` gives exact
    values, `window` them or their pooled cells."""

    queries: int
    keys: int

    def block(self, kind: Kind, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        raise NotImplementedError

    def _rows_per_block(self, columns: int) -> int:
        return min(max(1, BLOCK_ENTRIES // max(columns, 1)), max(self.queries, 1))

    def window(
        self,
        kind: Kind,
        head: int,
        rows: tuple[int, int],
        columns: tuple[int, int],
        pool: int | None = None,
        reduce: Reduce = "max",
    ) -> tuple[Tensor, list[int], list[int]]:
        """A window of a head, exact (no `pool`) or pooled to at most `pool` cells per axis,
        each the max or mean of the exact values it covers: (values, row edges, column
        edges)."""
        (r0, r1), (c0, c1) = rows, columns
        row_edges, col_edges = edges(r0, r1, pool), edges(c0, c1, pool)
        height, width = row_edges[1] - row_edges[0], col_edges[1] - col_edges[0]
        n_rows, n_cols = len(row_edges) - 1, len(col_edges) - 1
        if height == 1 and width == 1:
            step = self._rows_per_block(c1 - c0)
            out = torch.empty(r1 - r0, c1 - c0)
            for b0 in range(r0, r1, step):
                b1 = min(r1, b0 + step)
                out[b0 - r0 : b1 - r0] = self.block(kind, head, b0, b1, c0, c1)
            return out, row_edges, col_edges
        # row blocks of BLOCK_ENTRIES values whatever the cells' height: each reduced
        # across its columns, then folded into the row cells its rows belong to (a cell
        # may span several blocks)
        fill = float("-inf") if reduce == "max" else 0.0
        out = torch.full((n_rows, n_cols), fill)
        step = self._rows_per_block(c1 - c0)
        for b0 in range(r0, r1, step):
            b1 = min(r1, b0 + step)
            values = self.block(kind, head, b0, b1, c0, c1)
            padded = torch.full((b1 - b0, n_cols * width), fill)
            padded[:, : c1 - c0] = values
            grid = padded.view(b1 - b0, n_cols, width)
            across = grid.amax(-1) if reduce == "max" else grid.sum(-1)
            cells = (torch.arange(b0, b1) - r0) // height
            index = cells[:, None].expand(-1, n_cols)
            out.scatter_reduce_(0, index, across, "amax" if reduce == "max" else "sum")
        if reduce == "mean":
            heights = torch.tensor([b - a for a, b in itertools.pairwise(row_edges)])
            widths = torch.tensor([b - a for a, b in itertools.pairwise(col_edges)])
            out /= heights[:, None] * widths[None, :]
        return out, row_edges, col_edges


@dataclass
class StoredAttention(Heads):
    """A short run's captured matrices (H, Tq, Tk) read as `Heads` (the mask (Tq, Tk))."""

    weights: Tensor | None
    scores: Tensor | None
    mask: Tensor | None

    @property
    def queries(self) -> int:  # type: ignore[override]
        return next(t for t in (self.weights, self.scores, self.mask) if t is not None).size(-2)

    @property
    def keys(self) -> int:  # type: ignore[override]
        return next(t for t in (self.weights, self.scores, self.mask) if t is not None).size(-1)

    def block(self, kind: Kind, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        if kind == "mask":
            if self.mask is None:
                return torch.ones(r1 - r0, c1 - c0)
            return self.mask[r0:r1, c0:c1].float()
        stored = self.weights if kind == "weights" else self.scores
        if stored is None:
            raise KeyError(f"this run has no {kind}")
        return stored[head, r0:r1, c0:c1].float()


@dataclass
class LayerAttention(Heads):
    """One attention module of one run: its queries (H, Tq, d), keys (H_kv, Tk, d) and
    mask; each query head h reads key head h // (H / H_kv)."""

    q: Tensor
    k: Tensor
    mask: Mask | None
    _normalisers: dict[int, Tensor] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def heads(self) -> int:
        return self.q.size(0)

    @property
    def queries(self) -> int:
        return self.q.size(1)

    @property
    def keys(self) -> int:
        return self.k.size(1)

    @property
    def nbytes(self) -> int:
        with self._lock:
            kept = sum(t.nbytes for t in self._normalisers.values())
        return self.q.nbytes + self.k.nbytes + kept

    def _key_head(self, head: int) -> Tensor:
        return self.k[head // (self.heads // self.k.size(0))]

    def scores(self, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        """(r1 - r0, c1 - c0) scaled scores before the mask, as `attention_scores`."""
        q = self.q[head, r0:r1].float()
        return attention_scores(q, self._key_head(head)[c0:c1].float())

    def _mask(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        return None if self.mask is None else self.mask.block(r0, r1, c0, c1)

    def _seen(self, r0: int, r1: int) -> tuple[int, int]:
        return (0, self.keys) if self.mask is None else self.mask.seen(r0, r1)

    def normaliser(self, head: int) -> Tensor:
        """(Tq,) each row's log-sum-exp over the keys it may see (-inf: none)."""
        with self._lock:
            found = self._normalisers.get(head)
        if found is not None:
            return found
        out = torch.empty(self.queries)
        step = self._rows_per_block(self.keys)
        for r0 in range(0, self.queries, step):
            r1 = min(self.queries, r0 + step)
            out[r0:r1] = self._row_block(head, r0, r1)[1]
        with self._lock:
            self._normalisers[head] = out
        return out

    def _row_block(self, head: int, r0: int, r1: int) -> tuple[Tensor, Tensor, int]:
        """The masked scores of rows r0..r1 over the keys they may see (from `lo`; -inf
        where masked) and their log-sum-exp."""
        lo, hi = self._seen(r0, r1)
        scores = self.scores(head, r0, r1, lo, hi)
        allowed = self._mask(r0, r1, lo, hi)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return scores, torch.logsumexp(scores, dim=-1), lo

    def block(self, kind: Kind, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        """One exact window of a head: weights (0 where masked), scores, or the mask (1.0
        where the query may attend)."""
        if kind == "scores":
            return self.scores(head, r0, r1, c0, c1)
        allowed = self._mask(r0, r1, c0, c1)
        if kind == "mask":
            if allowed is None:
                return torch.ones(r1 - r0, c1 - c0)
            return allowed.float()
        out = torch.zeros(r1 - r0, c1 - c0)
        lo, hi = self._seen(r0, r1)
        lo, hi = max(lo, c0), min(hi, c1)
        if lo >= hi:
            return out
        lse = self.normaliser(head)[r0:r1, None]
        scores = self.scores(head, r0, r1, lo, hi)
        part = allowed[:, lo - c0 : hi - c0] if allowed is not None else None
        if part is not None:
            scores = scores.masked_fill(~part, float("-inf"))
        # a row with no key at all (lse -inf) has weight 0 everywhere, as masked_softmax
        weights = torch.exp(scores - lse).nan_to_num_(0.0)
        out[:, lo - c0 : hi - c0] = weights
        return out

    def head_stats(
        self, head: int, self_attention: bool, special_keys: list[int], stats: HeadStats
    ) -> None:
        """Add this head's rows to `stats` (one pass over each row's keys, which also
        keeps the head's normalisers)."""
        tq, tk = self.queries, self.keys
        lse_all = torch.empty(tq)
        special = torch.tensor(special_keys, dtype=torch.long)
        step = self._rows_per_block(tk)
        for r0 in range(0, tq, step):
            r1 = min(tq, r0 + step)
            scores, lse, lo = self._row_block(head, r0, r1)
            lse_all[r0:r1] = lse
            weights = torch.exp(scores - lse[:, None]).nan_to_num_(0.0)
            hi = lo + weights.size(1)
            stats.rows += r1 - r0
            stats.entropy += float(torch.special.entr(weights).sum() / math.log(2))
            peak, where = weights.max(-1)
            stats.max_weight += float(peak.sum())
            where = where + lo
            if lo == 0:
                stats.first += float(weights[:, 0].sum())
            inside = special[(special >= lo) & (special < hi)] - lo
            if inside.numel():
                stats.special += float(weights.index_select(1, inside).sum())
            query = torch.arange(r0, r1)
            if self_attention:
                key = torch.arange(lo, hi, dtype=torch.float32)
                if isinstance(self.mask, MaskRule) and self.mask.causal and tq == tk:
                    # no key after its query: sum_k w (q - k) = q sum_k w - w . k, a pass
                    # fewer than the gaps' matrix
                    mass = weights.sum(-1)
                    stats.distance += float((query * mass - weights @ key).sum())
                else:
                    gaps = (query[:, None] - key[None, :]).abs()
                    stats.distance += float((weights * gaps).sum())
                behind = query - 1 - lo  # the previous token's column in this block
                ok = (query >= 1) & (behind >= 0) & (behind < weights.size(1))
                if ok.any():
                    rows = torch.nonzero(ok).squeeze(1)
                    stats.previous += float(weights[rows, behind[rows]].sum())
                stats.previous_rows += int((query >= 1).sum())
                values, counts = (where - query).unique(return_counts=True)
                for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                    stats.offsets[value] = stats.offsets.get(value, 0) + count
            else:
                stretched = query.double() * (tk - 1) / max(tq - 1, 1)
                hits = (where.double() - stretched.round()).abs() <= 1
                stats.alignment += float(hits.double().sum())
        with self._lock:
            self._normalisers[head] = lse_all


DERIVED = ("hook_scores", "hook_mask", "hook_weights")


def long_names(name: str) -> bool:
    """A long run's names filter: no (Tq, Tk) matrix, no per-head context, no logits."""
    return not name.endswith((*DERIVED, "hook_context", "hook_logits"))


class LongCapture(Capture):
    """A long run's capture: the tensors it recorded (queries, keys, values, embeddings:
    nothing N x N) and, per attention module (its hook prefix, e.g.
    "decoder.3.self_attn"), a `LayerAttention` of its first batch item with its mask
    described. Its scores, mask and weights are read through `attention`, a window at a
    time; asking for them by hook name is a KeyError that says so."""

    def __init__(self, capture: Capture, masks: dict[str, Mask | None]) -> None:
        super().__init__()
        self._store = {name: capture.all(name) for name in capture}
        self.background: dict[str, object] = {}  # what the app computes of it meanwhile
        self.attention: dict[str, LayerAttention] = {}
        for prefix, mask in masks.items():
            q, k = capture[f"{prefix}.hook_q"], capture[f"{prefix}.hook_k"]
            self.attention[prefix] = LayerAttention(q[0], k[0], mask)

    def __getitem__(self, name: str) -> Tensor:
        if name.endswith(DERIVED) and name.rpartition(".")[0] in self.attention:
            raise KeyError(f"{name}: a long run keeps no (Tq, Tk) matrix; read it by windows")
        return super().__getitem__(name)

    @property
    def stored_bytes(self) -> int:
        stored = sum(t.nbytes for firings in self._store.values() for t in firings)
        return stored + sum(a.nbytes - a.q.nbytes - a.k.nbytes for a in self.attention.values())


def heads_of(capture: Capture, prefix: str) -> Heads:
    """One attention module's heads (hook prefix, e.g. "decoder.3.self_attn") of a run's
    first batch item: recomputed by windows for a long run, its stored tensors otherwise."""
    if isinstance(capture, LongCapture):
        return capture.attention[prefix]
    found = {
        kind: capture[f"{prefix}.{kind}"][0] for kind in DERIVED if f"{prefix}.{kind}" in capture
    }
    mask = found.get("hook_mask")
    return StoredAttention(
        found.get("hook_weights"), found.get("hook_scores"), None if mask is None else mask[0]
    )
