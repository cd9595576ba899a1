"""Masks at work: decoder self-attention with the causal mask and without it (the future
it would see), and a padded batch of two sentences with its padding mask."""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.masks import pad_batch, padding_mask, same_piece
from attnviz.model.methods.analysis import without_mask

from ..errors import CannotServe
from ..payloads.text import Text
from ..payloads.wire import encode
from ..runs.reading import read_text, text_limit
from .context import LabContext


class MasksRequest(s.HeadRequest):
    second: Text | None = Field(
        None, description="The other sentence of the padded batch; default: the text's first half."
    )


class FutureHead(BaseModel):
    layer: int
    head: int
    weight: float = Field(description="Its rows' mean weight on later tokens, mask off.")


class CausalCase(BaseModel):
    rows: list[str]
    predicted: list[str] | None = Field(
        None,
        description="Where rows are decoder steps: the token each predicts (the step fed "
        "rows[i] predicts predicted[i]); the page labels cross-attention rows by it.",
    )
    with_mask: s.Matrix
    without_mask: s.Matrix
    future_weight_with: float = Field(description="Mean weight a row puts on later tokens.")
    future_weight_without: float
    most_future: FutureHead = Field(
        description="The decoder self-attention head that puts the most weight on later "
        "tokens once the mask is off (its mean future weight): where the mask matters most."
    )


class PaddingCase(BaseModel):
    tokens: list[list[str]] = Field(description="The two sentences' tokens, unpadded.")
    length: int = Field(description="The padded batch's length.")
    mask: list[list[bool]] = Field(description="Per sentence: may each key be attended to.")
    shorter: int = Field(description="Index of the shorter sentence.")
    weights: s.Matrix = Field(description="The shorter sentence's weights in the batch.")
    pad_weight: float = Field(description="Total weight on padded keys (0 when masked).")
    max_abs_diff_alone: float = Field(
        description="Its weights in the batch against a run on its own, on real tokens."
    )


class MasksResponse(BaseModel):
    model: str
    layer: int
    head: int
    causal: CausalCase | None = Field(description="Decoder self-attention; null without one.")
    padding: PaddingCase


def masks(ctx: LabContext, req: MasksRequest) -> MasksResponse:
    causal = None
    if "decoder.self" in ctx.entry.specs:
        spec = ctx.spec("decoder.self")
        ctx.check_head(spec, req.layer, req.head)
        names = [spec.hook(i, "hook_weights") for i in range(spec.layers)]
        lift = without_mask
        if ctx.result.read_in is not None:  # read in pieces: each still sees only its own
            alone = same_piece(ctx.result.read_in.target, ctx.result.read_in.target)
            lift = lambda mask, name: alone.expand_as(mask)  # noqa: E731
        off = [(spec.hook(i, "hook_mask"), lift) for i in range(spec.layers)]
        _, masked = ctx.forward(names=names[req.layer])
        _, unmasked = ctx.forward(off, names=names)
        w_on = ctx.weights(masked, spec, req.layer)[req.head]
        w_off = ctx.weights(unmasked, spec, req.layer)[req.head]
        future = torch.ones_like(w_on, dtype=torch.bool).triu(1)
        # per layer x head, the weight rows put on the future once the mask is off: where
        # the lesson shows most
        looks = torch.stack(
            [(ctx.weights(unmasked, spec, i) * future).sum(-1).mean(-1) for i in range(spec.layers)]
        )
        best = int(looks.argmax())
        causal = CausalCase(
            rows=ctx.result.target_tokens,
            predicted=ctx.predicted(spec),
            with_mask=encode(w_on, "json"),
            without_mask=encode(w_off, "json"),
            future_weight_with=round(float((w_on * future).sum(-1).mean()), 6),
            future_weight_without=round(float((w_off * future).sum(-1).mean()), 6),
            most_future=FutureHead(
                layer=best // looks.size(1),
                head=best % looks.size(1),
                weight=round(float(looks.flatten()[best]), 6),
            ),
        )
    ctx.check_head(ctx.spec("encoder.self"), req.layer, req.head)  # the padded batch's
    return MasksResponse(
        model=ctx.entry.id, layer=req.layer, head=req.head, causal=causal, padding=padding(ctx, req)
    )


def second_sentence(
    ids: list[int], tokens: list[str], special: frozenset[str]
) -> tuple[list[int], list[str]]:
    """The default second sentence of the batch: the text's first half (a closing special
    token such as [SEP] kept at its end), or the text twice when it is too short to halve."""
    closes = tokens[-1] in special
    keep = max(1, len(ids) // 2)
    if closes:  # keep [CLS] ... [SEP]
        keep = max(3, keep)
        other, kept = [*ids[: keep - 1], ids[-1]], [*tokens[: keep - 1], tokens[-1]]
    else:
        other, kept = ids[:keep], tokens[:keep]
    if len(other) == len(ids):  # too short to halve: the text twice, padding it
        if closes:
            return [*ids[:-1], *ids[1:]], [*tokens[:-1], *tokens[1:]]
        return ids * 2, tokens * 2
    return other, kept


def padding(ctx: LabContext, req: MasksRequest) -> PaddingCase:
    """The text and a second sentence in one padded batch: the padding mask, and the
    shorter one's weights, as on its own."""
    ids, source = ctx.result.source_ids, ctx.result.source_tokens
    if req.second is not None:
        limit = text_limit(ctx.inference.settings, ctx.runner)
        second = read_text(req.second, limit, field="second")
        other, tokens = ctx.runner.tokenize(second)
    else:
        other, tokens = second_sentence(ids, source, ctx.runner.special_tokens)
    if not other:
        raise CannotServe("the second sentence has no tokens")
    if len(other) == len(ids):
        raise CannotServe(
            "the two sentences have the same length, so nothing is padded: "
            "give a second sentence of another length",
        )
    other = other[: ctx.runner.max_tokens]
    tokens = tokens[: len(other)]
    batch = pad_batch([ids, other], ctx.config.pad_id)
    shorter = 0 if len(ids) < len(other) else 1
    length = len(ids) if shorter == 0 else len(other)
    together = ctx.encoder_weights(batch)[req.layer][shorter, req.head]
    alone = ctx.encoder_weights(batch[shorter : shorter + 1, :length])[req.layer][0, req.head]
    mask = padding_mask(batch, ctx.config.pad_id)[:, 0, 0]
    return PaddingCase(
        tokens=[source, tokens],
        length=batch.size(1),
        mask=mask.tolist(),
        shorter=shorter,
        weights=encode(together, "json"),
        pad_weight=round(float(together[:, length:].sum()), 9),
        max_abs_diff_alone=float((together[:length, :length] - alone).abs().max()),
    )
