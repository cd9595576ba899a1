"""One attention module of a long run: its queries and keys, its heads recomputed from
them, and their metrics from one pass over each row's keys."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..attention import attention_scores
from ..methods.head_stats import entropy_bits, near_diagonal
from .heads import Heads, Kind
from .masks import Mask, MaskRule


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
    lse: Tensor | None = field(default=None, repr=False)  # each row's normaliser, as seen

    def means(self) -> dict[str, float]:
        """The means `analysis.head_metrics` gives (head_stats.TABLE; self-attention's or
        cross-attention's are 0 for the other), and the share of rows peaking at the
        commonest offset other than -1 (what `head_roles` calls positional)."""
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


@dataclass
class LayerAttention(Heads):
    """One attention module of one run: its queries (H, Tq, d), keys (H_kv, Tk, d), mask
    and score scaling; each query head h reads key head h // (H / H_kv)."""

    q: Tensor
    k: Tensor
    mask: Mask | None
    scale: float | None = None  # what q . k is multiplied by (None: 1 / sqrt(d))
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
        q, k = self.q[head, r0:r1].float(), self._key_head(head)[c0:c1].float()
        if self.scale is not None:  # (as transformers' attention scales them)
            return torch.matmul(q, k.transpose(-2, -1)) * self.scale
        return attention_scores(q, k)

    def _mask(self, r0: int, r1: int, c0: int, c1: int) -> Tensor | None:
        return None if self.mask is None else self.mask.block(r0, r1, c0, c1, self.q.device)

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
        where the query may attend); norms are `ValueWeighted`'s."""
        if kind == "norms":
            raise KeyError("norms need the values: read them through ValueWeighted")
        if kind == "scores":
            return self.scores(head, r0, r1, c0, c1).cpu()
        allowed = self._mask(r0, r1, c0, c1)
        if kind == "mask":
            if allowed is None:
                return torch.ones(r1 - r0, c1 - c0)
            return allowed.float().cpu()
        out = torch.zeros(r1 - r0, c1 - c0)  # (on the CPU: what views read, whatever the
        # device the model's q and k are on)
        lo, hi = self._seen(r0, r1)
        lo, hi = max(lo, c0), min(hi, c1)
        if lo >= hi:
            return out
        scores = self.scores(head, r0, r1, lo, hi)
        lse = self.normaliser(head)[r0:r1, None].to(scores.device)
        part = allowed[:, lo - c0 : hi - c0] if allowed is not None else None
        if part is not None:
            scores = scores.masked_fill(~part, float("-inf"))
        # a row with no key at all (lse -inf) has weight 0 everywhere, as masked_softmax
        weights = torch.exp(scores - lse).nan_to_num_(0.0)
        out[:, lo - c0 : hi - c0] = weights
        return out

    def head_stats(
        self,
        head: int,
        self_attention: bool,
        special_keys: list[int],
        stats: HeadStats,
        rows: tuple[int, int] | None = None,
    ) -> None:
        """Add this head's rows (all, or [start, stop): a part of the work, the parts in
        order) to `stats`: one pass over each row's keys, which also keeps the head's
        normalisers once every row is in."""
        tq, tk = self.queries, self.keys
        start, stop = rows or (0, tq)
        if stats.lse is None:
            stats.lse = torch.empty(tq)
        lse_all = stats.lse
        device = self.q.device  # (each block's arithmetic where the model's q and k are)
        special = torch.tensor(special_keys, dtype=torch.long, device=device)
        step = self._rows_per_block(tk)
        for r0 in range(start, stop, step):
            r1 = min(stop, r0 + step)
            scores, lse, lo = self._row_block(head, r0, r1)
            lse_all[r0:r1] = lse
            weights = torch.exp(scores - lse[:, None]).nan_to_num_(0.0)
            hi = lo + weights.size(1)
            stats.rows += r1 - r0
            stats.entropy += float(entropy_bits(weights).sum())
            peak, where = weights.max(-1)
            stats.max_weight += float(peak.sum())
            where = where + lo
            if lo == 0:
                stats.first += float(weights[:, 0].sum())
            inside = special[(special >= lo) & (special < hi)] - lo
            if inside.numel():
                stats.special += float(weights.index_select(1, inside).sum())
            query = torch.arange(r0, r1, device=device)
            if self_attention:
                key = torch.arange(lo, hi, dtype=torch.float32, device=device)
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
                    found = torch.nonzero(ok).squeeze(1)
                    stats.previous += float(weights[found, behind[found]].sum())
                stats.previous_rows += int((query >= 1).sum())
                values, counts = (where - query).unique(return_counts=True)
                for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                    stats.offsets[value] = stats.offsets.get(value, 0) + count
            else:
                stats.alignment += float(near_diagonal(where, query, tq, tk).double().sum())
        if stats.rows == tq:  # every row in: the head's normalisers are known
            with self._lock:
                self._normalisers[head] = lse_all
