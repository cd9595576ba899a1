"""The contribution graph of the LLM Transparency Tool (Tufanov et al. 2024; its
`get_attention_contributions` and graph building, facebookresearch/llm-transparency-tool):
how the residual stream at a prediction is built from the input tokens, through each
layer's attention heads and feed-forward blocks, as the edges that carry more than a
threshold.

In a pre-norm decoder's layer, token i's residual after attention is a sum of parts:

    r_mid_i = r_pre_i + Σ_j Σ_h α_hij f_h(x_j) + b_O

(f_h as in model/methods/value_norms.py; the bias is in the whole, in no part), and after the
feed-forward block r_post_i = r_mid_i + ffn_i. Each part p's share of its whole w is
max(‖w‖₁ − ‖w − p‖₁, 1e-5) over the sum of all the parts' (as the tool computes it; a
later token's zero part keeps 1e-5). The graph's nodes are each token's residual at each
depth: X0_j the embeddings, A{l}_i after layer l's attention, M{l}_i its feed-forward
block's output, I{l}_i after layer l. In each row, shares at or below the threshold are
dropped and the rest renormalized; the edges kept are those reachable backwards from the
chosen position's last residual, I{L-1}_position. An attention edge j → i carries each
head's share (and the residual's, where j = i).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention_types import AttentionSpec
from ..hooks import Capture
from ..served import ServedModel
from .lens import Stream
from .value_norms import head_values, output_projection

FLOOR = 1e-5  # the least share a part keeps (the tool's clip)
EPS = 1e-6  # added to each difference, as the tool's torch.pairwise_distance does
ROW_BLOCK = 1_200_000  # the entries (keys × rows × heads × width) of the parts held at once


@dataclass
class Shares:
    """Each part's share of its whole, per layer (float64)."""

    attention: list[Tensor]  # (T, T, H): of r_mid_i, head h's part from token j
    residual: list[Tensor]  # (T,): of r_mid_i, r_pre_i's
    feed_forward: list[Tensor]  # (T,): of r_post_i, the block's output
    kept: list[Tensor]  # (T,): of r_post_i, r_mid_i's


def _share(whole: Tensor, apart: Tensor) -> Tensor:
    """max(‖w‖₁ − ‖p − w + ε‖₁, FLOOR) from ‖w‖₁ (broadcast) and the distances."""
    return (whole - apart).clamp_min(FLOOR)


def _apart(part: Tensor, whole: Tensor) -> Tensor:
    """‖p − w + ε‖₁ over the last dimension, summed in float64."""
    return (part - whole + EPS).abs().sum(-1, dtype=torch.float64)


def attention_shares(x: Tensor, y: Tensor, weights: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
    """One layer's attention shares (T, T, H) and the residual's (T,), float64. x: r_pre
    (T, d); y: r_mid (T, d); weights (H, T, T); f: `head_values` (H, T, d). A causal
    layer's later keys (weight 0 for every head) are zero parts, their distance the same
    for every one of a row's."""
    length, heads = x.size(0), weights.size(0)
    causal = bool(weights.triu(1).eq(0).all())
    dtype = torch.float32
    x, y, weights, f = x.to(dtype), y.to(dtype), weights.to(dtype), f.to(dtype)
    size = y.abs().sum(-1, dtype=torch.float64)  # (T,)
    by_key = weights.permute(2, 1, 0).contiguous()  # (Tk, Tq, H)
    per_key = f.transpose(0, 1).contiguous()  # (Tk, H, d)
    out = torch.full((length, length, heads), FLOOR, dtype=torch.float64)
    step = max(1, ROW_BLOCK // max(1, length * heads * x.size(1)))
    for start in range(0, length, step):
        rows = slice(start, min(length, start + step))
        keys = rows.stop if causal else length
        parts = by_key[:keys, rows, :, None] * per_key[:keys, None]  # (K, R, H, d)
        parts = parts.sub_(y[rows, None]).add_(EPS).abs_()
        apart = parts.sum(-1, dtype=torch.float64)  # (K, R, H)
        out[rows, :keys] = _share(size[rows, None, None], apart.transpose(0, 1))
    if causal:  # every later key: a zero part
        later = torch.ones(length, length, dtype=torch.bool).triu(1)
        zero = _share(size, _apart(torch.zeros_like(y), y))  # (T,)
        out[later] = zero[:, None, None].expand(length, length, heads)[later]
    kept = _share(size, _apart(x, y))
    total = out.sum((1, 2)) + kept
    return out / total[:, None, None], kept / total


def feed_forward_shares(y: Tensor, ffn: Tensor) -> tuple[Tensor, Tensor]:
    """The feed-forward block's share (T,) of r_post = y + ffn and r_mid's (T,)."""
    post = (y + ffn).double()
    size = post.abs().sum(-1)
    block = _share(size, _apart(ffn.double(), post))
    kept = _share(size, _apart(y.double(), post))
    return block / (block + kept), kept / (block + kept)


def read_shares(
    model: ServedModel, stream: Stream, capture: Capture, spec: AttentionSpec
) -> Shares:
    """Every layer's shares, from a pass's residual stream (model/methods/lens.py `read_stream`) and
    the capture of the same input (its weights and value vectors)."""
    if stream.parallel:
        raise ValueError(
            "its attention and feed-forward blocks read the same input (parallel): no "
            "residual state lies between them for the graph's path"
        )
    shares = Shares([], [], [], [])
    for i, x in enumerate(stream.pre):
        y = x + stream.attention[i]
        weights = capture[spec.hook(i, "hook_weights")][0]
        wo = output_projection(model, spec, i)
        f = head_values(capture[spec.hook(i, "hook_v")][0], wo, weights.size(0))
        attention, residual = attention_shares(x, y, weights, f)
        block, kept = feed_forward_shares(y, stream.feed_forward[i])
        shares.attention.append(attention)
        shares.residual.append(residual)
        shares.feed_forward.append(block)
        shares.kept.append(kept)
    return shares


@dataclass
class Edge:
    source: str  # X0_j, A{l}_i, M{l}_i or I{l}_i
    target: str
    weight: float
    heads: list[float] | None = None  # an attention edge: each head's share
    residual: float = 0.0  # an attention edge j = i: the residual's share in the weight


def _dropped(shares: Tensor, others: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """A row's shares at or below `threshold` dropped and the rest renormalized: `shares`
    (T, ...) and `others` (T,) of the same rows."""
    shares = shares * (shares > threshold)
    others = others * (others > threshold)
    total = (others + shares.flatten(1).sum(-1)).clamp_min(1e-300)  # (a row of none: none)
    return shares / total.view(-1, *([1] * (shares.dim() - 1))), others / total


def graph(shares: Shares, position: int, threshold: float) -> list[Edge]:
    """The edges above `threshold` (each row renormalized without the rest; threshold > 0)
    reachable backwards from I{L-1}_position, sorted by target then source."""
    into: dict[str, list[Edge]] = {}

    def entering(layer: int, j: int) -> str:
        return f"I{layer - 1}_{j}" if layer else f"X0_{j}"

    for n, attention in enumerate(shares.attention):
        parts, kept = _dropped(attention, shares.residual[n], threshold)
        block, carried = _dropped(shares.feed_forward[n][:, None], shares.kept[n], threshold)
        per_token = parts.sum(-1) + torch.diag(kept)  # (T, T): the edge j -> i
        for i, j in (per_token > 0).nonzero().tolist():
            residual = float(kept[i]) if i == j else 0.0
            edge = Edge(entering(n, j), f"A{n}_{i}", float(per_token[i, j]),
                        [float(h) for h in parts[i, j]], residual)  # fmt: skip
            into.setdefault(edge.target, []).append(edge)
        for i in range(attention.size(0)):
            for edge in (Edge(f"A{n}_{i}", f"M{n}_{i}", float(block[i, 0])),
                         Edge(f"M{n}_{i}", f"I{n}_{i}", float(block[i, 0])),
                         Edge(f"A{n}_{i}", f"I{n}_{i}", float(carried[i]))):  # fmt: skip
                if edge.weight > 0:
                    into.setdefault(edge.target, []).append(edge)
    reached: list[Edge] = []
    todo, seen = [f"I{len(shares.attention) - 1}_{position}"], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for edge in into.get(node, []):
            reached.append(edge)
            todo.append(edge.source)
    return sorted(reached, key=lambda e: (e.target, e.source))
