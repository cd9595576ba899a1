"""Attention rollout (Abnar & Zuidema 2020) through a self-attention stack (of a text's
run, or of a picture's: `image`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictFloat

import attnviz.app.lab.schemas as s
from attnviz.model.methods.analysis import rollout as rollout_of

from ..payloads.schemas import AttentionType, InputRequest
from ..payloads.wire import encode
from .context import LabContext


class RolloutRequest(InputRequest):
    type: AttentionType | None = Field(None, description="A self-attention type.")
    residual: StrictFloat = Field(
        0.5, ge=0, le=1, allow_inf_nan=False, description="Weight of the identity (residual)."
    )


class RolloutResponse(BaseModel):
    model: str
    type: AttentionType
    tokens: list[str]
    matrix: s.Matrix
    residual: float
    assumes: str


ASSUMES = (
    "Each layer's heads are averaged and mixed with the identity for the residual "
    "connection, rows renormalised, and the layers multiplied (Abnar & Zuidema 2020): "
    "information is assumed to move linearly along attention weights and the residual "
    "stream only, ignoring values, the output projection, the feed-forward layers and "
    "LayerNorm. A heuristic of where information comes from, not an attribution."
)


def rollout(ctx: LabContext, req: RolloutRequest) -> RolloutResponse:
    spec = ctx.spec(req.type, self_only=True)
    layers = [ctx.weights(ctx.result.captured, spec, i).float() for i in range(spec.layers)]
    tokens, _ = ctx.tokens(spec)
    return RolloutResponse(
        model=ctx.entry.id,
        type=spec.type,
        tokens=tokens,
        matrix=encode(rollout_of(layers, req.residual), "json"),
        residual=req.residual,
        assumes=ASSUMES,
    )
