"""Per layer x head of every attention type: entropy, max weight, mean distance,
previous-token, first-token and special-token weight, cross-attention alignment."""

from __future__ import annotations

from model.analysis import head_metrics, layer_weights

from . import schemas as s
from .context import LabContext

EXPLAINED = {
    "entropy": "mean softmax entropy of a query row, in bits (low: focused)",
    "max_weight": "mean of each row's largest weight",
    "distance": "self-attention: mean |query - key| in tokens, weighted by attention",
    "previous": "self-attention: mean weight on the token just before the query",
    "first": "mean weight on the first key",
    "special": "mean weight on special tokens ([CLS], [SEP], <bos>)",
    "alignment": "cross-attention: share of rows whose strongest key is within one token of "
    "the diagonal stretched over both lengths",
}


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
