"""A decoder's residual stream read layer by layer: the logit lens and the direct logit
attribution of each head.

The residual stream of a pre-norm decoder is a sum: what the embeddings put in, plus what
each layer's attention and feed-forward blocks add. `read_stream` reads those terms from
one forward pass, by forward hooks where the model's `residual_layout` says (our model
code's modules by name, model/declared.py; transformers' as its probe found them,
model/hf/stream.py), and checks that they add up.

- The logit lens (nostalgebraist 2020): the residual before each layer, and after the
  last, read through the final norm and the unembedding as if the model ended there. The
  last row is the model's own logits.
- Direct logit attribution (as TransformerLens's `stack_head_results` and
  `apply_ln_to_stack`): with the final norm's scale at the position held at what the
  model computed (the norm is then linear: c ↦ g ⊙ centre(c) / s, plus its bias), every
  term of the stream is projected on W_U[a] − W_U[b]. A head's term is its output at the
  position, Σ_j α_hij f_h(x_j) (model/methods/value_norms.py's f_h). The terms (embeddings, every
  head, every attention's output bias, every feed-forward block, and the norm's and the
  unembedding's biases) sum to logit[a] − logit[b].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from ..attention_types import AttentionSpec
from ..hooks import Capture, Recorder
from ..placement import device_of, relative_tolerance
from ..served import FinalNorm, ServedModel
from .value_norms import output_projection

# how far the stream's terms may be from what the next layer reads, relative to its size
# (float32 sums in another order; in bfloat16 or float16, a few units of its rounding:
# placement.relative_tolerance)


@dataclass
class Stream:
    """One pass's residual stream (first row, float64): what each layer reads, what its
    attention and feed-forward blocks add, the final norm's input and the model's logits."""

    pre: list[Tensor]  # (T, d) per layer; pre[0]: the embeddings (positions added in)
    attention: list[Tensor]  # (T, d) the attention block's output (its projection's bias in)
    feed_forward: list[Tensor]  # (T, d)
    final: Tensor  # (T, d) after the last layer: what the final norm reads
    logits: Tensor  # (T, V) the model's own
    norm: FinalNorm
    unembed: nn.Linear
    parallel: bool = False  # (see Layout)


def stream_refusal(model: ServedModel) -> str | None:
    """Why `read_stream` cannot read a model's residual stream; None where it can."""
    found = model.residual_layout
    return found if isinstance(found, str) else None


def read_stream(model: ServedModel, inputs: tuple[Tensor, ...]) -> Stream:
    """The residual stream of one forward pass (its `residual_layout` says where); a
    ValueError where the model has none, or where the terms do not add up to what each
    layer reads."""
    layout = model.residual_layout
    if isinstance(layout, str):
        raise ValueError(layout)
    seen: dict[str, list[Tensor]] = {"pre": [], "attention": [], "feed_forward": [], "final": []}

    on = device_of(layout.unembed)  # (a model spread over GPUs: its last one's, where
    # the final norm and the unembedding are; each layer's part is brought there)

    def keep(key: str):
        return lambda x: seen[key].append(x[0].detach().double().to(on))

    with Recorder() as rec, torch.no_grad():
        rec.pre(layout.final_norm, keep("final"))
        for i, layer in enumerate(layout.layers):
            rec.pre(layer, keep("pre"))
            rec.post(layout.attention[i], keep("attention"))
            rec.post(layout.feed_forward[i], keep("feed_forward"))
        logits = model(*inputs)
    if [len(seen[k]) for k in ("pre", "attention", "feed_forward")] != [len(layout.layers)] * 3:
        raise ValueError("its layers were not each called once in the pass")
    made_on = seen["final"][0].device  # (the model's; its logits come back on the CPU)
    stream = Stream(seen["pre"], seen["attention"], seen["feed_forward"], seen["final"][0],
                    logits[0].detach().double().to(made_on), layout.norm, layout.unembed,
                    layout.parallel)  # fmt: skip
    tolerance = relative_tolerance(logits.dtype)
    made = stream.logits[-1:]  # (the last position: the final norm and unembedding again)
    again = layout.norm(stream.final[-1:]) @ layout.unembed.weight.detach().double().t()
    if layout.unembed.bias is not None:
        again = again + layout.unembed.bias.detach().double()
    if (again - made).abs().max() > tolerance * made.abs().max().clamp_min(1):
        raise ValueError("its final norm and unembedding do not give its logits on this input")
    after = [*stream.pre[1:], stream.final]
    for i, (read, next_read) in enumerate(zip(stream.pre, after, strict=True)):
        made = read + stream.attention[i] + stream.feed_forward[i]
        if (made - next_read).abs().max() > tolerance * next_read.abs().max():
            raise ValueError(
                f"layer {i}'s attention and feed-forward outputs do not add up to what the "
                "next layer reads: its residual stream is no sum of its blocks"
            )
    return stream


def lens_logits(stream: Stream, layer: int, rows: slice = slice(None)) -> Tensor:
    """The logit lens after `layer` layers (0: the embeddings alone; the number of layers:
    the model's own logits) at the positions `rows`: (R, V), the residual through the final
    norm (in float64) and the unembedding (in the model's dtype: a float64 copy of a large
    vocabulary's matrix per depth would cost more than the rest)."""
    if layer == len(stream.pre):  # after the last layer: the model's own logits
        return stream.logits[rows].to(stream.unembed.weight.dtype)
    resid = stream.pre[layer][rows]
    unembed = stream.unembed
    weight = unembed.weight.detach()
    logits = stream.norm(resid).to(weight.dtype) @ weight.t()
    if unembed.bias is not None:
        logits = logits + unembed.bias.detach()
    return logits


@dataclass
class Attribution:
    """Direct logit attribution at one position on logit[a] − logit[b]."""

    a: int
    b: int
    logit_diff: float  # the model's own
    embeddings: float
    heads: list[list[float]]  # [layer][head]
    attention_bias: list[float]  # per layer (0 where the projection has no bias)
    feed_forward: list[float]
    biases: float  # the final norm's bias and the unembedding's, on the direction

    @property
    def total(self) -> float:
        return (
            self.embeddings
            + sum(map(sum, self.heads))
            + sum(self.attention_bias)
            + sum(self.feed_forward)
            + self.biases
        )


def head_outputs(
    model: ServedModel, capture: Capture, spec: AttentionSpec, layer: int, position: int
) -> Tensor:
    """Each head's output at a query position (H, d_model), float64: Σ_j α_hij v_j^h W_O^h,
    the weights and value vectors from the capture, W_O from the model."""
    weights = capture[spec.hook(layer, "hook_weights")][0][:, position].double()  # (H, Tk)
    v = capture[spec.hook(layer, "hook_v")][0].double()  # (H_kv, Tk, d)
    heads, d = weights.size(0), v.size(-1)
    v = v.repeat_interleave(heads // v.size(0), dim=0)
    wo = output_projection(model, spec, layer).double()  # (d_model, H * d)
    per_head = wo.view(wo.size(0), heads, d).permute(1, 2, 0)  # (H, d, d_model)
    return torch.einsum("hj,hjd,hde->he", weights, v, per_head)


def attribute(
    model: ServedModel,
    stream: Stream,
    capture: Capture,
    spec: AttentionSpec,
    position: int,
    a: int,
    b: int,
) -> Attribution:
    """Every term of the stream at `position` on W_U[a] − W_U[b], through the final norm
    with the position's scale held (TransformerLens's `apply_ln_to_stack`)."""
    norm = stream.norm
    scale = norm.scale(stream.final[position])
    weight = stream.unembed.weight.detach().double()
    direction = weight[a] - weight[b]  # (d,)

    def on(c: Tensor) -> Tensor:
        return norm.linear(c, scale) @ direction

    heads, attention_bias = [], []
    for layer in range(len(stream.pre)):
        per_head = on(head_outputs(model, capture, spec, layer, position))
        heads.append([float(v) for v in per_head])
        projection = model.projection_module(spec.type, layer)
        own = cast(Tensor | None, projection.bias) if projection is not None else None
        attention_bias.append(float(on(own.detach().double())) if own is not None else 0.0)
    biases = float(norm.bias @ direction) if norm.bias is not None else 0.0
    if stream.unembed.bias is not None:
        own = stream.unembed.bias.detach()
        biases += float(own[a] - own[b])
    logits = stream.logits[position]
    return Attribution(
        a=a,
        b=b,
        logit_diff=float(logits[a] - logits[b]),
        embeddings=float(on(stream.pre[0][position])),
        heads=heads,
        attention_bias=attention_bias,
        feed_forward=[float(on(f[position])) for f in stream.feed_forward],
        biases=biases,
    )
