"""Scaled dot-product attention, multi-head attention with hook points, and the KV cache.

Masks are boolean with True meaning "may attend", as in the seed's `generate_mask` and in
`torch.nn.functional.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .hooks import HookPoint, wanted
from .masks import causal_mask
from .positional import apply_rotary


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Q K^T / sqrt(d_k): (B, H, Tq, d) x (B, H, Tk, d) -> (B, H, Tq, Tk)."""
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over keys with masked-out keys at -inf, so they get exactly 0 weight.

    A row with no key left (all padding) gets all-zero weights instead of NaN.
    """
    if mask is None or bool(mask.all()):  # nothing masked (no padding, no future): as is
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    empty = ~mask.any(dim=-1, keepdim=True)  # (B, 1, Tq, 1): rows with no key at all
    return weights.masked_fill(empty, 0.0) if bool(empty.any()) else weights


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V; returns (context, weights)."""
    weights = masked_softmax(attention_scores(q, k), mask)
    return torch.matmul(weights, v), weights


_FUSED: ContextVar[bool] = ContextVar("attnviz_fused_attention", default=False)


@contextmanager
def fused() -> Iterator[None]:
    """Within this block (in this context), attention modules whose scores, mask and
    weights no capture records and no hook function reads compute their context with
    torch's fused kernel (`fused_attention`): what a long input's capture runs with."""
    token = _FUSED.set(True)
    try:
        yield
    finally:
        _FUSED.reset(token)


def is_fused() -> bool:
    """Whether this context is within `fused()`."""
    return _FUSED.get()


def _mask_form(mask: Tensor, q_len: int, k_len: int) -> str:
    """What a mask (B, 1, Tq or 1, Tk) is: "none" (every key seen), "causal" (exactly the
    causal mask of Tq = Tk positions) or "other"; found once per mask tensor (the layers of
    one pass share it)."""
    known = getattr(mask, "_attnviz_form", None)
    if known is None:
        if bool(mask.all()):
            known = "none"
        elif q_len == k_len and mask.shape[-2:] == (q_len, k_len):
            tril = causal_mask(q_len, device=mask.device)
            known = "causal" if bool((mask == tril).all()) else "other"
        else:
            known = "other"
        mask._attnviz_form = known  # type: ignore[attr-defined]
    return known


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V by torch's fused kernel, never holding the (Tq, Tk)
    weights: (B, H, Tq, d) with keys and values (B, H_kv, Tk, d) shared by groups of query
    heads. A row with no key at all gets a zero context, as `masked_softmax` gives it."""
    group = q.size(1) != k.size(1)
    form = "none" if mask is None else _mask_form(mask, q.size(2), k.size(2))
    if form != "other":
        return F.scaled_dot_product_attention(q, k, v, is_causal=form == "causal", enable_gqa=group)
    assert mask is not None
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=group)
    return context.nan_to_num_(0.0) if not bool(mask.any(-1).all()) else context


@dataclass
class KVCache:
    """Keys and values one attention module has computed so far, each (B, H_kv, T, d_head)
    (one per key/value head: grouped-query attention caches them unshared)."""

    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.size(2)


class MultiHeadAttention(nn.Module):
    """The seed's multi-head attention (separate Wq, Wk, Wv, Wo), computed explicitly so that
    every intermediate passes a hook point.

    Self-attention when `kv` is None, cross-attention otherwise. With a `cache`,
    self-attention computes k, v for the new tokens only and appends them; cross-attention
    computes k, v from `kv` once and reuses them on later calls.

    With `n_kv_heads` < `n_heads` (grouped-query attention) each key/value head serves
    n_heads / n_kv_heads consecutive query heads: query head h reads key/value head
    h // group, as transformers' `repeat_kv`. Keys and values are hooked per key/value
    head, scores and weights per query head.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        dropout: float = 0.1,
        bias: bool = True,
        n_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
    ) -> None:
        super().__init__()
        assert dim % n_heads == 0, "dim must be divisible by n_heads"
        self.dim = dim
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        assert n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        self.group = n_heads // self.n_kv_heads  # query heads per key/value head
        self.head_dim = dim // n_heads
        kv_dim = self.n_kv_heads * self.head_dim
        qkv = bias if qkv_bias is None else qkv_bias  # (Qwen2: on these three alone)
        self.wq = nn.Linear(dim, dim, bias=qkv)
        self.wk = nn.Linear(dim, kv_dim, bias=qkv)
        self.wv = nn.Linear(dim, kv_dim, bias=qkv)
        self.wo = nn.Linear(dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.hook_q = HookPoint()  # (B, H, Tq, d_head), after rotary
        self.hook_k = HookPoint()  # (B, H_kv, Tk, d_head), after rotary, cached keys included
        self.hook_v = HookPoint()  # (B, H_kv, Tk, d_head)
        self.hook_scores = HookPoint()  # (B, H, Tq, Tk), scaled, before the mask
        self.hook_mask = HookPoint()  # (B, 1, Tq, Tk) bool, True = may attend
        self.hook_weights = HookPoint()  # (B, H, Tq, Tk), after softmax
        self.hook_context = HookPoint()  # (B, H, Tq, d_head), weights @ v per head

    def split_heads(self, x: Tensor, heads: int | None = None) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads or self.n_heads, self.head_dim).transpose(1, 2)

    def shared(self, x: Tensor) -> Tensor:
        """Key/value heads (B, H_kv, T, d) as one per query head (B, H, T, d)."""
        return x if self.group == 1 else x.repeat_interleave(self.group, dim=1)

    def forward(
        self,
        x: Tensor,
        kv: Tensor | None = None,
        mask: Tensor | None = None,
        angles: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        is_cross = kv is not None
        batch, q_len, _ = x.shape
        q = self.split_heads(self.wq(x))  # (B, H, Tq, d_head)
        if angles is not None:
            q = apply_rotary(q, angles)
        if is_cross and cache is not None and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            source = kv if is_cross else x
            k = self.split_heads(self.wk(source), self.n_kv_heads)
            v = self.split_heads(self.wv(source), self.n_kv_heads)
            if angles is not None:
                k = apply_rotary(k, angles)
            if cache is not None:
                if not is_cross and cache.k is not None and cache.v is not None:
                    k = torch.cat([cache.k, k], dim=2)
                    v = torch.cat([cache.v, v], dim=2)
                cache.k, cache.v = k, v
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)

        seen = (self.hook_scores, self.hook_mask, self.hook_weights)
        if _FUSED.get() and not self.training and not any(map(wanted, seen)):
            # within `fused()` and nobody reading the (Tq, Tk) matrices: torch's fused
            # kernel, linear in memory (otherwise the seed's operations, exactly)
            context = self.hook_context(fused_attention(q, k, v, mask))
            context = context.transpose(1, 2).contiguous().view(batch, q_len, self.dim)
            return self.wo(context)
        k, v = self.shared(k), self.shared(v)

        scores = self.hook_scores(attention_scores(q, k))
        if mask is not None:
            mask = self.hook_mask(mask.expand(batch, 1, q_len, k.size(2)))
        weights = self.hook_weights(masked_softmax(scores, mask))
        context = self.hook_context(torch.matmul(self.dropout(weights), v))
        context = context.transpose(1, 2).contiguous().view(batch, q_len, self.dim)
        return self.wo(context)
