"""Per layer x head of every attention type: entropy, max weight, mean distance,
previous-token, first-token and special-token weight, cross-attention alignment (each
defined and explained once, in model/methods/head_stats.py)."""

from __future__ import annotations

import attnviz.app.lab.schemas as s
from attnviz.model.methods.analysis import METRICS, head_metrics, layer_weights
from attnviz.model.methods.head_stats import explained

from .context import LabContext

EXPLAINED = explained(METRICS)  # model/methods/head_stats.py's lines, for the page


def metrics(ctx: LabContext, req: s.TextRequest) -> s.MetricsResponse:
    rows = []
    for spec in ctx.entry.specs.values():
        for layer, weights, special in layer_weights(ctx.result, spec, ctx.runner.special_tokens):
            values = head_metrics(weights, spec.self_attention, special)
            for h in range(weights.size(0)):
                rows.append(
                    s.MetricsRow(
                        type=spec.type,
                        layer=layer,
                        head=h,
                        **{name: column[h] for name, column in values.items()},
                    )
                )
    return s.MetricsResponse(model=ctx.entry.id, rows=rows, explain=EXPLAINED)
