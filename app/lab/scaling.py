"""Why divide by √d_k: the same input with and without the scaling of q kᵀ — one head's
weights both ways, and every head's entropy and largest weight both ways."""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.methods.analysis import focus

from ..payloads.schemas import AttentionType
from ..payloads.wire import encode
from .context import LabContext


class HeadPair(BaseModel):
    rows: list[str]
    predicted: list[str] | None = Field(
        None,
        description="Where rows are decoder steps: the token each predicts (the step fed "
        "rows[i] predicts predicted[i]); the page labels cross-attention rows by it.",
    )
    columns: list[str]
    first: s.Matrix
    second: s.Matrix


class ScalingHead(BaseModel):
    layer: int
    head: int
    entropy_scaled: float = Field(description="Mean row entropy (bits) with q kᵀ / √d_k.")
    entropy_unscaled: float = Field(description="The same with the scaling removed.")
    max_weight_scaled: float
    max_weight_unscaled: float


class ScalingResponse(BaseModel):
    model: str
    type: AttentionType
    head_dim: int
    matrices: HeadPair = Field(description="first: scaled (the model); second: unscaled.")
    head_stats: list[ScalingHead] = Field(description="Every layer x head of the type.")
    mean_entropy_scaled: float
    mean_entropy_unscaled: float


def scaling(ctx: LabContext, req: s.HeadRequest) -> ScalingResponse:
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    layers = range(spec.layers)
    names = [spec.hook(i, "hook_weights") for i in layers]
    scale = ctx.score_scale(spec)  # (the model's own: 1/sqrt(d_head) on our model code)
    hooks = ctx.hooks_on(".hook_scores", lambda scores, name: scores / scale)
    _, scaled = ctx.forward(names=names)
    _, unscaled = ctx.forward(hooks, names=names)
    rows, columns = ctx.tokens(spec)
    stats_of_heads: list[ScalingHead] = []
    entropies: dict[bool, list[torch.Tensor]] = {True: [], False: []}
    for i in layers:
        stats = {}
        for key, capture in ((True, scaled), (False, unscaled)):
            stats[key] = focus(ctx.weights(capture, spec, i))
            entropies[key].append(stats[key][0])
        for h in range(spec.query_heads):
            stats_of_heads.append(
                ScalingHead(
                    layer=i,
                    head=h,
                    entropy_scaled=round(float(stats[True][0][h]), 6),
                    entropy_unscaled=round(float(stats[False][0][h]), 6),
                    max_weight_scaled=round(float(stats[True][1][h]), 6),
                    max_weight_unscaled=round(float(stats[False][1][h]), 6),
                )
            )
    return ScalingResponse(
        model=ctx.entry.id,
        type=spec.type,
        head_dim=spec.head_dim,
        matrices=HeadPair(
            rows=rows,
            predicted=ctx.predicted(spec),
            columns=columns,
            first=encode(ctx.weights(scaled, spec, req.layer)[req.head], "json"),
            second=encode(ctx.weights(unscaled, spec, req.layer)[req.head], "json"),
        ),
        head_stats=stats_of_heads,
        mean_entropy_scaled=round(float(torch.cat(entropies[True]).mean()), 6),
        mean_entropy_unscaled=round(float(torch.cat(entropies[False]).mean()), 6),
    )
