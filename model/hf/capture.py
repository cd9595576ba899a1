"""A capturing attention function in transformers' attention interface, and the hook points
it fires: a transformers model loaded with `attn_implementation="attnviz"` computes each
attention call here, as its eager attention does (q·kᵀ·scaling, the soft-capping, position
bias and sinks it is passed, the mask it is given and the top-k keys of a sparse attention's
`indices`, softmax in float32 where its eager attention computes it so), with every
intermediate passing one of our hook points, named as model/'s are
(`decoder.3.self_attn.hook_weights`).

Which hook points a call fires is decided per forward call (a context variable, as
model/hooks.py's captures): the k-th call of an attention type within one forward pass is
its layer k, so a layer shared by every depth (ALBERT) is still one layer per call.
Outside a call of our wrapper the function computes without hooks.

Within `attention.fused()` (a long prompt's pass), a call whose scores, mask and weights
nobody records or reads, and that has none of the extras above, runs torch's fused kernel
instead, with transformers' boolean mask (never a float (Tq, Tk) one), and notes the mask
as a `MaskRule` (checked against the mask it was given, cell by cell) or the mask itself,
and its scaling: what a long capture recomputes any window of the weights from.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import is_fused
from ..hooks import HookPoint, wanted
from ..long import DenseMask, Mask, MaskRule

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


class AttentionPoints(nn.Module):
    """The hook points of one attention call, with model/'s names and shapes."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix  # its hook names' prefix (`decoder.3.self_attn`)
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
    # what the call returned (B, Tq, H, d_head), until a projection reads it, and the
    # Linear or Conv1D that reads it unchanged as (B, Tq, H * d_head): its output
    # projection (None where something else comes between: a gate, a norm)
    output: Tensor | None = field(default=None, repr=False)
    projection: nn.Module | None = None


@dataclass
class Call:
    """The forward call in progress: which hook points each attention call fires
    (`points[type][layer]`, `types[id(module)]`), or, while tracing, what it saw."""

    types: dict[int, str]
    points: dict[str, list[AttentionPoints]]
    counters: dict[str, int] = field(default_factory=dict)
    trace: list[Traced] | None = None
    # the mask each layer is given, read once a forward pass (every full-attention layer
    # gets the same tensor): (the tensor, its key length) -> what `read_mask` makes of it
    masks: dict[tuple[int, int], tuple] = field(default_factory=dict)
    # on the fused path: per attention call (its hook prefix), its mask described and the
    # factor its scores are scaled by
    long: dict[str, tuple[Mask, float]] = field(default_factory=dict)
    hidden: list[Tensor] | None = None  # where a list: the base model's output, appended
    _rules: dict[tuple[int, int, int | None], Mask] = field(default_factory=dict)

    def rule(self, allowed: Tensor, mask: Tensor, window: int | None) -> Mask:
        """The first batch item's mask (B, 1, Tq, Tk) bool described, once per mask tensor:
        a `MaskRule` where one gives exactly it (causal, within a window), else itself."""
        slot = (id(mask), allowed.shape[-1], window)
        found = self._rules.get(slot)
        if found is None:
            found = self._rules[slot] = described(allowed[0, 0], window)
        return found

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
        atype = self.types.get(id(module))
        if atype is None:
            return None
        layer = self.counters.get(atype, 0)
        self.counters[atype] = layer + 1
        layers = self.points[atype]
        return layers[layer] if layer < len(layers) else None


_CALL: ContextVar[Call | None] = ContextVar("attnviz_hf_call", default=None)


def current() -> Call | None:
    """The forward call in progress in this context, if any."""
    return _CALL.get()


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


def described(allowed: Tensor, window: int | None) -> Mask:
    """A (Tq, Tk) boolean mask as the `MaskRule` that gives exactly it (none hidden, causal,
    or causal within the `window` newest keys), checked cell by cell; else as itself."""
    q_len, k_len = allowed.shape
    candidates = [MaskRule(q_len, k_len), MaskRule(q_len, k_len, causal=True)]
    if window is not None:
        candidates.append(MaskRule(q_len, k_len, causal=True, window=window))
    for rule in candidates:
        if rule.dense().equal(allowed.cpu()):
            return rule
    return DenseMask(allowed.cpu())


def _fused(
    call: Call, points: AttentionPoints, module: nn.Module, query: Tensor, key: Tensor,
    value: Tensor, attention_mask: Tensor | None, scaling: float, kwargs: dict,
) -> Tensor:  # fmt: skip
    """The context (B, Tq, H, d_head) by torch's fused kernel, its queries, keys and values
    through their hook points, and its mask and scaling noted on `call`."""
    query, key = points.hook_q(query), points.hook_k(key)
    value = points.hook_v(value)
    q_len, k_len = query.shape[-2], key.shape[-2]
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if attention_mask is None:  # every key (as sdpa reads a missing mask)
        allowed = None
        rule: Mask = MaskRule(q_len, k_len)
    else:
        allowed = attention_mask[:, :, :, :k_len]
        if allowed.dtype != torch.bool:
            allowed = read_mask(allowed)[0]
        rule = call.rule(allowed, attention_mask, window if isinstance(window, int) else None)
    call.long[points.prefix] = (rule, scaling)
    groups = query.shape[1] != key.shape[1]
    if (
        isinstance(rule, MaskRule) and rule.window is None and (not rule.causal or q_len == k_len)
    ):  # nothing hidden, or plainly causal: no mask tensor read at all
        context = F.scaled_dot_product_attention(
            query, key, value, is_causal=rule.causal, scale=scaling, enable_gqa=groups
        )
    else:
        assert allowed is not None
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=allowed, scale=scaling, enable_gqa=groups
        )
        if not bool(allowed.any(-1).all()):  # a row with no key: a zero context
            context = context.nan_to_num_(0.0)
    context = points.hook_context(context)
    return context.transpose(1, 2).contiguous()


def fusable(points: AttentionPoints, module: nn.Module, mask: Tensor | None, kwargs) -> bool:
    """Whether a call may run the fused kernel: within `fused()`, nobody recording or
    reading its scores, mask or weights, none of the extras eager attention adds, and its
    mask boolean or one that only hides."""
    if not is_fused() or module.training or any(kwargs.get(k) is not None for k in READ):
        return False
    if any(wanted(p) for p in (points.hook_scores, points.hook_mask, points.hook_weights)):
        return False
    return mask is None or mask.dtype == torch.bool or read_mask(mask)[2] is None


def capturing_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[Tensor, Tensor | None]:
    """What transformers' `eager_attention_forward` computes, through our hook points:
    returns (output (B, Tq, H, d_head), weights (B, H, Tq, Tk); None on the fused path)."""
    call = _CALL.get()
    points = (
        call.points_for(module, query, key, scaling, kwargs, attention_mask)
        if call is not None
        else None
    )
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if call is not None and points is not None and fusable(points, module, attention_mask, kwargs):
        context = _fused(call, points, module, query, key, value, attention_mask, scaling, kwargs)
        return context, None
    hook = (lambda name: getattr(points, name)) if points is not None else lambda _: _identity
    query, key, value = hook("hook_q")(query), hook("hook_k")(key), hook("hook_v")(value)
    groups = query.shape[1] // key.shape[1]
    keys, values = _shared(key, groups), _shared(value, groups)
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
    # (float32 where its eager attention computes the softmax so; else in the scores' dtype)
    dtype = torch.float32 if float32_softmax(type(module).__module__) else logits.dtype
    if column is not None:
        combined = torch.cat([logits, column.to(logits.dtype)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        weights = torch.softmax(combined, dim=-1, dtype=dtype)[..., :-1]
    else:
        weights = torch.softmax(logits, dim=-1, dtype=dtype)
    weights = hook("hook_weights")(weights.to(query.dtype))
    if dropout and module.training:
        weights = nn.functional.dropout(weights, p=dropout, training=True)
    context = hook("hook_context")(torch.matmul(weights, values))
    output = context.transpose(1, 2).contiguous()
    if call is not None and call.trace:  # (tracing: its output projection is looked for)
        call.trace[-1].output = output
    return output, weights


@functools.cache
def float32_softmax(module_name: str) -> bool:
    """Whether the eager attention of a modeling module (the attention module's own:
    `transformers.models.bert.modeling_bert`) computes its softmax in float32 (Llama's,
    Qwen3's, Gemma's: `softmax(..., dtype=torch.float32)`, or of `scores.float()`) or in the
    scores' dtype (BERT's, GPT-2's): read from its `eager_attention_forward`'s source;
    float32 where it has none. In float32 both are the same."""
    eager = getattr(sys.modules.get(module_name), "eager_attention_forward", None)
    if eager is None:
        return True
    try:
        source = inspect.getsource(eager)
    except (OSError, TypeError):
        return True
    calls = [line for line in source.splitlines() if "softmax(" in line]
    return not calls or any("float32" in line or ".float()" in line for line in calls)


def register() -> None:
    """Register the capturing attention (and eager attention's 4-D masks for it) in
    transformers' interfaces; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    def capturing_mask(*args, **kwargs):
        """eager attention's float mask; within `fused()`, sdpa's boolean one, never
        skipped (a long pass's attention reads which keys it hides from it)."""
        if is_fused():
            kwargs["allow_is_causal_skip"] = False
            kwargs.pop("dtype", None)
            return sdpa_mask(*args, **kwargs)
        return eager_mask(*args, **kwargs)

    AttentionInterface.register(ATTENTION, capturing_attention)
    AttentionMaskInterface.register(ATTENTION, capturing_mask)
    # (a vision tower whose layers pick their own attention class by name, from a table,
    # SAM's (DeepSeek-VL-Hybrid's high-resolution tower) and DeepSeek-OCR-2's: its eager
    # one under ours, uncaptured as a vision tower's are)
    from transformers.models.deepseek_ocr2 import modeling_deepseek_ocr2 as ocr2
    from transformers.models.sam import modeling_sam as sam

    tables: tuple[dict[str, Any], ...] = (
        ocr2.DEEPSEEK_OCR2_SAM_VISION_ATTENTION_CLASSES,
        sam.SAM_VISION_ATTENTION_CLASSES,
    )
    for table in tables:
        table.setdefault(ATTENTION, table["eager"])
