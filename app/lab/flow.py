"""Attention flow (Abnar & Zuidema 2020) through a self-attention stack: the layers as a
graph, each layer's heads averaged and mixed with the identity for the residual connection
(as rollout mixes them), each query's edge to each key carrying its weight as a capacity;
the flow from an input position to one output position is the graph's maximum flow between
them. Unlike rollout, which multiplies the layers (every path's product), flow lets each
path carry at most its narrowest edge."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

from attnviz.model.methods.analysis import rollout as rollout_of

from ..errors import CannotServe
from ..payloads.schemas import AttentionType, Position
from ..request import charge
from ..runs.inference import stop_if_cancelled
from .context import LabContext
from .rollout import RolloutRequest

# the graph's edges at most (layers x positions x positions): a 197-position ViT-B/16 of
# 12 layers has 466,000; past this a 422 names the input's
MOST_EDGES = 2_000_000
SCALE = 1_000_000  # capacities as integers (scipy's maximum flow): a millionth of a weight
EDGE_FLOWS_A_UNIT = 1_000_000  # its price: a unit of work a million edges of the flows


class FlowRequest(RolloutRequest):  # (its type and residual, as rollout mixes them)
    query: Position = Field(0, description="The output position whose inflow is measured.")


class FlowResponse(BaseModel):
    model: str
    type: AttentionType
    tokens: list[str]
    query: int
    flow: list[float] = Field(
        description="Per input position: the maximum flow from it to `query` after the last "
        "layer (capacities to a millionth)."
    )
    rollout: list[float] = Field(description="The same row of attention rollout, beside it.")
    residual: float
    assumes: str


ASSUMES = (
    "Each layer's heads are averaged and mixed with the identity for the residual "
    "connection, rows renormalised (as rollout does); each weight is an edge's capacity "
    "from a key at one layer to a query at the next, and an input's flow to the query is the "
    "graph's maximum flow between them (Abnar & Zuidema 2020). Like rollout it ignores "
    "values, the output projection, the feed-forward layers and LayerNorm."
)


def mixed(layers: list, residual: float) -> list[np.ndarray]:
    """Each layer's heads averaged, mixed with the identity, rows renormalised (T, T)."""
    out = []
    for weights in layers:
        mean = weights.double().mean(0).numpy()
        a = residual * np.eye(mean.shape[0]) + (1 - residual) * mean
        out.append(a / a.sum(-1, keepdims=True))
    return out


def flows_to(matrices: list[np.ndarray], query: int) -> list[float]:
    """The maximum flow from each input position to `query` after the last layer: nodes
    (layer, position), layer 0 the inputs; an edge from key j at layer l to query i at
    layer l + 1 of capacity matrices[l][i, j]."""
    count, size = len(matrices), matrices[0].shape[0]
    rows, columns, capacities = [], [], []
    for layer, a in enumerate(matrices):
        i, j = np.nonzero(a > 0)
        rows.append(layer * size + j)
        columns.append((layer + 1) * size + i)
        capacities.append(np.rint(a[i, j] * SCALE).astype(np.int32))
    nodes = (count + 1) * size
    graph = csr_array(
        (np.concatenate(capacities), (np.concatenate(rows), np.concatenate(columns))),
        shape=(nodes, nodes),
    )
    sink = count * size + query
    found = []
    for source in range(size):
        if source % 16 == 0:
            stop_if_cancelled()  # (its client gone, or its deadline past)
        found.append(maximum_flow(graph, source, sink).flow_value / SCALE)
    return found


def flow(ctx: LabContext, req: FlowRequest) -> FlowResponse:
    spec = ctx.spec(req.type, self_only=True)
    tokens, _ = ctx.tokens(spec)
    size = len(tokens)
    if req.query >= size:
        raise CannotServe(f"query {req.query} is out of range: the input has {size} positions")
    edges = spec.layers * size * size
    if edges > MOST_EDGES:
        raise CannotServe(
            f"attention flow over {size:,} positions and {spec.layers} layers is a graph of "
            f"{edges:,} edges; at most {MOST_EDGES:,}: a shorter input, or rollout"
        )
    # a max flow a position, each over the whole graph (ViT-B/16's 197: 4.7 s here)
    charge(
        size * edges / EDGE_FLOWS_A_UNIT,
        f"attention flow from {size:,} positions",
        "a unit a million edges of its maximum flows",
    )
    layers = [ctx.weights(ctx.result.captured, spec, i).float() for i in range(spec.layers)]
    rolled = rollout_of(layers, req.residual)[req.query]
    return FlowResponse(
        model=ctx.entry.id,
        type=spec.type,
        tokens=tokens,
        query=req.query,
        flow=[round(v, 6) for v in flows_to(mixed(layers, req.residual), req.query)],
        rollout=[round(float(v), 6) for v in rolled],
        residual=req.residual,
        assumes=ASSUMES,
    )
