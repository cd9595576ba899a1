"""A decoder's residual stream read layer by layer: the logit lens and the direct logit
attribution of each head.

The residual stream of a pre-norm decoder is a sum: what the embeddings put in, plus what
each layer's attention and feed-forward blocks add. `read_stream` reads those terms from
one forward pass (forward hooks on our model code's modules) and checks that they add up.

- The logit lens (nostalgebraist 2020): the residual before each layer, and after the
  last, read through the final norm and the unembedding as if the model ended there. The
  last row is the model's own logits.
- Direct logit attribution (as TransformerLens's `stack_head_results` and
  `apply_ln_to_stack`): with the final norm's scale at the position held at what the
  model computed (the norm is then linear: c ↦ g ⊙ centre(c) / s, plus its bias), every
  term of the stream is projected on W_U[a] − W_U[b]. A head's term is its output at the
  position, Σ_j α_hij f_h(x_j) (model/value_norms.py's f_h). The terms (embeddings, every
  head, every attention's output bias, every feed-forward block, and the norm's and the
  unembedding's biases) sum to logit[a] − logit[b].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .hooks import Capture
from .runner import AttentionSpec
from .value_norms import output_projection, projection_module

# how far the stream's terms may be from what the next layer reads, relative to its size
# (float32 sums in another order)
TOLERANCE = 1e-4


@dataclass
class Stream:
    """One pass's residual stream (first row, float64): what each layer reads, what its
    attention and feed-forward blocks add, the final norm's input and the model's logits."""

    pre: list[Tensor]  # (T, d) per layer; pre[0]: the embeddings (positions added in)
    attention: list[Tensor]  # (T, d) the attention block's output (its projection's bias in)
    feed_forward: list[Tensor]  # (T, d)
    final: Tensor  # (T, d) after the last layer: what the final norm reads
    logits: Tensor  # (T, V) the model's own
    norm: Any  # the final norm (model/layers.py's LayerNorm or RMSNorm)
    unembed: nn.Linear


def stream_refusal(model: nn.Module) -> str | None:
    """Why `read_stream` cannot read a model's residual stream; None where it can."""
    decoder: Any = getattr(model, "decoder", None)
    if decoder is None or not hasattr(decoder, "layers") or hasattr(model, "encoder"):
        return (
            "the logit lens and direct logit attribution read the residual stream of a "
            "decoder-only model on our model code; this model is not one"
        )
    if decoder.final_norm is None or not all(layer.pre_norm for layer in decoder.layers()):
        return (
            "its layers normalize after adding to the residual stream (post-norm): the "
            "stream is no sum of what each block adds"
        )
    return None


def read_stream(model: nn.Module, inputs: tuple[Tensor, ...]) -> Stream:
    """The residual stream of a decoder-only model on our model code (pre-norm layers, a
    final norm, a linear unembedding); a ValueError where the model is not one, or where
    the terms do not add up to what each layer reads."""
    refusal = stream_refusal(model)
    if refusal is not None:
        raise ValueError(refusal)
    decoder: Any = model.decoder
    layers = decoder.layers()
    seen: dict[str, list[Tensor]] = {"pre": [], "attention": [], "feed_forward": []}
    final: list[Tensor] = []

    def keep(key: str):
        return lambda module, args, out: seen[key].append(out[0].detach().double())

    hooks = [decoder.final_norm.register_forward_pre_hook(
        lambda module, args: final.append(args[0][0].detach().double())
    )]  # fmt: skip
    for layer in layers:
        hooks.append(layer.register_forward_pre_hook(
            lambda module, args: seen["pre"].append(args[0][0].detach().double())
        ))  # fmt: skip
        hooks.append(layer.self_attn.register_forward_hook(keep("attention")))
        hooks.append(layer.feed_forward.register_forward_hook(keep("feed_forward")))
    try:
        with torch.no_grad():
            logits = model(*inputs)
    finally:
        for hook in hooks:
            hook.remove()
    unembed: Any = model.output
    stream = Stream(seen["pre"], seen["attention"], seen["feed_forward"], final[0],
                    logits[0].detach().double(), decoder.final_norm, unembed)  # fmt: skip
    after = [*stream.pre[1:], stream.final]
    for i, (read, next_read) in enumerate(zip(stream.pre, after, strict=True)):
        made = read + stream.attention[i] + stream.feed_forward[i]
        if (made - next_read).abs().max() > TOLERANCE * next_read.abs().max():
            raise ValueError(
                f"layer {i}'s attention and feed-forward outputs do not add up to what the "
                "next layer reads: its residual stream is no sum of its blocks"
            )
    return stream


def _scale(norm: Any, x: Tensor) -> tuple[Tensor, bool]:
    """The final norm's scale per position (T, 1) at its input x (T, d), and whether it
    centres (LayerNorm) or not (RMSNorm)."""
    centres = hasattr(norm, "beta")
    if centres:
        variance = x.var(-1, keepdim=True, unbiased=False)
    else:
        variance = x.pow(2).mean(-1, keepdim=True)
    return torch.sqrt(variance + norm.eps), centres


def _gain_bias(norm: Any) -> tuple[Tensor, Tensor | None]:
    gain = norm.gamma if hasattr(norm, "gamma") else norm.weight
    bias = getattr(norm, "beta", None)
    return gain.detach().double(), bias.detach().double() if bias is not None else None


def normed(norm: nn.Module, x: Tensor) -> Tensor:
    """The final norm applied to residuals x (..., d) as the model applies it, in float64."""
    scale, centres = _scale(norm, x)
    gain, bias = _gain_bias(norm)
    y = (x - x.mean(-1, keepdim=True) if centres else x) / scale * gain
    return y + bias if bias is not None else y


def lens_logits(stream: Stream, layer: int) -> Tensor:
    """The logit lens after `layer` layers (0: the embeddings alone; the number of layers:
    the model's own logits): (T, V), the residual through the final norm (in float64) and
    the unembedding (in the model's dtype: a float64 copy of a large vocabulary's matrix
    per depth would cost more than the rest)."""
    if layer == len(stream.pre):  # after the last layer: the model's own logits
        return stream.logits.to(stream.unembed.weight.dtype)
    resid = stream.pre[layer]
    unembed = stream.unembed
    weight = unembed.weight.detach()
    logits = normed(stream.norm, resid).to(weight.dtype) @ weight.t()
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
    model: nn.Module, capture: Capture, spec: AttentionSpec, layer: int, position: int
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
    model: nn.Module,
    stream: Stream,
    capture: Capture,
    spec: AttentionSpec,
    position: int,
    a: int,
    b: int,
) -> Attribution:
    """Every term of the stream at `position` on W_U[a] − W_U[b], through the final norm
    with the position's scale held (TransformerLens's `apply_ln_to_stack`)."""
    scale, centres = _scale(stream.norm, stream.final[position])
    gain, bias = _gain_bias(stream.norm)
    weight = stream.unembed.weight.detach().double()
    direction = gain * (weight[a] - weight[b]) / scale  # (d,)

    def on(c: Tensor) -> Tensor:
        return (c - c.mean(-1, keepdim=True) if centres else c) @ direction

    heads, attention_bias = [], []
    for layer in range(len(stream.pre)):
        per_head = on(head_outputs(model, capture, spec, layer, position))
        heads.append([float(v) for v in per_head])
        projection = projection_module(model, spec, layer)
        own = getattr(projection, "bias", None)
        attention_bias.append(float(on(own.detach().double())) if own is not None else 0.0)
    biases = float(bias @ (weight[a] - weight[b])) if bias is not None else 0.0
    if stream.unembed.bias is not None:
        biases += float(stream.unembed.bias[a] - stream.unembed.bias[b])
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
