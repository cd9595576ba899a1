"""Positional encodings: sinusoidal (the seed's formula), learned, rotary (RoPE), none.

Each module provides `encoding(offset, length)` for a range of positions: the table the
stack adds to the token embeddings (`adds`), or the rotary angles by which each attention
rotates q and k. The stack shows it to its `hook_pos`; the app shows it with `formula`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import ModelConfig


def sinusoidal_table(max_seq_len: int, dim: int) -> Tensor:
    """The seed's `PositionalEncoding` matrix, [max_seq_len, dim]."""
    pe = torch.zeros(max_seq_len, dim)
    position = torch.arange(0, max_seq_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term[: dim // 2])
    return pe


def check_positions(offset: int, length: int, max_seq_len: int) -> None:
    if offset + length > max_seq_len:
        raise ValueError(
            f"sequence of {offset + length} positions exceeds the model's "
            f"max_seq_len of {max_seq_len}"
        )


class SinusoidalPositions(nn.Module):
    pe: Tensor  # (a buffer)

    """Fixed sin/cos table: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""

    adds = True
    formula = "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)); PE(pos, 2i+1) = cos(...)"

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        # Not persistent: it is the formula, so checkpoints need not carry it.
        self.register_buffer("pe", sinusoidal_table(max_seq_len, dim), persistent=False)

    def table(self, offset: int, length: int) -> Tensor:
        check_positions(offset, length, self.max_seq_len)
        return self.pe[offset : offset + length]  # (T, d)

    encoding = table


class LearnedPositions(nn.Module):
    """One trained vector per position (BERT, GPT-2)."""

    adds = True
    formula = "a trained vector per position (nn.Embedding(max_seq_len, d_model))"

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.embedding = nn.Embedding(max_seq_len, dim)

    def table(self, offset: int, length: int) -> Tensor:
        check_positions(offset, length, self.max_seq_len)
        return self.embedding.weight[offset : offset + length]  # (T, d)

    encoding = table


class RotaryPositions(nn.Module):
    inv_freq: Tensor  # (a buffer)

    """RoPE angles pos * theta^(-2i/d_head); q and k are rotated by them in each attention."""

    adds = False
    formula = "angle(pos, i) = pos * theta^(-2i/d_head); q and k are rotated by it"

    def __init__(
        self, head_dim: int, max_seq_len: int, theta: float = 10000.0, scaling: dict | None = None
    ) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)
        if scaling:
            inv_freq = scaled_frequencies(inv_freq, **scaling)
            self.formula = SCALED_FORMULAS[scaling["rope_type"]].format(**scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def angles(self, offset: int, length: int) -> Tensor:
        check_positions(offset, length, self.max_seq_len)
        positions = torch.arange(offset, offset + length, device=self.inv_freq.device)
        return torch.outer(positions.float(), self.inv_freq)  # (T, d_head / 2)

    encoding = angles


SCALED_FORMULAS = {
    "linear": "angle(pos, i) = pos * theta^(-2i/d_head) / {factor:g} (linear RoPE scaling); "
    "q and k are rotated by it",
    "llama3": "angle(pos, i) = pos * theta^(-2i/d_head), its low frequencies / {factor:g} "
    "(llama3 RoPE scaling); q and k are rotated by it",
}


def scaled_frequencies(
    inv_freq: Tensor,
    rope_type: str,
    factor: float,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_positions: int = 8192,
) -> Tensor:
    """RoPE's frequencies scaled for a longer context, as transformers' rope init does:
    "linear" divides each by `factor`; "llama3" divides those whose wavelength passes
    original_max_positions / low_freq_factor, keeps those under original / high_freq_factor
    and blends the band between by a smooth factor."""
    if rope_type == "linear":
        return inv_freq / factor
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original_max_positions / low_freq_factor
    high_freq_wavelen = original_max_positions / high_freq_factor
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_positions / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, blended, scaled)


NO_POSITIONS_FORMULA = "no positional encoding: attention does not see order"


PositionsModule = SinusoidalPositions | LearnedPositions | RotaryPositions


def positions_module(config: ModelConfig) -> PositionsModule | None:
    """The positional encoding a configuration asks for (None for "none")."""
    if config.positional == "sinusoidal":
        return SinusoidalPositions(config.d_model, config.max_seq_len)
    if config.positional == "learned":
        return LearnedPositions(config.d_model, config.max_seq_len)
    if config.positional == "rotary":
        scaling = None
        if config.rope_type != "default":
            scaling = {
                "rope_type": config.rope_type,
                "factor": config.rope_factor,
                "low_freq_factor": config.rope_low_freq_factor,
                "high_freq_factor": config.rope_high_freq_factor,
                "original_max_positions": config.rope_original_max_positions,
            }
        return RotaryPositions(config.head_dim, config.max_seq_len, config.rope_theta, scaling)
    if config.positional == "relative":
        raise ValueError("model/ has no relative position bias (T5's runs on transformers' code)")
    return None


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate pairs (i, i + d_head/2) of x (B, H, T, d_head) by angles (T, d_head/2)."""
    emb = torch.cat((angles, angles), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()
