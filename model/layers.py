"""The seed's LayerNorm and feed-forward network (and Llama's RMSNorm and gated SwiGLU
form), and the encoder and decoder layers."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .attention import KVCache, MultiHeadAttention
from .config import ModelConfig


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim (biased variance)."""

    def __init__(self, dim: int, eps: float = 1e-6, fused: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.fused = fused  # torch's kernel (transformers' rounding), not the seed's ops
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        x_norm = (x - mean) / torch.sqrt(var + self.eps)
        return self.gamma * x_norm + self.beta


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim: no centring, no bias
    (Llama's; computed as transformers' LlamaRMSNorm, in float32)."""

    def __init__(self, dim: int, eps: float = 1e-6, fused: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


# The activations model/ implements; any other is refused, never replaced by another.
ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,  # exact (erf), as BERT's "gelu"
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's "gelu_new"
    "silu": nn.SiLU,  # x * sigmoid(x), Llama's (in the gated form: SwiGLU)
}
NORM_MODULES: dict[str, Callable[[int, float, bool], nn.Module]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
}


class FeedForward(nn.Module):
    """w2(dropout(act(w1 x))): widen to d_ff, activate, project back. Gated (Llama's
    SwiGLU with silu): w2(dropout(act(w1 x) * w3 x)), w1 the gate and w3 the up projection."""

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        dropout: float = 0.1,
        activation: str = "relu",
        bias: bool = True,
        gated: bool = False,
    ) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.w2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.w3 = nn.Linear(dim, hidden_dim, bias=bias) if gated else None
        self.dropout = nn.Dropout(dropout)
        if activation not in ACTIVATION_MODULES:
            raise ValueError(
                f"activation {activation!r} is not implemented: one of {sorted(ACTIVATION_MODULES)}"
            )
        self.activation = ACTIVATION_MODULES[activation]()

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.w1(x))
        if self.w3 is not None:
            hidden = hidden * self.w3(x)
        return self.w2(self.dropout(hidden))


class _Layer(nn.Module):
    """Residual wiring shared by both layer types: Post-LN (the seed's) or Pre-LN."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = nn.Dropout(config.dropout)

    def sublayer(self, x: Tensor, norm: nn.Module, fn: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))


def _attention(config: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model, config.n_heads, config.dropout, config.bias, config.kv_heads,
        config.qkv_bias,
    )  # fmt: skip


def norm_layer(config: ModelConfig) -> nn.Module:
    """The configured normalisation over d_model; an unknown one is refused."""
    if config.norm not in NORM_MODULES:
        raise ValueError(f"norm {config.norm!r} is not implemented: one of {sorted(NORM_MODULES)}")
    return NORM_MODULES[config.norm](config.d_model, config.norm_eps, config.fused_norm)


def _ffn(config: ModelConfig) -> FeedForward:
    return FeedForward(
        config.d_model,
        config.d_ff,
        config.dropout,
        config.activation,
        config.bias,
        config.gated_ffn,
    )


class EncoderLayer(_Layer):
    """Bidirectional self-attention, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.self_attn = _attention(config)
        self.self_attn_norm = norm_layer(config)
        self.feed_forward = _ffn(config)
        self.ffn_norm = norm_layer(config)

    def forward(self, x: Tensor, mask: Tensor | None, angles: Tensor | None = None) -> Tensor:
        x = self.sublayer(x, self.self_attn_norm, lambda h: self.self_attn(h, None, mask, angles))
        return self.sublayer(x, self.ffn_norm, self.feed_forward)


class DecoderLayer(_Layer):
    """Masked self-attention, cross-attention to the encoder (if any), feed-forward network."""

    def __init__(self, config: ModelConfig, cross: bool) -> None:
        super().__init__(config)
        self.self_attn = _attention(config)
        self.self_attn_norm = norm_layer(config)
        if cross:
            self.cross_attn = _attention(config)
            self.cross_attn_norm = norm_layer(config)
        self.feed_forward = _ffn(config)
        self.ffn_norm = norm_layer(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        angles: Tensor | None = None,
        cache: dict[str, KVCache] | None = None,
    ) -> Tensor:
        self_cache = cache["self"] if cache is not None else None
        x = self.sublayer(
            x, self.self_attn_norm, lambda h: self.self_attn(h, None, mask, angles, self_cache)
        )
        if memory is not None:
            cross_cache = cache["cross"] if cache is not None else None
            x = self.sublayer(
                x,
                self.cross_attn_norm,
                lambda h: self.cross_attn(h, memory, memory_mask, None, cross_cache),
            )
        return self.sublayer(x, self.ffn_norm, self.feed_forward)
