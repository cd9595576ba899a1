"""The positions a transformers model uses, found in its own modules: a rotary embedding
(its `inv_freq`, or one per layer type), a table it adds (learned, or a fixed sinusoidal
one), or T5's relative bias; whether its RoPE turns dimension i with i + d/2; and the hook
that shows them to a served model's `hook_pos` as they are made."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..hooks import HookPoint, active

POSITION_NAMES = ("position_embeddings", "wpe", "embed_positions")  # tables it adds


@dataclass
class Positions:
    """The positions a transformers model uses, as model/positional's modules state them."""

    positional: str  # "rotary", "learned", "sinusoidal" or "relative"
    module: Any  # (a transformers module: its own methods and buffers)
    formula: str
    frequencies: str = "inv_freq"  # the rotary module's buffer (Gemma 3: one per layer type)

    def encoding(self, offset: int, length: int) -> Tensor:
        """The rotary angles (T, d_rot/2), the added table (T, d), or a relative bias's
        value per head for each distance from the first key (T, H), of offset.."""
        if self.positional == "relative":
            with torch.no_grad():  # (T, 1) keys: the first only, never a T x T table
                bias = self.module.compute_bias(offset + length, 1)  # (1, H, T, 1)
            return bias[0, :, offset:, 0].T.float()
        if self.positional == "rotary":
            inv_freq = getattr(self.module, self.frequencies).float()
            positions = torch.arange(offset, offset + length, dtype=torch.float32)
            return positions[:, None] * inv_freq[None]
        table = getattr(self.module, "weight", None)
        if table is None:  # (M2M-100's sinusoidal table is a buffer, `weights`)
            table = self.module.weights
        start = offset + int(getattr(self.module, "offset", 0))  # BART's learned offset 2
        return table[start : start + length].detach().float()


def rotary_module(hf: nn.Module) -> tuple[nn.Module, str] | None:
    """The rotary embedding module and its frequencies' buffer (a full-attention layer's
    where it has one per layer type)."""
    for _, m in hf.named_modules():
        names = [n for n, _ in m.named_buffers(recurse=False) if n.endswith("inv_freq")]
        names = [n for n in names if "original" not in n]
        if names:
            full = [n for n in names if n.startswith("full")]
            return m, (full or sorted(names))[0]
    return None


def table_module(hf: nn.Module) -> nn.Module | None:
    """The module that adds a position table (learned, or a fixed sinusoidal one)."""
    for name, m in hf.named_modules():
        if name.rsplit(".", 1)[-1] in POSITION_NAMES and (
            isinstance(m, nn.Embedding) or isinstance(getattr(m, "weights", None), Tensor)
        ):
            return m
    return None


def positions_of(hf: nn.Module) -> Positions | None:
    found = rotary_module(hf)
    if found is not None:
        rotary, frequencies = found
        rope_type = getattr(rotary, "rope_type", None) or "default"
        if isinstance(rope_type, dict):
            rope_type = ", ".join(sorted(set(map(str, rope_type.values()))))
        formula = (
            f"RoPE ({rope_type}): each pair of q and k dimensions i turned by position x θ_i, "
            f"θ_i from the model's own rotary embedding ({frequencies})"
        )
        return Positions("rotary", rotary, formula, frequencies)
    table = table_module(hf)
    if table is not None:
        if "sinusoidal" in type(table).__name__.lower():
            return Positions("sinusoidal", table, "sin and cos of position x 10000^(-2i/d), added")
        return Positions("learned", table, "a learned vector per position, added")
    relative = next(
        (m for m in hf.modules()
         if hasattr(m, "compute_bias") and getattr(m, "has_relative_attention_bias", False)),
        None,
    )  # fmt: skip
    if relative is not None:
        formula = (
            "no vector is added: each score gets a learned bias per head for the distance "
            "between query and key, in log-spaced buckets (T5's relative attention). The "
            "table shows each head's bias for the distance from the first key (its first "
            "layer's where each layer has its own)."
        )
        return Positions("relative", relative, formula)
    return None


def halves_rotated(hf: nn.Module) -> bool:
    """Whether the model's modeling code turns dimension i with i + d/2, as
    transformers' usual `rotate_half` does (read from its source)."""
    module = sys.modules.get(type(hf).__module__)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return False
    standard = "x1 = x[..., : x.shape[-1] // 2]" in source
    return standard and "interleave" not in source and "[..., ::2]" not in source


def hook_positions(model: Any, positions: Positions, point: HookPoint) -> None:
    """Show a served model's positions to its `hook_pos` (`point`; T5's, to each stack's)
    as they are made; what a hook returns replaces them (zeros: no positions; for RoPE,
    angles of 0 are the identity rotation)."""
    if positions.positional in ("learned", "sinusoidal"):  # the table it adds, as it adds it
        positions.module.register_forward_hook(lambda m, args, out: point(out))
        return
    if positions.positional == "relative":  # T5's bias per distance bucket and head, as its
        # table gives it ((Tq, Tk, H)); zeros: no bias, so nothing says where a token is
        for module in model.hf.modules():
            table = getattr(module, "relative_attention_bias", None)
            if getattr(module, "has_relative_attention_bias", False) and isinstance(
                table, nn.Embedding
            ):
                stack = "encoder" if id(module) in model._encoder_modules else "decoder"
                point_of = getattr(model, stack).hook_pos
                table.register_forward_hook(
                    lambda m, args, out, point_of=point_of: point_of(out) if active() else out
                )
        return
    if positions.positional != "rotary":
        return

    def rotary(module, args, out):
        if not active() or not (isinstance(out, tuple) and len(out) == 2):
            return out  # (Llama 4's complex frequencies are not shown)
        cos, sin = out
        if cos.dim() != 3:  # (B, T, d) only: not a multimodal RoPE's sections
            return out
        half = cos.shape[-1] // 2
        angles = torch.atan2(sin[0, :, :half], cos[0, :, :half]).float()  # (T, d_rot/2)
        seen = point(angles)
        if seen is angles:
            return out
        scale = float(getattr(module, "attention_scaling", 1.0))
        turned = torch.cat([seen, seen], dim=-1)[None].expand_as(cos)
        return (torch.cos(turned) * scale).to(cos.dtype), (torch.sin(turned) * scale).to(sin.dtype)

    positions.module.register_forward_hook(rotary)
