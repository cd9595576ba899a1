"""Attention vs. contribution: where a head's weights and its value-weighted norms
(Kobayashi et al. 2020: ‖α_ij f_h(x_j)‖, what key j actually adds to query i) disagree on
this input. Each query row's norms divided by their sum are the share of the head's output
each key gives it; the weights are the share of its attention. Per head, the mean over
rows of the total variation distance between the two (0: the same, 1: disjoint); for the
chosen head, each key's mean weight and mean norm share over the rows, the keys where
they differ most first (a [SEP] or <s> that takes much weight and adds little)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field
from torch import Tensor

import attnviz.app.lab.schemas as s
from attnviz.model.methods.value_norms import layer_norms

from ..errors import CannotServe
from ..payloads.schemas import AttentionType
from .context import LabContext


class KeyContribution(BaseModel):
    position: int
    token: str
    weight: float = Field(description="The key's mean attention weight over the query rows.")
    norm_share: float = Field(
        description="Its mean share of the rows' value-weighted norms (each row's norms over "
        "their sum): what it adds, where the weight is what it is given."
    )


class ContributionResponse(BaseModel):
    model: str
    type: AttentionType
    layer: int
    head: int
    distance: list[list[float]] = Field(
        description="[layer][head]: the mean over rows of the total variation distance between "
        "a row's weights and its norm shares (0: the same, 1: disjoint)."
    )
    keys: list[KeyContribution] = Field(
        description="The chosen head's keys, where weight and norm share differ most first."
    )


def shares(norms: Tensor) -> Tensor:
    """Each row's norms over their sum (a row of zeros stays zeros): (..., Tq, Tk)."""
    total = norms.sum(-1, keepdim=True)
    return torch.where(total > 0, norms / total.clamp_min(1e-30), torch.zeros_like(norms))


def contribution(ctx: LabContext, req: s.HeadRequest) -> ContributionResponse:
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    capture = ctx.result.captured
    distance, chosen = [], None
    for layer in range(spec.layers):
        try:
            norms = layer_norms(ctx.entry.runner.model, capture, spec, layer).double()
        except ValueError as exc:
            raise CannotServe(f"{ctx.entry.id}: {exc}") from None
        weights = ctx.weights(capture, spec, layer).double()
        share = shares(norms)
        distance.append(
            [round(float(v), 6) for v in 0.5 * (weights - share).abs().sum(-1).mean(-1)]
        )
        if layer == req.layer:
            chosen = weights[req.head].mean(0), share[req.head].mean(0)
    assert chosen is not None  # (check_head: the layer is one of them)
    weight, norm_share = chosen
    _, keys = ctx.tokens(spec)
    order = sorted(range(len(keys)), key=lambda j: -abs(float(weight[j] - norm_share[j])))
    return ContributionResponse(
        model=ctx.entry.id,
        type=spec.type,
        layer=req.layer,
        head=req.head,
        distance=distance,
        keys=[
            KeyContribution(
                position=j,
                token=keys[j],
                weight=round(float(weight[j]), 6),
                norm_share=round(float(norm_share[j]), 6),
            )
            for j in order
        ],
    )
