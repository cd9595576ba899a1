"""Padding and causal masks, boolean with True meaning "may attend" (the seed's convention)."""

from __future__ import annotations

import torch
from torch import Tensor


def pad_batch(rows: list[list[int]], pad_id: int = 0) -> Tensor:
    """Id lists of different lengths as one (B, T) batch, padded at the end."""
    batch = torch.full((len(rows), max(map(len, rows))), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return batch


def padding_mask(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Keys that are not padding: (B, T) -> (B, 1, 1, T)."""
    return (ids != pad_id).unsqueeze(1).unsqueeze(2)


def causal_mask(
    q_len: int,
    k_len: int | None = None,
    device: torch.device | None = None,
    window: int | None = None,
) -> Tensor:
    """(Tq, Tk): the last Tq of Tk positions each see themselves and what came before (with
    a sliding `window`, Mistral's: only the `window` newest of those, themselves included).

    With k_len > q_len (cached decoding) the queries are the newest positions.
    """
    k_len = q_len if k_len is None else k_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    seen = torch.tril(ones, diagonal=k_len - q_len)
    if window is not None:
        seen &= torch.triu(ones, diagonal=k_len - q_len - window + 1)
    return seen


def generate_mask(src: Tensor, target: Tensor, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """The seed's masks: src (B, 1, 1, S) padding; target (B, 1, T, T) padding & causal."""
    return padding_mask(src, pad_id), decoder_mask(target, pad_id)


def decoder_mask(
    ids: Tensor, pad_id: int = 0, q_len: int | None = None, window: int | None = None
) -> Tensor:
    """Padding & causal (within a sliding `window`, if any) over all `ids` (B, Tk) for the
    last `q_len` of them: (B, 1, Tq, Tk)."""
    k_len = ids.size(1)
    q_len = k_len if q_len is None else q_len
    return padding_mask(ids, pad_id) & causal_mask(q_len, k_len, ids.device, window)


def piece_positions(pieces: Tensor) -> Tensor:
    """Each position's index within its piece, from the piece of each position (T,): the
    positions a piece would have read alone."""
    same = pieces[:, None] == pieces[None, :]  # (T, T)
    before = torch.tril(torch.ones_like(same), diagonal=-1)  # j < i
    return (same & before).sum(-1)


def same_piece(query_pieces: Tensor, key_pieces: Tensor) -> Tensor:
    """(1, 1, Tq, Tk) from the piece of each query (Tq,) and key (Tk,): a query sees the
    keys of its own piece only."""
    return (query_pieces[:, None] == key_pieces[None, :])[None, None]
