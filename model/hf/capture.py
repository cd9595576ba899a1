"""A capturing attention function in transformers' attention interface, and the hook points
it fires: a transformers model loaded with `attn_implementation="attnviz"` computes each
attention call here, as its eager attention does (q·kᵀ·scaling, the soft-capping, position
bias and sinks it is passed, the mask it is given and the top-k keys of a sparse attention's
`indices`, softmax in float32), with every
intermediate passing one of our hook points, named as model/'s are
(`decoder.3.self_attn.hook_weights`).

Which hook points a call fires is decided per forward call (a context variable, as
model/hooks.py's captures): the k-th call of an attention type within one forward pass is
its layer k, so a layer shared by every depth (ALBERT) is still one layer per call.
Outside a call of our wrapper the function computes without hooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..hooks import HookPoint

ATTENTION = "attnviz"  # the name it is registered under (`attn_implementation=`)
# keyword arguments the capture reads (softcap, position_bias, s_aux, sinks, indices) or
# that change nothing eager attention computes (varlen and cache bookkeeping); another
# tensor passed in is something of the model's own the capture would not reproduce: its
# trace refuses it
EXTRAS = {"softcap", "position_bias", "s_aux", "sinks"}  # besides the scaling, on the scores
READ = EXTRAS | {"indices"}
BOOKKEEPING = {"sliding_window", "is_causal", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k",
               "max_length_q", "max_length_k", "output_attentions", "cache_position",
               "position_embeddings", "deterministic"}  # fmt: skip
POINTS = ("hook_q", "hook_k", "hook_v", "hook_scores", "hook_mask", "hook_weights",
          "hook_context")  # fmt: skip


class AttentionPoints(nn.Module):
    """The hook points of one attention call, with model/'s names and shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_q = HookPoint()  # (B, H, Tq, d_head), as the model passed it (after RoPE)
        self.hook_k = HookPoint()  # (B, H_kv, Tk, d_head), cached keys included
        self.hook_v = HookPoint()  # (B, H_kv, Tk, d_head)
        self.hook_scores = HookPoint()  # (B, H, Tq, Tk), scaled (and capped, biased), unmasked
        self.hook_mask = HookPoint()  # (B, 1, Tq, Tk) bool, True = may attend
        self.hook_weights = HookPoint()  # (B, H, Tq, Tk), after softmax
        self.hook_context = HookPoint()  # (B, H, Tq, d_head), weights @ v per head


@dataclass
class Traced:
    """One attention call seen while tracing a model: its module and its shapes."""

    module: nn.Module
    query_heads: int
    kv_heads: int
    head_dim: int
    query_length: int
    key_length: int
    scaling: float | None = None  # as the module passed it (None: 1/sqrt(d_head))
    extras: bool = False  # soft-capping, a position bias or sinks besides the scaling
    unknown: tuple[str, ...] = ()  # tensors passed that the capture does not read
    sees_later: bool = False  # a query may attend to a key after its own position


@dataclass
class Call:
    """The forward call in progress: which hook points each attention call fires
    (`points[type][layer]`, `kinds[id(module)]`), or, while tracing, what it saw."""

    kinds: dict[int, str]
    points: dict[str, list[AttentionPoints]]
    counters: dict[str, int] = field(default_factory=dict)
    trace: list[Traced] | None = None
    # the mask each layer is given, read once a forward pass (every full-attention layer
    # gets the same tensor): (the tensor, its key length) -> what `read_mask` makes of it
    masks: dict[tuple[int, int], tuple] = field(default_factory=dict)

    def points_for(
        self, module: nn.Module, query: Tensor, key: Tensor, scaling=None, kwargs=None,
        mask: Tensor | None = None,
    ) -> AttentionPoints | None:  # fmt: skip
        if self.trace is not None:
            kwargs = kwargs or {}
            q_heads, kv_heads = query.shape[1], key.shape[1]
            extras = any(kwargs.get(k) is not None for k in EXTRAS)
            unknown = tuple(sorted(k for k, v in kwargs.items() if isinstance(v, Tensor)
                                   and k not in READ | BOOKKEEPING))  # fmt: skip
            self.trace.append(
                Traced(module, q_heads, kv_heads, query.shape[-1], query.shape[-2],
                       key.shape[-2], scaling, extras, unknown, sees_later(query, key, mask))
            )  # fmt: skip
            return None
        kind = self.kinds.get(id(module))
        if kind is None:
            return None
        layer = self.counters.get(kind, 0)
        self.counters[kind] = layer + 1
        layers = self.points[kind]
        return layers[layer] if layer < len(layers) else None


_CALL: ContextVar[Call | None] = ContextVar("attnviz_hf_call", default=None)


@contextmanager
def calling(call: Call) -> Iterator[Call]:
    """Within this block, attention calls fire `call`'s hook points (or trace into it)."""
    token = _CALL.set(call)
    try:
        yield call
    finally:
        _CALL.reset(token)


def _identity(x: Tensor) -> Tensor:
    return x


def _shared(x: Tensor, groups: int) -> Tensor:
    """Key/value heads (B, H_kv, T, d) as one per query head (B, H, T, d) (`repeat_kv`)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def sees_later(query: Tensor, key: Tensor, mask: Tensor | None) -> bool:
    """Whether a query of a self-attention call (its keys its own tokens and those
    before: the last query is the last key) may attend to a key after its own position,
    as eager attention applies `mask` (none: every key)."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    if q_len < 2 or q_len > k_len:
        return False
    if mask is None:
        return True
    if mask.device.type == "meta":
        return False
    allowed = read_mask(mask[:, :, -q_len:, :k_len])[0]
    later = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    return bool((allowed & later.to(allowed.device)).any())


def read_mask(mask: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(where a query may attend (bool), the mask to add as eager attention adds it or
    None, a bias it carries besides what it hides or None) of the mask a layer is given:
    boolean, or additive (0 where allowed, the dtype's minimum where not)."""
    if mask.dtype == torch.bool:
        return mask, None, None
    allowed = mask > torch.finfo(mask.dtype).min / 2
    bias = mask.masked_fill(~allowed, 0.0)
    if bool(bias.any()):
        return allowed, None, bias
    return allowed, mask, None


def capturing_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[Tensor, Tensor]:
    """What transformers' `eager_attention_forward` computes, through our hook points:
    returns (output (B, Tq, H, d_head), weights (B, H, Tq, Tk))."""
    call = _CALL.get()
    points = (
        call.points_for(module, query, key, scaling, kwargs, attention_mask)
        if call is not None
        else None
    )
    hook = (lambda name: getattr(points, name)) if points is not None else lambda _: _identity
    query, key, value = hook("hook_q")(query), hook("hook_k")(key), hook("hook_v")(value)
    groups = query.shape[1] // key.shape[1]
    keys, values = _shared(key, groups), _shared(value, groups)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
    softcap = kwargs.get("softcap")
    if softcap:  # Gemma 2's soft-capping of the logits
        scores = torch.tanh(scores / softcap) * softcap
    position_bias = kwargs.get("position_bias")
    if position_bias is not None:  # T5's relative position bias
        scores = scores + position_bias
    batch, _, q_len, k_len = scores.shape
    if attention_mask is None:
        allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool, device=scores.device)
        additive = bias = None
    else:
        slot = (id(attention_mask), k_len)
        read = call.masks.get(slot) if call is not None else None
        if read is None or read[0] is not attention_mask:
            read = (attention_mask, *read_mask(attention_mask[:, :, :, :k_len]))
            if call is not None:
                call.masks[slot] = read
        _, allowed, additive, bias = read
        if bias is not None:  # a bias the mask carries besides what it hides (ALiBi)
            scores = scores + bias
    indices = kwargs.get("indices")
    if indices is not None:  # DeepSeek's sparse attention: each query's top-k keys only,
        # which the model hides by its mask where it runs eager attention
        chosen = torch.zeros(batch, q_len, k_len, dtype=torch.bool, device=scores.device)
        chosen = chosen.scatter(-1, indices.long(), True).unsqueeze(1)
        allowed, additive = allowed & chosen, None
    scores = hook("hook_scores")(scores)
    # (B, 1, Tq, Tk); a mask per head (Doge's) keeps its heads
    given = allowed.expand(batch, allowed.shape[1], q_len, k_len)
    allowed = hook("hook_mask")(given)
    if allowed is given and additive is not None:
        logits = scores + additive  # what eager attention does (3x faster than a fill)
    else:
        logits = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    column = None  # a sink: one more logit per row that takes weight from all keys
    if kwargs.get("s_aux") is not None:  # gpt-oss: learned, one per head
        column = kwargs["s_aux"].reshape(1, -1, 1, 1).expand(batch, -1, q_len, 1)
    elif kwargs.get("sinks") is not None:  # Inkling 2: made from each token, (B, H, Tq, 1)
        column = kwargs["sinks"].expand(batch, logits.shape[1], q_len, 1)
    if column is not None:
        combined = torch.cat([logits, column.to(logits.dtype)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        weights = torch.softmax(combined, dim=-1, dtype=torch.float32)[..., :-1]
    else:
        weights = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights = hook("hook_weights")(weights.to(query.dtype))
    if dropout and module.training:
        weights = nn.functional.dropout(weights, p=dropout, training=True)
    context = hook("hook_context")(torch.matmul(weights, values))
    return context.transpose(1, 2).contiguous(), weights


def register() -> None:
    """Register the capturing attention (and eager attention's 4-D masks for it) in
    transformers' interfaces; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION, capturing_attention)
    AttentionMaskInterface.register(ATTENTION, eager_mask)
