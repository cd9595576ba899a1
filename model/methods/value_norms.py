"""Value-weighted attention (Kobayashi et al. 2020, "Attention is Not Only a Weight:
Analyzing Transformers with Vector Norms"): what key j actually adds to query i through
head h is the vector α_hij · f_h(x_j), with f_h(x) = (x W_V^h + b_V^h) W_O^h — the value
vector (its bias in) carried through the head's slice of the output projection. Its norm
‖α_hij f_h(x_j)‖ = α_hij ‖f_h(x_j)‖ (α ≥ 0) corrects a weight for how much its value
vector weighs: a large weight on a token whose transformed value is small ([SEP], <s>)
adds little. The output projection's bias is added once after the heads are summed, so it
belongs to no head and no key."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from ..attention_types import AttentionSpec
from ..hooks import Capture
from ..served import ServedModel


def check_heads(v: Tensor, wo: Tensor, heads: int) -> None:
    """ValueError unless the output projection's weight (d_model, H * d_head) takes
    `heads` query heads of the value vectors' width, read from their H_kv heads."""
    kv_heads, _, d_head = v.shape
    if wo.size(1) != heads * d_head or heads % kv_heads:
        raise ValueError(
            f"an output projection of {tuple(wo.shape)} does not take {heads} heads of "
            f"{d_head} read from {kv_heads} value heads"
        )


def head_values(v: Tensor, wo: Tensor, heads: int) -> Tensor:
    """f_h(x_j) = v_j^h W_O^h for every query head and key: (H, Tk, d_model), from the value
    vectors (H_kv, Tk, d_head), bias included (what `hook_v` sees; query head h reads
    key/value head h // (H / H_kv): grouped-query attention) and the output projection's
    weight (d_model, H * d_head), as `nn.Linear` stores it: head h's slice is its columns
    h * d_head .. (h + 1) * d_head."""
    kv_heads, _, d_head = v.shape
    check_heads(v, wo, heads)
    per_head = wo.reshape(wo.size(0), heads, d_head).permute(1, 2, 0)  # (H, d_head, d_model)
    values = v.repeat_interleave(heads // kv_heads, dim=0)  # (H, Tk, d_head)
    return values.to(per_head.dtype) @ per_head


def value_norms(v: Tensor, wo: Tensor, n_heads: int, heads: list[int] | None = None) -> Tensor:
    """‖f_h(x_j)‖ per query head (those of `heads`, default all, in their order) and key:
    (len(heads), Tk) (see `head_values`). From each head's Gram matrix G_h = W_O^h W_O^hᵀ
    (d_head × d_head), ‖v W_O^h‖² = v G_h vᵀ, in float64: no (H, Tk, d_model) tensor is
    made (at 8,192 tokens that is 170 MB for SmolLM2, gigabytes for a larger model)."""
    kv_heads, _, d_head = v.shape
    check_heads(v, wo, n_heads)
    chosen = list(range(n_heads)) if heads is None else heads
    per_head = wo.double().reshape(wo.size(0), n_heads, d_head).permute(1, 2, 0)[chosen]
    gram = per_head @ per_head.transpose(1, 2)  # (h, d_head, d_head)
    group = n_heads // kv_heads
    values = v.double()[torch.tensor([h // group for h in chosen], dtype=torch.long)]
    squares = ((values @ gram) * values).sum(-1)  # (h, Tk)
    return squares.clamp_min(0).sqrt().to(v.dtype)


def output_projection(model: ServedModel, spec: AttentionSpec, layer: int) -> Tensor:
    """A layer's output projection's weight (d_model, H * d_head), as `nn.Linear` stores it
    (a Conv1D's transposed). A ValueError where there is none."""
    refusal = getattr(model, "weights_refusal", None)
    if refusal is not None:
        raise ValueError(refusal)
    module = model.projection_module(spec.type, layer)
    if module is None:
        raise ValueError(
            "its attention's output is changed (gated or normalized) before a projection "
            "reads it: what each head adds is not one linear map of its values"
        )
    weight = cast(Tensor, module.weight).detach()
    return weight if isinstance(module, nn.Linear) else weight.t()


def layer_value_norms(
    model: ServedModel,
    capture: Capture,
    spec: AttentionSpec,
    layer: int,
    heads: list[int] | None = None,
) -> Tensor:
    """‖f_h(x_j)‖ (len(heads), Tk) of one layer of a captured run (its first row), short or
    long, for its query heads `heads` (default all): its value vectors from the capture,
    its output projection from the model (a ValueError where it has none: see
    `output_projection`)."""
    wo = output_projection(model, spec, layer)
    return value_norms(capture[spec.hook(layer, "hook_v")][0], wo, spec.query_heads, heads)


def layer_norms(model: ServedModel, capture: Capture, spec: AttentionSpec, layer: int) -> Tensor:
    """One layer's value-weighted norms (H, Tq, Tk) of a short captured run (its first
    row): its weights from the capture (see `layer_value_norms`)."""
    weights = capture[spec.hook(layer, "hook_weights")][0]
    norms = layer_value_norms(model, capture, spec, layer)
    return weights * norms[:, None, :].to(weights.dtype)
