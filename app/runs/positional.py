"""The positional view's payload: what a model adds for positions (its table, rotary
angles or relative bias), as its model states it, and the positions' similarity."""

from __future__ import annotations

import torch

from attnviz.model.positional import NO_POSITIONS_FORMULA

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe


def positional_table(entry: ModelEntry, positions: int, dims: int) -> dict:
    """The table the model adds (or its rotary angles), and the positions' cosine similarity."""
    cfg = entry.config
    if entry.runner.capabilities.pictures:  # (its encoding is a table per patch, or RoPE over
        # rows and columns: not the text's 1-D positions this draws)
        raise CannotServe(
            f"{entry.id} reads pictures: its positions are a picture's patches (rows and "
            "columns), which this table of a text's positions does not draw"
        )
    if positions > cfg.max_seq_len:
        raise CannotServe(f"positions must be at most {cfg.max_seq_len}, this model's max_seq_len")
    model = entry.runner.model
    cfg = entry.config  # (a model of yours, read now: as its loaded model states it)
    encoding = model.positions("encoder" if cfg.has_encoder else "decoder")
    if encoding is None:
        full, formula = torch.zeros(positions, 0), NO_POSITIONS_FORMULA
    else:
        full, formula = encoding.encoding(0, positions).detach(), encoding.formula
    if cfg.positional == "rotary" and full.size(1) < dims <= cfg.head_dim // 2:
        dims = full.size(1)  # partial rotary (Phi, Pythia) turns fewer pairs than a head has
    if dims > max(1, full.size(1)) and full.size(1):
        raise CannotServe(f"dims must be at most {full.size(1)} for this model")
    if cfg.positional == "rotary" and full.size(1):
        # RoPE adds nothing: it rotates each pair of q and k dims by pos * theta_i. What it
        # makes of two positions is the mean cosine of their angle differences (q . k of
        # rotated unit pairs depends on m - n only); the angles are shown wrapped to ±pi
        # (cos(a - b) = cos a cos b + sin a sin b: no positions^2 x dims tensor)
        cos, sin = torch.cos(full), torch.sin(full)
        similarity = (cos @ cos.T + sin @ sin.T) / full.size(1)
        full = torch.atan2(sin, cos)
    elif full.size(1):
        unit = torch.nn.functional.normalize(full, dim=-1)
        similarity = unit @ unit.T
    else:
        similarity = torch.zeros(positions, positions)
    return {
        "kind": cfg.positional,
        "formula": formula,
        "positions": positions,
        "dims": min(dims, full.size(1)),
        "table": full[:, :dims].double().cpu().numpy(),
        "similarity": similarity.double().cpu().numpy(),
    }
