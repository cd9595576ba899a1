"""Per layer x head of every attention type: entropy, max weight, mean distance,
previous-token, first-token and special-token weight, cross-attention alignment (each
defined and explained once, in model/methods/head_stats.py)."""

from __future__ import annotations

from pydantic import BaseModel

import attnviz.app.lab.schemas as s
from attnviz.model.methods.analysis import METRICS, head_metrics, layer_weights
from attnviz.model.methods.head_stats import explained

from ..payloads.schemas import AttentionType
from .context import LabContext


class MetricsRow(BaseModel):
    type: AttentionType
    layer: int
    head: int
    entropy: float
    max_weight: float
    distance: float | None
    previous: float | None
    first: float
    special: float
    alignment: float | None


class MetricsResponse(BaseModel):
    model: str
    rows: list[MetricsRow]
    explain: dict[str, str]


EXPLAINED = explained(METRICS)  # model/methods/head_stats.py's lines, for the page


def metrics(ctx: LabContext, req: s.TextRequest) -> MetricsResponse:
    rows = []
    for spec in ctx.entry.specs.values():
        for layer, weights, special in layer_weights(ctx.result, spec, ctx.runner.special_tokens):
            values = head_metrics(weights, spec.self_attention, special)
            for h in range(weights.size(0)):
                rows.append(
                    MetricsRow(
                        type=spec.type,
                        layer=layer,
                        head=h,
                        **{name: column[h] for name, column in values.items()},
                    )
                )
    return MetricsResponse(model=ctx.entry.id, rows=rows, explain=EXPLAINED)
