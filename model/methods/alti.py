"""ALTI (Ferrando et al. 2022, "Measuring the Mixing of Contextual Information in the
Transformer"): how much each token j contributes to each token i's output of a layer's
attention block — its heads, the residual and (after a post-norm block) the layer norm
included — and the composition of those contributions over the layers.

For one layer, with x its input and f_h(x_j) = v_j^h W_O^h the value vector through head
h's slice of the output projection (model/methods/value_norms.py), token i's output is a sum over
the tokens j:

    y_i = Σ_j T_i(x_j) + b_O,    T_i(x_j) = Σ_h α_hij f_h(x_j) + δ_ij x_i

(the residual belongs to i itself; the output bias to no token). A post-norm block
(BERT's) normalizes y_i: with s_i its standard deviation, LN(y_i) is linear in the terms,
T_i(x_j) ↦ γ ⊙ (T_i(x_j) − mean) / s_i, and the bias terms (b_O's, β) stay in the whole. A
pre-norm block (a decoder's, ModernBERT's) normalizes each x_j before its values are made, so its
terms are as above with the whole y_i itself. Each term's contribution is how close it
is to the whole, in the L1 distance:

    c_ij = max(0, ‖ŷ_i‖₁ − ‖ŷ_i − T_i(x_j)‖₁),   C[i, j] = c_ij / Σ_k c_ik

and the layers compose as rollout does, C_{L−1} ··· C_0: row i of the product is how much
each input token contributes to token i at the top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..attention_types import AttentionSpec
from ..hooks import Recorder
from ..served import ServedModel
from .value_norms import head_values, output_projection

ROW_BLOCK = 2_400_000  # the entries (keys × rows × width) of the terms held at once


@dataclass
class Alti:
    """One stack's ALTI on one input: each layer's contributions and their composition."""

    layers: list[Tensor]  # (T, T) per layer, rows summing to 1
    composed: Tensor  # (T, T): C_{L-1} ··· C_0
    # (T, T): one layer's ‖T_i(x_j)‖ (Kobayashi et al. 2021), where asked
    norms: Tensor | None = None


@dataclass
class Folded:
    """A block's pieces with its post-norm's linear part folded in, so that each term is
    one batched matmul and its diagonal: T_i(x_j) = Σ_h (α_hij / s_i) (γ ⊙ c(f_h(x_j))) +
    δ_ij γ ⊙ c(x_i) / s_i, c centring over the width (LayerNorm's map at row i's scale s_i
    is linear: it goes through the sum term by term). A pre-norm block's: as they are."""

    x: Tensor  # (T, d): the residual's term of each row
    by_key: Tensor  # (Tk, Tq, H)
    f: Tensor  # (Tk, H, d)
    whole: Tensor  # (T, d): ŷ_i, what the terms and the biases sum to


def fold(x: Tensor, by_key: Tensor, f: Tensor, y: Tensor, norm: Any | None = None) -> Folded:
    """x: the layer's input (T, d_model); by_key: its weights as (Tk, Tq, H); f:
    `head_values` as (Tk, H, d_model); y: the block's sum y_i = x_i + its attention's
    output (T, d_model), as the forward pass made it; norm: a post-norm block's LayerNorm
    (None: a pre-norm block, whose whole is y itself). In the dtype of f."""
    if norm is None:
        return Folded(x, by_key, f, y)
    scale = torch.sqrt(y.var(-1, keepdim=True, unbiased=False) + norm.eps)  # (T, 1)
    gain = norm.gamma.detach().to(f.dtype)
    whole = gain * (y - y.mean(-1, keepdim=True)) / scale + norm.beta.detach().to(f.dtype)
    return Folded(
        (x - x.mean(-1, keepdim=True)) * gain / scale,
        by_key / scale[None],  # (each query row's scale)
        (f - f.mean(-1, keepdim=True)) * gain,
        whole,
    )


def folded_terms(block: Folded, rows: slice, keys: int) -> Tensor:
    """The terms T_i(x_j), key-major (K, R, d_model), of the query rows `rows` and the
    first `keys` keys (a causal block's later keys add nothing)."""
    terms = torch.bmm(block.by_key[:keys, rows], block.f[:keys])  # Σ_h α_hij f_h(x_j)
    index = torch.arange(block.x.size(0))[rows]
    terms[index, index - index[0]] += block.x[rows]
    return terms


def block_terms(
    x: Tensor, by_key: Tensor, f: Tensor, y: Tensor, norm: Any | None = None
) -> tuple[Tensor, Tensor]:
    """Every term T_i(x_j) of a block's output, key-major (Tk, Tq, d_model), and the whole
    ŷ_i (Tq, d_model) that they and the biases sum to (see `fold`)."""
    block = fold(x, by_key, f, y, norm)
    return folded_terms(block, slice(None), x.size(0)), block.whole


def layer_contributions(
    x: Tensor,
    y: Tensor,
    weights: Tensor,
    v: Tensor,
    wo: Tensor,
    norm: Any | None = None,
    dtype: torch.dtype = torch.float32,
    with_norms: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """One layer's C (T, T) in float64, and with `with_norms` its terms' L2 norms (T, T):
    Kobayashi et al. 2021's norms of attention, residual and (post-norm) layer norm
    together, ‖T_i(x_j)‖ (summed in float64). Its terms are made in `dtype` a few query
    rows at a time. x: its input (T, d_model); y: x plus its
    attention's output (the output projection's bias in), as the forward pass made it;
    weights (H, T, T); v: the value vectors (H_kv, T, d_head), bias in; wo: the output
    projection (d_model, H·d_head) as `nn.Linear` stores it; norm: see `fold`.
    Where every later key's weight is 0 (a causal block), a block of rows stops at its
    last."""
    length = x.size(0)
    causal = bool(weights.triu(1).eq(0).all())
    x, y, weights = x.to(dtype), y.to(dtype), weights.to(dtype)
    by_key = weights.permute(2, 1, 0).contiguous()  # (Tk, Tq, H)
    f = head_values(v.to(dtype), wo.to(dtype), weights.size(0))
    f = f.transpose(0, 1).contiguous()  # (Tk, H, d)
    out = torch.zeros(length, length, dtype=torch.float64)
    norms = torch.zeros(length, length, dtype=torch.float64) if with_norms else None
    block = fold(x, by_key, f, y, norm)
    size = block.whole.abs()
    step = max(1, ROW_BLOCK // max(1, length * x.size(1)))
    for start in range(0, length, step):
        rows = slice(start, min(length, start + step))
        keys = rows.stop if causal else length
        terms, whole = folded_terms(block, rows, keys), block.whole[rows]
        if norms is not None:
            norms[rows, :keys] = torch.linalg.vector_norm(terms, dim=-1, dtype=torch.float64).t()
        # ‖ŷ‖₁ − ‖ŷ − T‖₁ summed as Σ_d (|ŷ_d| − |ŷ_d − T_d|): each summand is at most
        # |T_d|, so the float32 sum keeps a small contribution's digits (two sums of the
        # size of ‖ŷ‖₁, subtracted, would not)
        apart = terms.sub_(whole).abs_()
        made = torch.sub(size[rows], apart, out=apart).sum(-1)  # (K, R)
        out[rows, :keys] = made.t().clamp_min(0)
    if causal:  # (a later key's term is zero: exactly no contribution, whatever the rounding)
        out = out.tril()
    return out / out.sum(-1, keepdim=True).clamp_min(1e-300), norms


def alti_refusal(model: ServedModel, spec: AttentionSpec) -> str | None:
    """Why `alti` cannot read a stack; None where it can (its `attention_blocks`)."""
    found = model.attention_blocks(spec)
    return found if isinstance(found, str) else None


def alti(
    model: ServedModel,
    inputs: tuple[Tensor, ...],
    spec: AttentionSpec,
    norms_of: int | None = None,
    read_in: Mapping[str, Any] | None = None,
) -> Alti:
    """ALTI of one self-attention stack on one input (its first row), from one forward pass
    (with the model's keyword arguments `read_in`): each layer's input by a forward
    pre-hook and what its attention adds by a forward hook, its weights and values
    captured, its output projection and (post-norm) layer norm from the model; with
    `norms_of`, that layer's terms' norms too."""
    found = model.attention_blocks(spec)
    if isinstance(found, str):
        raise ValueError(found)
    layers, attention, post_norms = found.layers, found.attention, found.post_norms
    inputs_seen: list[Tensor] = []
    added: list[Tensor] = []  # each attention's output: what its block adds to x
    names = [spec.hook(i, p) for i in range(spec.layers) for p in ("hook_weights", "hook_v")]
    with Recorder() as rec, torch.no_grad():
        for i, layer in enumerate(layers):
            rec.pre(layer, lambda x: inputs_seen.append(x[0].detach()))
            rec.post(attention[i], lambda out: added.append(out[0].detach()))
        _, capture = model.run_with_capture(*inputs, names_filter=names, **(read_in or {}))
    if len(inputs_seen) != len(layers) or len(added) != len(layers):
        raise ValueError("its layers were not each called once in the pass")
    per_layer, norms = [], None
    for i in range(len(layers)):
        x = inputs_seen[i]
        made, these = layer_contributions(
            x,
            x + added[i],
            capture[spec.hook(i, "hook_weights")][0],
            capture[spec.hook(i, "hook_v")][0],
            output_projection(model, spec, i),
            post_norms[i],
            with_norms=i == norms_of,
        )
        per_layer.append(made)
        norms = these if these is not None else norms
    composed = per_layer[0]
    for layer_c in per_layer[1:]:
        composed = layer_c @ composed
    return Alti(per_layer, composed, norms)
