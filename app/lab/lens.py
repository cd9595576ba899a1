"""The logit lens (nostalgebraist 2020): the residual stream before each layer, and after
the last, read through the model's final norm and unembedding as if the model ended there.
For the chosen position and up to 47 before it, the most likely next token after each
layer; for the chosen position
the top tokens after each layer, and the rank and probability of the token the model
finally predicts there (its trajectory). The last row is the model's own prediction."""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import BaseModel, Field

from attnviz.model.methods.lens import Stream, lens_logits, read_stream
from attnviz.model.twins import model_inputs

from ..errors import CannotServe
from ..payloads.schemas import Index, TextRequest, Whole
from ..runs.answers import raw_piece
from .context import LabContext


class LensRequest(TextRequest):
    position: Index | None = Field(None, description="The position read (default: the last).")
    top: Whole = Field(5, ge=1, le=10, description="Top tokens listed per layer.")


class Guess(BaseModel):
    token: str = Field(description="The token as people read it (as the input's tokens).")
    id: int
    probability: float
    raw: str = Field(description='The token as the tokenizer spells it (byte-level: "Ġthe").')


def guesser(ctx: LabContext) -> Callable[[int, float], Guess]:
    """An id and its probability as a Guess: its token shown as the input's tokens are (the
    runner's vocabulary as people read it), with its raw piece."""
    vocab = ctx.runner.target_vocabulary() or []

    def shown(i: int) -> str:
        return vocab[i] if i < len(vocab) else f"<{i}>"

    raw = raw_piece(ctx.runner, shown)

    def guess(i: int, p: float) -> Guess:
        return Guess(token=shown(i), id=i, probability=round(p, 6), raw=raw(i))

    return guess


TABLE = 48  # the positions of the depth × position table: the chosen one and those before


class LensRow(BaseModel):
    label: str = Field(description='"embeddings", or "after layer i" (the last: the output).')
    best: list[Guess] = Field(
        description="Per position from `first` to the chosen one (at most 48), the most "
        "likely next token read at this depth."
    )
    top: list[Guess] = Field(description="At the chosen position, the top tokens.")
    rank: int = Field(
        description="At the chosen position, the rank (1: the most likely) of the token the "
        "model finally predicts there."
    )
    probability: float = Field(description="That token's probability at this depth.")


class LensResponse(BaseModel):
    model: str
    tokens: list[str] = Field(description="The input's tokens, one per position.")
    raw_tokens: list[str] = Field(description="The same as the tokenizer spells them.")
    position: int
    first: int = Field(description="The position of each row's first `best` entry.")
    predicted: Guess = Field(description="What the model predicts after the chosen position.")
    rows: list[LensRow] = Field(
        description="One per depth: the embeddings alone, then after each layer; the "
        "residual through the final norm and unembedding (the last row: the model's logits)."
    )


def stream_of(ctx: LabContext) -> Stream:
    """The run's residual stream (one more forward pass), or a 422 saying why not."""
    try:
        return read_stream(ctx.model, model_inputs(ctx.config, ctx.source, ctx.target))
    except ValueError as exc:
        raise CannotServe(f"{ctx.entry.id}: {exc}") from None


def position_of(asked: int | None, tokens: list[str]) -> int:
    if asked is None:
        return len(tokens) - 1
    if asked >= len(tokens):
        raise CannotServe(f"position {asked} out of range: the input has 0..{len(tokens) - 1}")
    return asked


def lens(ctx: LabContext, req: LensRequest) -> LensResponse:
    tokens = ctx.result.target_tokens
    position = position_of(req.position, tokens)
    stream = stream_of(ctx)
    guess = guesser(ctx)

    final = int(stream.logits[position].argmax())
    first = max(0, position + 1 - TABLE)
    rows = []
    for depth in range(len(stream.pre) + 1):
        probs = torch.softmax(lens_logits(stream, depth, slice(first, position + 1)), dim=-1)
        best_p, best = probs.max(-1)
        here = probs[-1]
        top_p, top = here.topk(min(req.top, here.numel()))
        rows.append(
            LensRow(
                label="embeddings" if depth == 0 else f"after layer {depth - 1}",
                best=[guess(int(i), float(p)) for i, p in zip(best, best_p, strict=True)],
                top=[guess(int(i), float(p)) for i, p in zip(top, top_p, strict=True)],
                rank=int((here > here[final]).sum()) + 1,
                probability=round(float(here[final]), 6),
            )
        )
    return LensResponse(
        model=ctx.entry.id,
        tokens=tokens,
        raw_tokens=ctx.result.raw("target"),
        position=position,
        first=first,
        predicted=guess(final, rows[-1].probability),
        rows=rows,
    )
