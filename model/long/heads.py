"""Any window of a head, exact or pooled, computed a block of rows at a time."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

BLOCK_ENTRIES = 1 << 22  # values of one head computed at once (16 MB of float32)
Kind = Literal["weights", "scores", "mask", "norms"]
Reduce = Literal["max", "mean"]


def edges(start: int, stop: int, pool: int | None) -> list[int]:
    """Where each cell of [start, stop) begins, and the end: cells of one position, or of
    ceil(n / pool) positions each (the last takes the rest), at most `pool` of them."""
    width = 1 if not pool else max(1, math.ceil((stop - start) / pool))
    return [*range(start, stop, width), stop]


class Heads:
    """The heads of one attention module, read a window at a time: `block` gives exact
    values, `window` them or their pooled cells."""

    @property
    def heads(self) -> int:
        """Its query heads."""
        raise NotImplementedError

    @property
    def queries(self) -> int:
        raise NotImplementedError

    @property
    def keys(self) -> int:
        raise NotImplementedError

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

    def _any(self) -> Tensor:
        return next(t for t in (self.weights, self.scores, self.mask) if t is not None)

    @property
    def heads(self) -> int:
        found = self.weights if self.weights is not None else self.scores
        return 1 if found is None else found.size(0)

    @property
    def queries(self) -> int:
        return self._any().size(-2)

    @property
    def keys(self) -> int:
        return self._any().size(-1)

    def block(self, kind: Kind, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        if kind == "mask":
            if self.mask is None:
                return torch.ones(r1 - r0, c1 - c0)
            return self.mask[r0:r1, c0:c1].float()
        if kind == "norms":
            raise KeyError("norms need the values: read them through ValueWeighted")
        stored = self.weights if kind == "weights" else self.scores
        if stored is None:
            raise KeyError(f"this run has no {kind}")
        return stored[head, r0:r1, c0:c1].float()


@dataclass
class ValueWeighted(Heads):
    """Heads whose "norms" are their weights times each key's value norm, given for the
    query heads that are read ({head: (Tk,)}): ‖α_hij f_h(x_j)‖ (model/methods/value_norms.py), a
    block at a time like the weights they are made of; the other kinds are the source's."""

    source: Heads
    value_norms: dict[int, Tensor]

    @property
    def heads(self) -> int:
        return self.source.heads

    @property
    def queries(self) -> int:
        return self.source.queries

    @property
    def keys(self) -> int:
        return self.source.keys

    def block(self, kind: Kind, head: int, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        if kind != "norms":
            return self.source.block(kind, head, r0, r1, c0, c1)
        weights = self.source.block("weights", head, r0, r1, c0, c1)
        return weights * self.value_norms[head][c0:c1].to(weights.device, weights.dtype)
