"""The neuron view of a head (BertViz's, for every model we serve): for one query token,
its query vector, each key vector and their element-wise product, whose sum is the raw
score (hook_scores), then the softmax of the row. For RoPE models the same before the
rotation too, which shows what the position adds."""

from __future__ import annotations

import torch

import attnviz.app.head_views.schemas as s
from attnviz.model.long import heads_of
from attnviz.model.long.reading import LONG_FROM
from attnviz.model.positional import apply_rotary

from ..errors import CannotServe
from ..lab.context import LabContext


def side(q: torch.Tensor, keys: torch.Tensor, scale: float) -> s.VectorSide:
    products = q * keys * scale  # (Tk, d)
    return s.VectorSide(
        query=q.tolist(),
        keys=keys.tolist(),
        products=products.tolist(),
        scores=products.sum(-1).tolist(),
    )


def unrotate_half(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x (T, d) turned back by -angle in transformers' RoPE layout (dimension i paired
    with i + d_rot/2; dimensions past d_rot, as partial rotary leaves them, unchanged)."""
    d_rot = 2 * angles.size(-1)
    turned, kept = x[..., :d_rot], x[..., d_rot:]
    cos = torch.cat([torch.cos(angles), torch.cos(angles)], dim=-1)
    sin = torch.cat([torch.sin(angles), torch.sin(angles)], dim=-1)
    half = d_rot // 2
    rotated = torch.cat([-turned[..., half:], turned[..., :half]], dim=-1)
    return torch.cat([turned * cos - rotated * sin, kept], dim=-1)


def neuron(ctx: LabContext, req: s.NeuronRequest) -> s.NeuronResponse:
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    rows, columns = ctx.tokens(spec)
    if req.query is not None and req.query >= len(rows):
        raise CannotServe(
            f"query {req.query} out of range: {spec.type} has rows 0..{len(rows) - 1}"
        )
    k0, k1 = key_window(ctx, req, len(columns))
    # model/'s layout, transformers' rotate_half, or None: one the view cannot undo
    layout = ctx.model.rotary_layout
    rotary = ctx.config.positional == "rotary" and spec.self_attention and layout is not None
    points = ["hook_q", "hook_k", "hook_scores", "hook_weights", "hook_mask"]
    names = [spec.hook(req.layer, p) for p in points]
    if rotary:
        names.append(f"{spec.stack}.hook_pos")
    # a long input: its run's queries and keys, the row recomputed from them (model/long/);
    # else one pass with the head's matrices captured
    capture = ctx.result.captured if ctx.long else ctx.forward(names=names)[1]
    rotary = rotary and f"{spec.stack}.hook_pos" in capture  # (not shown: Llama 4's)
    kv_head = req.head // (spec.query_heads // spec.kv_heads)
    weights_name = spec.hook(req.layer, "hook_weights")
    query = req.query
    if query is None:  # (a long input keeps no weights to search: its last row, every key's)
        query = len(rows) - 1 if ctx.long else most_informative(capture[weights_name][0, req.head])
    q = capture[spec.hook(req.layer, "hook_q")][0, req.head]  # (Tq, d), after RoPE
    k = capture[spec.hook(req.layer, "hook_k")][0, kv_head]  # (Tk, d)
    scale = ctx.score_scale(spec)  # (a 422 where q·k times it is not the score)
    if ctx.long:
        heads = heads_of(capture, spec.hook(req.layer, "hook_q").rpartition(".")[0])
        row = (req.head, query, query + 1, k0, k1)
        visible = heads.block("mask", *row)[0].bool().tolist()
        weights = heads.block("weights", *row)[0].tolist()
    else:
        mask_name = spec.hook(req.layer, "hook_mask")
        every = capture[mask_name][0, 0, query].tolist() if mask_name in capture else None
        visible = every[k0:k1] if every is not None else [True] * (k1 - k0)
        picked = capture[weights_name][0, req.head, query, k0:k1]
        weights = picked.tolist()
    before = None
    if rotary:
        angles = capture[f"{spec.stack}.hook_pos"]  # (T, d/2): rotating back by -angle
        if layout == "rotate_half":
            q0 = unrotate_half(q[query], angles[query])
            k_0 = unrotate_half(k[k0:k1], angles[k0:k1])
        else:
            q0 = apply_rotary(q[None, None, query : query + 1],
                              -angles[query : query + 1])[0, 0, 0]  # fmt: skip
            k_0 = apply_rotary(k[None, None, k0:k1], -angles[k0:k1])[0, 0]
        before = side(q0, k_0, scale)
    predicted = ctx.predicted(spec)
    return s.NeuronResponse(
        model=ctx.entry.id,
        type=spec.type,
        layer=req.layer,
        head=req.head,
        kv_head=kv_head,
        query=query,
        query_token=rows[query],
        predicted=predicted[query] if predicted else None,
        keys=columns[k0:k1],
        first_key=k0,
        d_head=spec.head_dim,
        scale=scale,
        rotary=rotary,
        after=side(q[query], k[k0:k1], scale),
        before=before,
        visible=[bool(v) for v in visible],
        weights=weights,
    )


def most_informative(weights: torch.Tensor) -> int:
    """The row (of a head's weights, queries x keys) the view opens on: the most spread,
    highest in entropy (the first of equals). Row 0 of a causal decoder sees one key, its
    weight 1, and has nothing to compare; the most spread row weighs the most keys against
    each other, which is what the products and sums show."""
    p = weights.double()
    entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    return int(entropy.argmax())


def key_window(ctx: LabContext, req: s.NeuronRequest, n_keys: int) -> tuple[int, int]:
    """The [start, stop) of the keys shown: those asked for, or every key; a long input's
    must be asked for, at most LONG_FROM of them."""
    if req.keys is None and ctx.long:
        raise CannotServe(
            f"a long input ({n_keys:,} keys): the neuron view reads a window of keys; "
            f"send keys [start, stop], at most {LONG_FROM} of them",
        )  # fmt: skip
    k0, k1 = req.keys or (0, n_keys)
    if not 0 <= k0 < k1 <= n_keys:
        raise CannotServe(
            f"keys [{k0}, {k1}) is not a window of 0..{n_keys}: ask 0 <= start < stop "
            f"<= {n_keys}",
        )  # fmt: skip
    if ctx.long and k1 - k0 > LONG_FROM:
        raise CannotServe(
            f"keys [{k0}, {k1}) holds {k1 - k0:,} keys of a long input: at most {LONG_FROM}"
        )
    return k0, k1
