"""Order needs positional encodings: the encoder on the input and on a permutation of it
(default reversed: 猫追狗 → 狗追猫), with its positional encoding and without. Without it
the permuted input's weights are the permuted weights (max abs diff ~1e-6)."""

from __future__ import annotations

from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.methods.analysis import permuted, without_positions

from ..errors import CannotServe
from ..payloads.schemas import Index
from ..payloads.wire import encode
from .context import LabContext


class PositionsRequest(s.HeadRequest):
    order: list[Index] | None = Field(
        None,
        max_length=10_001,  # (an Index's range: a permutation of at most that many)
        description="A permutation of the source positions; default: reversed (between "
        "[CLS] and [SEP] for WordPiece models). 猫追狗 reversed is 狗追猫.",
    )


class PositionsCase(BaseModel):
    max_abs_diff: float = Field(
        description="max |W(permuted input) - P W(input) Pᵀ| over every encoder layer and head."
    )
    original: s.Matrix
    permuted: s.Matrix


class PositionsResponse(BaseModel):
    model: str
    tokens: list[str]
    permuted_tokens: list[str]
    order: list[int]
    with_positions: PositionsCase
    without_positions: PositionsCase


def default_order(tokens: list[str], special: frozenset[str]) -> list[int]:
    """The positions reversed, leading and trailing special tokens ([CLS], [SEP]) kept."""
    n = len(tokens)
    start = 1 if n > 1 and tokens[0] in special else 0
    end = n - 1 if n - 1 > start and tokens[-1] in special else n
    return [*range(start), *range(end - 1, start - 1, -1), *range(end, n)]


def positions(ctx: LabContext, req: PositionsRequest) -> PositionsResponse:
    ctx.check_head(ctx.spec("encoder.self"), req.layer, req.head)
    tokens = ctx.result.source_tokens
    n = len(tokens)
    if req.order is None:
        order = default_order(tokens, ctx.runner.special_tokens)
    else:
        order = list(req.order)
        if sorted(order) != list(range(n)):
            raise CannotServe(f"order must be a permutation of 0..{n - 1} (the {n} source tokens)")
    moved = ctx.source[:, order]
    # a text read in pieces: each token keeps its piece, wherever the order puts it
    pieces = None if ctx.result.read_in is None else ctx.result.read_in.source
    moved_pieces = None if pieces is None else pieces[order]
    off = ctx.hooks_on("encoder.hook_pos", without_positions)
    cases = {}
    for key, hooks in (("with", []), ("without", off)):
        original = ctx.encoder_weights(ctx.source, hooks, pieces)
        shuffled = ctx.encoder_weights(moved, hooks, moved_pieces)
        diff = max(
            float((b[0] - permuted(a[0], order)).abs().max())
            for a, b in zip(original, shuffled, strict=True)
        )
        cases[key] = PositionsCase(
            max_abs_diff=diff,
            original=encode(original[req.layer][0, req.head], "json"),
            permuted=encode(shuffled[req.layer][0, req.head], "json"),
        )
        del original, shuffled  # every layer's weights: large at 512 tokens
    return PositionsResponse(
        model=ctx.entry.id,
        tokens=tokens,
        permuted_tokens=[tokens[i] for i in order],
        order=order,
        with_positions=cases["with"],
        without_positions=cases["without"],
    )
