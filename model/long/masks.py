"""How a long run's mask is kept: described (`MaskRule`), never as an N x N tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


class Mask(Protocol):
    """Which keys each query may attend, read a block at a time."""

    @property
    def queries(self) -> int: ...

    @property
    def keys(self) -> int: ...

    def block(
        self, r0: int, r1: int, c0: int, c1: int, device: torch.device | None = None
    ) -> Tensor | None:
        """(r1 - r0, c1 - c0) bool, True = may attend (on `device`, else the CPU); None
        where every key may be seen."""
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

    def block(
        self, r0: int, r1: int, c0: int, c1: int, device: torch.device | None = None
    ) -> Tensor | None:
        out = None
        if self.causal:
            offset = self.keys - self.queries
            q = torch.arange(r0, r1, device=device)[:, None] + offset
            k = torch.arange(c0, c1, device=device)[None, :]
            out = k <= q
            if self.window is not None:
                out &= k > q - self.window
        if self.valid is not None:
            valid = self.valid[c0:c1][None, :].to(device or "cpu")
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

    def block(
        self, r0: int, r1: int, c0: int, c1: int, device: torch.device | None = None
    ) -> Tensor | None:
        return self.mask[r0:r1, c0:c1].to(device or "cpu")

    def seen(self, r0: int, r1: int) -> tuple[int, int]:
        return 0, self.keys
