"""The contribution graph (the LLM Transparency Tool's): how the prediction at a position
is built from the input tokens, through each layer's attention heads and feed-forward
blocks. Each part of a token's residual stream (a head's output from one token, the
residual carried over, a feed-forward block's output) gets a share of the whole by how
close it is to it (L1 distance); the edges whose share is above the threshold (each row
renormalized without the rest), followed back from the position's last residual to the
input tokens, are the graph. An attention edge names its heads' shares."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field, StrictFloat

from attnviz.model.methods.graph import graph as graph_of
from attnviz.model.methods.graph import read_shares

from ..errors import CannotServe
from ..payloads.schemas import Index, TextRequest
from .context import LabContext
from .lens import position_of, stream_of

# what one graph computes: its parts, tokens² / 2 × heads × width × layers (SmolLM2's at
# 128 tokens; a larger model reads fewer), and the edges it sends
BUDGET = 1_300_000_000
MOST_EDGES = 20_000


class GraphRequest(TextRequest):
    position: Index | None = Field(None, description="The position read (default: the last).")
    threshold: StrictFloat = Field(
        0.04, ge=0.001, le=1, allow_inf_nan=False,
        description="The least share an edge keeps (the tool's default: 0.04).",
    )  # fmt: skip


class GraphEdge(BaseModel):
    source: str = Field(
        description="X0_j: token j's embeddings; A{l}_i: token i's residual after layer l's "
        "attention; M{l}_i: layer l's feed-forward output at i; I{l}_i: after layer l."
    )
    target: str
    weight: float = Field(description="The share, its row renormalized above the threshold.")
    heads: list[float] | None = Field(None, description="An attention edge: each head's share.")
    residual: float = Field(0.0, description="An edge j → i with j = i: the residual's share.")


class GraphResponse(BaseModel):
    model: str
    tokens: list[str]
    position: int
    predicted: str = Field(description="The token the model predicts after the position.")
    layers: int
    heads: int
    threshold: float
    edges: list[GraphEdge]


def graph(ctx: LabContext, req: GraphRequest) -> GraphResponse:
    tokens = ctx.result.target_tokens
    spec = ctx.spec("decoder.self")
    per_pair = spec.query_heads * ctx.config.d_model * spec.layers / 2
    most = int(math.sqrt(BUDGET / per_pair))
    if len(tokens) > most:
        raise CannotServe(
            f"the contribution graph of {ctx.entry.id} reads at most {most} tokens (its parts "
            f"grow as the square of the length); this input has {len(tokens):,}: shorten it"
        )
    position = position_of(req.position, tokens)
    try:
        shares = read_shares(ctx.model, stream_of(ctx), ctx.result.captured, spec)
    except ValueError as exc:
        raise CannotServe(f"{ctx.entry.id}: {exc}") from None
    edges = graph_of(shares, position, req.threshold)
    if len(edges) > MOST_EDGES:
        raise CannotServe(
            f"{len(edges):,} edges are above {req.threshold}: at most {MOST_EDGES:,} are sent "
            "(raise the threshold)"
        )
    predicted = ctx.result.predicted_tokens or []
    return GraphResponse(
        model=ctx.entry.id,
        tokens=tokens,
        position=position,
        predicted=predicted[position] if position < len(predicted) else "",
        layers=spec.layers,
        heads=spec.query_heads,
        threshold=req.threshold,
        edges=[
            GraphEdge(
                source=e.source,
                target=e.target,
                weight=round(e.weight, 6),
                heads=[round(h, 6) for h in e.heads] if e.heads is not None else None,
                residual=round(e.residual, 6),
            )
            for e in edges
        ],
    )
