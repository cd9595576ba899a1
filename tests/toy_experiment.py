"""The strongest key of each query row of one head, and its weight.

A toy lab experiment, registered as a plugin (ATTNVIZ_PLUGINS='["tests.toy_experiment"]'):
what adding an experiment takes — a function of (context, request), its request and
answer models, and one register line. The page's half is TOY_MODULE in
tests/e2e/test_toy_experiment.py: one module, and one line in static/js/views/lab/index.js."""

from __future__ import annotations

from pydantic import BaseModel

from attnviz.app.lab import LabRoute, register
from attnviz.app.lab.context import LabContext
from attnviz.app.lab.schemas import HeadRequest


class StrongestKeys(BaseModel):
    model: str
    type: str
    rows: list[str]  # the head's query tokens
    strongest: list[str]  # for each row, the key it gives the most weight
    weight: list[float]  # and that weight


def strongest_keys(ctx: LabContext, req: HeadRequest) -> StrongestKeys:
    """The key each query row of one head gives the most weight, and the weight."""
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    weights = ctx.weights(ctx.result.captured, spec, req.layer)[req.head].float()
    rows, columns = ctx.tokens(spec)
    best = weights.max(-1)
    return StrongestKeys(
        model=ctx.entry.id,
        type=spec.type,
        rows=rows,
        strongest=[columns[int(i)] for i in best.indices],
        weight=[round(float(w), 6) for w in best.values],
    )


register(LabRoute("toy-strongest", strongest_keys, HeadRequest, StrongestKeys))
