"""ALTI (Ferrando et al. 2022): how much each token contributes to each token's output of
every attention block — its heads, the residual connection and (after a post-norm block)
the layer norm included — measured by how close each token's term is to the whole (L1
distance), rows summing to 1, and composed over the layers as rollout is. Beside it,
rollout on the same input: raw weights averaged over heads and mixed with the identity;
and the chosen layer's norms of the same terms (Kobayashi et al. 2021)."""

from __future__ import annotations

from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.methods.alti import alti as alti_of
from attnviz.model.methods.analysis import rollout as rollout_of
from attnviz.model.twins import model_inputs

from ..errors import CannotServe
from ..payloads.schemas import AttentionType, Index, TextRequest
from ..payloads.wire import encode
from .context import LabContext


class AltiRequest(TextRequest):
    type: AttentionType | None = Field(None, description="A self-attention type.")
    layer: Index = Field(0, description="The layer whose own contributions are shown.")


class AltiResponse(BaseModel):
    model: str
    type: AttentionType
    tokens: list[str]
    layer: int
    composed: s.Matrix = Field(
        description="[i][j]: how much input token j contributes to token i after every "
        "layer (each layer's contributions multiplied, C_{L-1} ··· C_0); rows sum to 1."
    )
    layer_contributions: s.Matrix = Field(
        description="[i][j]: the chosen layer's own contributions; rows sum to 1."
    )
    norms: s.Matrix = Field(
        description="[i][j]: the chosen layer's ‖T_i(x_j)‖ (Kobayashi et al. 2021): the size "
        "of what token j adds to token i's output through the heads, the residual (j = i) "
        "and, in a post-norm block, the layer norm."
    )
    rollout: s.Matrix = Field(
        description="Attention rollout on the same input (residual 0.5), for comparison."
    )


def alti(ctx: LabContext, req: AltiRequest) -> AltiResponse:
    spec = ctx.spec(req.type, self_only=True)
    if req.layer >= spec.layers:
        raise CannotServe(f"layer {req.layer} out of range: {spec.type} has 0..{spec.layers - 1}")
    inputs = model_inputs(ctx.config, ctx.source, ctx.target)
    try:
        made = alti_of(ctx.model, inputs, spec, norms_of=req.layer, read_in=ctx.read_in)
    except ValueError as exc:
        raise CannotServe(f"{ctx.entry.id}: {exc}") from None
    weights = [ctx.weights(ctx.result.captured, spec, i).float() for i in range(spec.layers)]
    tokens, _ = ctx.tokens(spec)
    return AltiResponse(
        model=ctx.entry.id,
        type=spec.type,
        tokens=tokens,
        layer=req.layer,
        composed=encode(made.composed.float(), "json"),
        layer_contributions=encode(made.layers[req.layer].float(), "json"),
        norms=encode(made.norms.float(), "json") if made.norms is not None else [],
        rollout=encode(rollout_of(weights, 0.5), "json"),
    )
