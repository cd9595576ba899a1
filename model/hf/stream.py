"""Where a transformers decoder's residual stream is read (model/methods/lens.py's `Layout`), found
by one probe pass rather than by each architecture's names: its layers are the ModuleList
that holds its attention modules; what a layer's attention adds is its output projection's
output (as the trace found the projection); its feed-forward block is the child of the
layer whose output is what remains of the layer's output; its final norm is the module
whose output the unembedding reads. Each is checked on the probe: a layer whose output is
not its input plus those two (a norm after the attention or the feed-forward, as Gemma's),
a hybrid's layers without attention, a final norm that is not a LayerNorm or an RMSNorm
read from its weights, or logits changed after the unembedding (soft-capped) are refused
with the reason."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..hooks import Recorder
from ..placement import relative_tolerance
from ..served import Blocks, FinalNorm, Layout, first
from .calls import probe_token

# relative to the largest value: what the probe's checks allow (1e-4 in float32; in
# bfloat16 or float16 a few units of its rounding), set for the model a probe reads
_CLOSE: ContextVar[float] = ContextVar("attnviz_stream_close", default=1e-4)


def _close(a: Tensor, b: Tensor) -> bool:
    limit = _CLOSE.get() * b.abs().max().clamp_min(1)
    return a.shape == b.shape and bool((a - b).abs().max() <= limit)


@contextmanager
def probing(model: Any) -> Iterator[None]:
    """Within this block, `_close` allows what the model's dtype rounds."""
    token = _CLOSE.set(relative_tolerance(next(model.hf.parameters()).dtype))
    try:
        yield
    finally:
        _CLOSE.reset(token)


def _final_norm(module: nn.Module, x: Tensor, out: Tensor) -> FinalNorm | None:
    """A norm module read from its weights as a `FinalNorm` (LayerNorm or RMSNorm, its
    gain its weight or, as Gemma's, one plus it), checked to give `out` from `x`."""
    weight = getattr(module, "weight", None)
    eps = next((getattr(module, n) for n in ("eps", "variance_epsilon", "epsilon")
                if isinstance(getattr(module, n, None), float)), None)  # fmt: skip
    if not isinstance(weight, Tensor) or eps is None:
        return None
    bias = getattr(module, "bias", None)
    bias = bias.detach().double() if isinstance(bias, Tensor) else None
    for centres in (True, False):
        for gain in (weight.detach().double(), 1 + weight.detach().double()):
            norm = FinalNorm(centres, gain, bias, eps)
            if _close(norm(x.double()), out.double()):
                return norm
    return None


@dataclass
class PostNorm:
    """A post-norm block's LayerNorm, read from its module and checked on the probe: what
    `model.methods.alti.fold` takes (its gamma, beta and eps)."""

    gamma: Tensor
    beta: Tensor
    eps: float


def _holders(model: Any) -> list[str] | str:
    """The names of the layers that hold its attention modules, one each, of one list of
    layers; or why not."""
    hf = model.hf
    names = {id(m): n for n, m in hf.named_modules()}
    holders = []
    for call in model.traced:
        parts = names.get(id(call.module), "").split(".")
        holder = next((".".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)
                       if isinstance(hf.get_submodule(".".join(parts[: k - 1]) or ""),
                                     nn.ModuleList)), None)  # fmt: skip
        holders.append(holder)
    named = [h for h in holders if h is not None]
    if len(named) != len(holders) or len(set(named)) != len(holders):
        return "its attention modules are not one a layer of one list of layers"
    return named


def encoder_blocks(model: Any) -> Blocks | str:
    with probing(model):
        return _encoder_blocks(model)


def _encoder_blocks(model: Any) -> Blocks | str:
    """A transformers encoder's self-attention blocks as ALTI reads them (model/methods/alti.py):
    each layer, its output projection, and its post-norm: the LayerNorm whose input is the
    layer's input plus the projection's output (BERT's), or None for a pre-norm block,
    whose layer's output is that sum plus one child's output (ModernBERT's). Found by a
    probe pass, each checked there; or why not."""
    if model.architecture != "encoder-only":
        return "this is no encoder-only model"
    spec = next(s for s in model.specs if s.type == "encoder.self")
    named = _holders(model)
    if isinstance(named, str):
        return named
    layers = [model.hf.get_submodule(h) for h in named]
    maybe = [model.projection_module(spec.type, i) for i in range(spec.layers)]
    projections = [p for p in maybe if p is not None]
    if len(projections) != len(maybe):
        return "its attention's output is changed (gated or normalized) before its projection"
    seen: dict[Any, Any] = {}
    leaves: dict[int, list] = {}
    children: dict[int, list] = {}
    last = probe_token(model.hf)
    ids = torch.tensor([[last, last - 1, last - 2, last - 3]])
    with Recorder() as rec, torch.no_grad():
        for i, layer in enumerate(layers):
            rec.pre(layer, lambda x, i=i: seen.__setitem__(("in", i), x))
            rec.post(layer, lambda out, i=i: seen.__setitem__(("out", i), out))
            rec.post(projections[i], lambda out, i=i: seen.__setitem__(("attn", i), out))
            for module in layer.modules():
                if not list(module.children()):
                    rec.call(module, lambda m, a, o, i=i: leaves.setdefault(i, []).append(
                        (m, a[0] if a else None, first(o))
                    ))  # fmt: skip
            for child in layer.children():
                rec.call(child, lambda m, a, o, i=i: children.setdefault(i, []).append(first(o)))
        model(ids)
    norms: list[PostNorm | None] = []
    for i in range(len(layers)):
        x, added, out = seen[("in", i)], seen[("attn", i)], seen[("out", i)]
        if x.shape != added.shape or x.shape != out.shape:
            return f"its layer {i}'s attention block changes the width (a bottleneck)"
        summed = x + added
        post = next(((m, given, o) for m, given, o in leaves.get(i, [])
                     if isinstance(given, Tensor) and isinstance(o, Tensor)
                     and _close(given, summed)), None)  # fmt: skip
        calls = leaves.get(i, [])
        normed = post is not None and isinstance(calls[-1][2], Tensor) and _close(calls[-1][2], out)
        if normed and post is not None:  # post-norm: a norm reads the sum, a norm ends it
            norm = _final_norm(*post)
            if norm is None or not norm.centres or norm.bias is None:
                return f"its layer {i}'s norm after attention is no LayerNorm"
            norms.append(PostNorm(norm.gain.float(), norm.bias.float(), norm.eps))
        elif any(isinstance(c, Tensor) and _close(c, out - summed) for c in children.get(i, [])):
            norms.append(None)  # pre-norm: the sum is the residual, a block adds to it
        else:
            return (
                f"its layer {i} is neither post-norm (a LayerNorm reading its input plus its "
                "attention's output) nor pre-norm (its output that sum plus its feed-forward "
                "block's): ALTI does not read its blocks"
            )
    return Blocks(layers, projections, norms)  # type: ignore[arg-type]


def residual_layout(model: Any) -> Layout | str:
    with probing(model):
        return _residual_layout(model)


def _residual_layout(model: Any) -> Layout | str:
    """model: an `HFTransformer` (its `hf`, `specs`, architecture); the layout or why not."""
    if model.architecture != "decoder-only":
        return "the logit lens reads a decoder-only model's residual stream; this is not one"
    hf = model.hf
    spec = next(s for s in model.specs if s.type == "decoder.self")
    named = _holders(model)
    if isinstance(named, str):
        return named
    layers = [hf.get_submodule(h) for h in named]
    container = hf.get_submodule(named[0].rsplit(".", 1)[0])
    if len(container) != spec.layers:
        return (
            f"only {spec.layers} of its {len(container)} layers attend (a hybrid): its "
            "residual stream is not read layer by layer here"
        )
    maybe = [model.projection_module(spec.type, i) for i in range(spec.layers)]
    projections = [p for p in maybe if p is not None]
    if len(projections) != len(maybe):
        return "its attention's output is changed (gated or normalized) before its projection"
    unembed = hf.get_output_embeddings()
    if not isinstance(unembed, nn.Linear):
        return "its unembedding is no linear layer"
    seen: dict[Any, Any] = {}
    last = probe_token(hf)
    ids = torch.tensor([[last, last - 1, last - 2, last - 3]], device=unembed.weight.device)
    outside = {id(m) for layer in layers for m in layer.modules()}
    finals: list = []
    with Recorder() as rec, torch.no_grad():
        rec.pre(unembed, lambda x: seen.__setitem__("h", x))
        for i, layer in enumerate(layers):
            rec.pre(layer, lambda x, i=i: seen.__setitem__(("in", i), x))
            rec.post(layer, lambda out, i=i: seen.__setitem__(("out", i), out))
            rec.post(projections[i], lambda out, i=i: seen.__setitem__(("attn", i), out))
            for child in layer.children():
                rec.call(child, lambda m, a, o, i=i: seen.setdefault(("child", i), []).append(
                    (m, first(o), a[0] if a else None)
                ))  # fmt: skip
        for module in hf.modules():
            if id(module) not in outside and not list(module.children()):
                rec.call(module, lambda m, a, o: finals.append((m, a[0] if a else None, o)))
        logits = model(ids)
    feed_forward: list[tuple[nn.Module, Any]] = []
    for i in range(len(layers)):
        remainder = seen[("out", i)] - seen[("in", i)] - seen[("attn", i)]
        called = [m for m, _, _ in seen.get(("child", i), [])]
        # (a module called twice in a layer, as Phi's dropout on both blocks, is neither)
        found = [(m, given) for m, out, given in seen.get(("child", i), [])
                 if called.count(m) == 1 and isinstance(out, Tensor)
                 and _close(out, remainder)]  # fmt: skip
        if not found:
            return (
                f"its layer {i}'s output is not its input plus what its attention and "
                "feed-forward blocks give (a norm after one of them): its residual stream is "
                "no sum of its blocks"
            )
        feed_forward.append(found[-1])
    # a parallel block's feed-forward reads the layer's input, not it plus the attention's
    # output: with every projection's output zeroed, its input does not change
    again: dict[int, Tensor] = {}
    with Recorder() as rec, torch.no_grad():
        for i, (module, _) in enumerate(feed_forward):
            rec.replace(projections[i], torch.zeros_like)
            rec.pre(module, lambda x, i=i: again.setdefault(i, x))
        model(ids)
    parallel = any(
        isinstance(given, Tensor) and i in again and _close(again[i], given)
        for i, (_, given) in enumerate(feed_forward)
    )
    if "h" not in seen:
        return "its unembedding is not called on the final hidden states"
    h = seen["h"]
    norm_module, norm = None, None
    for module, given, out in finals:
        if isinstance(given, Tensor) and isinstance(out, Tensor) and _close(out, h):
            norm = _final_norm(module, given, out)
            if norm is not None and _close(given, seen[("out", len(layers) - 1)]):
                norm_module = module
                break
    if norm_module is None or norm is None:
        return "its final norm is not one the lens reads (a LayerNorm or an RMSNorm)"
    made = norm(seen[("out", len(layers) - 1)].double()) @ unembed.weight.double().t()
    if unembed.bias is not None:
        made = made + unembed.bias.double()
    if not _close(made.float(), logits):
        return "its logits are changed after the unembedding (soft-capped or scaled)"
    blocks = [module for module, _ in feed_forward]
    return Layout(layers, projections, blocks, norm_module, norm, unembed, parallel)  # type: ignore[arg-type]
