"""From a captured run to a payload: head summaries, matrices in the requested encoding,
exports. (The runs themselves: app/runs/inference.py; the positional view's table:
app/runs/positional.py.)"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable
from typing import cast

import numpy as np
import torch

from attnviz.model.attention_types import HOOK_OF_KIND, AttentionSpec
from attnviz.model.lean import LeanCapture
from attnviz.model.long import Kind, LongCapture, ValueWeighted, edges, heads_of
from attnviz.model.methods.analysis import head_metrics, head_roles, layer_weights
from attnviz.model.methods.value_norms import layer_norms, layer_value_norms
from attnviz.model.runner import Runner, RunResult

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe
from ..payloads.blocks import AttentionRequest, Block
from ..payloads.schemas import HeadSummary
from ..payloads.wire import BYTES_PER_ENTRY, encode
from .inference import stop_if_cancelled


def raw_piece(runner: Runner, shown: Callable[[int], str]) -> Callable[[int], str]:
    """An id's token as the tokenizer spells it (the runner's `piece`: byte-level "Ġthe"),
    or as shown where the runner shows its tokens as spelled."""

    def raw(token_id: int) -> str:
        piece = runner.piece(token_id)
        return shown(token_id) if piece is None else piece

    return raw


def tokens_of(result: RunResult, spec: AttentionSpec) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of an attention type."""
    return result.tokens(spec.rows), result.tokens(spec.columns)


def summaries(entry: ModelEntry, result: RunResult) -> list[HeadSummary]:
    out = []
    for spec in entry.specs.values():
        for layer, weights, special in layer_weights(result, spec, entry.runner.special_tokens):
            metrics = head_metrics(weights, spec.self_attention, special)
            roles = head_roles(weights, spec.self_attention, special, metrics)
            for head, role in enumerate(roles):
                out.append(
                    HeadSummary(
                        type=spec.type,
                        layer=layer,
                        head=head,
                        entropy=metrics["entropy"][head],
                        max_weight=metrics["max_weight"][head],
                        role=role,
                    )
                )
    return out


def _check_choice(name: str, wanted: list[int] | None, available: int) -> list[int]:
    if wanted is None:
        return list(range(available))
    bad = sorted({i for i in wanted if i >= available})
    if bad:
        raise CannotServe(f"{name} {bad} out of range: this model's {name} are 0..{available - 1}")
    return list(dict.fromkeys(wanted))


def kv_heads_of(spec: AttentionSpec, query_heads: list[int]) -> list[int]:
    """The key/value heads the query heads read (grouped-query attention: query head h
    reads h // (query_heads / kv_heads)), each once, in order."""
    group = spec.query_heads // spec.kv_heads
    return list(dict.fromkeys(h // group for h in query_heads))


def attention_blocks(
    entry: ModelEntry, result: RunResult, req: AttentionRequest, max_bytes: int
) -> list[Block]:
    """The requested matrices, a block per type, layer and kind, checked against the model
    and the response size limit."""
    types = list(dict.fromkeys(req.types or entry.attention_types()))
    unknown = sorted(set(types) - set(entry.attention_types()))
    if unknown:
        raise CannotServe(
            f"{entry.id} has no attention of type {unknown}: it has {entry.attention_types()}"
        )
    if req.encoding == "u1":
        bad = sorted(set(req.kinds) - {"weights", "mask"})
        if bad:
            raise CannotServe(
                f"u1 holds values in [0, 1] only (weights, mask); ask f2 or f4 for {bad}"
            )
    reshaped = req.granularity == "word" or req.hide_special
    if reshaped and set(req.kinds) != {"weights"}:
        raise CannotServe("granularity=word and hide_special apply to weights only")
    if req.granularity == "word" and result.source_words is None:
        raise CannotServe(f"{entry.id} has no word pieces: ask granularity=token")
    kinds = list(dict.fromkeys(req.kinds))
    long = isinstance(result.capture, LongCapture)
    asked_window = req.rows is not None or req.columns is not None or req.pool is not None
    if asked_window:
        bad = sorted(set(kinds) - set(WINDOWED))
        if bad:
            raise CannotServe(f"rows, columns and pool apply to {WINDOWED}, not {bad}")
    if (asked_window or long) and reshaped:
        raise CannotServe(
            "granularity=word and hide_special need whole heads: ask without rows, "
            "columns and pool (on an input of at most 512 tokens)",
        )  # fmt: skip
    plan = []
    for attention_type in types:
        spec = entry.specs[attention_type]
        heads = _check_choice("heads", req.heads, spec.query_heads)
        layers = _check_choice("layers", req.layers, spec.layers)
        plan += [(spec, layer, heads) for layer in layers]
    recomputed = sum(len(h) for _, _, h in plan) * len({*kinds} & {"weights", "scores", "norms"})
    if long and recomputed > LONG_HEADS:
        raise CannotServe(
            f"this asks for {recomputed} heads' windows of a long input, each recomputed "
            f"from its queries and keys: at most {LONG_HEADS} a request (ask a layer at a time)",
        )  # fmt: skip

    size = 0.0
    for spec, _, heads in plan:
        queries, keys = tokens_of(result, spec)
        per_kind = {"q": len(queries) * spec.head_dim, "k": len(keys) * spec.head_dim}
        per_kind["v"] = per_kind["k"]
        if asked_window or long:
            cells = window_cells(req, len(queries), len(keys))
            per_kind |= dict.fromkeys(WINDOWED, cells)
        for kind in kinds:
            entries = per_kind.get(kind, len(queries) * len(keys))
            stacked = len(heads)
            if kind == "mask":
                stacked = 1
            elif kind in ("k", "v"):
                stacked = len(kv_heads_of(spec, heads))
            # the data, and each block's fields with its two token lists
            size += stacked * entries * BYTES_PER_ENTRY[req.encoding]
            size += 200 + (12 * (len(queries) + len(keys)) if req.repeat_tokens else 0)
    if size > max_bytes:
        raise CannotServe(
            f"the response would take about {_bytes(size)}, over the limit of "
            f"{_bytes(max_bytes)}: ask for fewer types, layers, heads or kinds, "
            "or use encoding u1 or f2"
            + (
                ", or a window (rows, columns) or pooled cells (pool)"
                if long or asked_window
                else ""
            ),
        )

    blocks = []
    for spec, layer, query_heads in plan:
        queries, keys = tokens_of(result, spec)
        for kind in kinds:
            if (asked_window or long) and kind in WINDOWED:
                blocks.append(window_block(entry, result, req, spec, layer, kind, query_heads))
                continue
            if kind == "norms":
                try:
                    tensor = layer_norms(entry.runner.model, result.captured, spec, layer)
                except ValueError as exc:
                    raise CannotServe(f"{entry.id}: {exc}") from None
            else:
                tensor = result.captured[spec.hook(layer, HOOK_OF_KIND[kind])][0]
            heads = kv_heads_of(spec, query_heads) if kind in ("k", "v") else query_heads
            every_head = kind == "mask" or heads == list(range(tensor.size(0)))
            stack = tensor if every_head else tensor.index_select(0, torch.tensor(heads))
            rows: list[str] | None = keys if kind in ("k", "v") else queries
            columns: list[str] | None = None if kind in ("q", "k", "v") else keys
            steps = spec.rows == "target" and kind not in ("k", "v")
            predicted = result.predicted_tokens if steps and result.predicted_tokens else None
            sides: dict[str, str | None] = {"rows_from": None, "columns_from": None}
            if reshaped and spec.type == "encoder.self":
                words = result.source_words
                stack, rows = regroup(stack, queries, words, entry.runner.special_tokens, req)
                columns = rows
            elif not req.repeat_tokens:  # named by their side: the response holds the lists
                row_side = spec.columns if kind in ("k", "v") else spec.rows
                sides["rows_from"], rows, predicted = row_side, None, None
                if columns is not None:
                    sides["columns_from"], columns = spec.columns, None
            blocks.append(
                Block(
                    type=spec.type,
                    layer=layer,
                    kind=kind,
                    heads=None if kind == "mask" else heads,
                    rows=rows,
                    predicted=predicted,
                    columns=columns,
                    **sides,
                    shape=list(stack.shape),
                    data=[] if req.encoding == "json" else encode(stack, req.encoding),
                )
            )
            if req.encoding == "json":  # written by attention_json, a few rows a call
                blocks[-1]._floats["data"] = stack.double().cpu().numpy()  # (a copy: any dtype)
    return blocks


WINDOWED = ("weights", "scores", "mask", "norms")  # the kinds read by windows and pooled
# a long input's heads one request recomputes at most (8,192 SmolLM2 tokens: about 0.3 s
# a head on 2 cores, its row normalisers and the window)
LONG_HEADS = 32


def _span(name: str, asked: list[int] | None, length: int) -> tuple[int, int]:
    start, stop = (0, length) if asked is None else asked
    if not 0 <= start < stop <= length:
        raise CannotServe(
            f"{name} [{start}, {stop}) is not a window of 0..{length}: ask 0 <= start < stop "
            f"<= {length}",
        )  # fmt: skip
    return start, stop


def window_cells(req: AttentionRequest, n_rows: int, n_columns: int) -> int:
    """The cells one head's window holds (checked: a 422 for a window outside the input)."""
    (r0, r1), (c0, c1) = _span("rows", req.rows, n_rows), _span("columns", req.columns, n_columns)
    return (len(edges(r0, r1, req.pool)) - 1) * (len(edges(c0, c1, req.pool)) - 1)


def window_block(
    entry: ModelEntry,
    result: RunResult,
    req: AttentionRequest,
    spec: AttentionSpec,
    layer: int,
    kind: str,
    query_heads: list[int],
) -> Block:
    """A window of the heads of one type, layer and kind, exact or pooled (model/long/):
    for a long input recomputed from its queries and keys, a row block at a time."""
    queries, keys = tokens_of(result, spec)
    rows, columns = _span("rows", req.rows, len(queries)), _span("columns", req.columns, len(keys))
    source = heads_of(result.captured, spec.hook(layer, "")[:-1])
    if kind == "norms":  # the weights' windows times each key's value norm
        try:
            model, captured = entry.runner.model, result.captured
            found = layer_value_norms(model, captured, spec, layer, query_heads)
        except ValueError as exc:
            raise CannotServe(f"{entry.id}: {exc}") from None
        source = ValueWeighted(source, dict(zip(query_heads, found, strict=True)))
    heads = [0] if kind == "mask" else query_heads
    windows = []
    for head in heads:
        stop_if_cancelled()  # (a head at a time: a client gone stops it)
        windows.append(source.window(cast(Kind, kind), head, rows, columns, req.pool, req.reduce))
    stack = torch.stack([w[0] for w in windows])
    row_edges, column_edges = windows[0][1], windows[0][2]
    single_rows = row_edges[1] - row_edges[0] == 1
    single_cols = column_edges[1] - column_edges[0] == 1
    steps = spec.rows == "target" and bool(result.predicted_tokens)
    shown_rows = queries[rows[0] : rows[1]] if req.repeat_tokens and single_rows else None
    block = Block(
        type=spec.type,
        layer=layer,
        kind=kind,
        heads=None if kind == "mask" else heads,
        rows=shown_rows,
        rows_from=None if shown_rows is not None else spec.rows,
        predicted=result.predicted_tokens[rows[0] : rows[1]] if steps and shown_rows else None,
        columns=keys[columns[0] : columns[1]] if req.repeat_tokens and single_cols else None,
        columns_from=None if req.repeat_tokens and single_cols else spec.columns,
        row_edges=row_edges,
        column_edges=column_edges,
        reduce=req.reduce if req.pool is not None else None,
        shape=list(stack.shape),
        data=[] if req.encoding == "json" else encode(stack, req.encoding),
    )
    if req.encoding == "json":
        block._floats["data"] = stack.double().cpu().numpy()
    return block


def _bytes(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def regroup(
    stack: torch.Tensor,
    tokens: list[str],
    words: list[int | None] | None,
    special: frozenset[str],
    req: AttentionRequest,
) -> tuple[torch.Tensor, list[str]]:
    """Self-attention weights (heads, T, T) without the special tokens (rows renormalised)
    and/or by word: a word's row is the mean of its pieces' rows, its column the sum."""
    keep = [i for i, t in enumerate(tokens) if not (req.hide_special and t in special)]
    kept = torch.tensor(keep, dtype=torch.long)
    stack = stack.float().index_select(1, kept).index_select(2, kept)
    if req.hide_special:
        stack = stack / stack.sum(-1, keepdim=True).clamp_min(1e-12)
    group_of: list[int] = []  # group of each kept position
    labels: list[str] = []
    last_word = object()
    for i in keep:
        word = words[i] if (req.granularity == "word" and words is not None) else None
        if word is not None and word == last_word:
            labels[-1] += tokens[i].removeprefix("##")
        else:
            labels.append(tokens[i])
        group_of.append(len(labels) - 1)
        last_word = word if word is not None else object()
    # membership (kept positions x groups): keys are summed, queries averaged
    member = torch.zeros(len(keep), len(labels))
    member[torch.arange(len(keep)), torch.tensor(group_of, dtype=torch.long)] = 1.0
    summed = stack @ member
    return (member / member.sum(0)).T @ summed, labels


def export_npz(
    entry: ModelEntry, text: str, result: RunResult, layers: list[int] | None, max_bytes: int
) -> tuple[bytes, str]:
    """The captured tensors (of `layers` only, where given) as float32 in an .npz, and its
    file name (from `text`: what the run read); a 422 first where they pass `max_bytes`."""
    if layers is not None:
        layers = _check_choice("layers", layers, max(s.layers for s in entry.specs.values()))
    capture = result.captured
    names = [n for n in capture if layers is None or layer_of(n) in (None, *layers)]
    size = sum(4 * math.prod(shape_of(capture, n)) for n in names)
    if size > max_bytes:
        raise CannotServe(
            f"these captured tensors take {_bytes(size)} as float32, over the "
            f"{_bytes(max_bytes)} an answer may have (ATTNVIZ_MAX_RESPONSE_BYTES): ask for "
            "fewer layers (`layers`, e.g. [0]) or send a shorter text",
        )
    arrays: dict[str, np.ndarray] = {name: capture[name].float().cpu().numpy() for name in names}
    arrays["source_tokens"] = np.array(result.source_tokens, dtype=str)
    arrays["target_tokens"] = np.array(result.target_tokens, dtype=str)
    # the tokenizer's own pieces beside them ("Ġthe" where the tokens show "␣the")
    arrays["source_raw"] = np.array(result.raw("source"), dtype=str)
    arrays["target_raw"] = np.array(result.raw("target"), dtype=str)
    if result.image is not None:  # a picture's: each position's patch box, NaN for none
        none = (math.nan,) * 4
        arrays["image_boxes"] = np.array(
            [p.box or none for p in result.image.positions], dtype=np.float32
        )
        arrays["image_size"] = np.array(result.image.size, dtype=np.int64)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # (stub: allow_pickle)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return buffer.getvalue(), f"{entry.id}-{digest}.npz"


def layer_of(name: str) -> int | None:
    """The layer of a hook point's name (`decoder.3.self_attn.hook_q`: 3), None for the
    stack's own (`encoder.hook_embed`)."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def shape_of(capture, name: str) -> tuple[int, ...]:
    """A captured tensor's shape, without recomputing a lean capture's weights: (batch,
    query heads, queries, keys) from its queries and keys."""
    if isinstance(capture, LeanCapture) and name in capture.recomputed:
        prefix = name.rpartition(".")[0]
        q, k = capture[f"{prefix}.hook_q"], capture[f"{prefix}.hook_k"]
        return (*q.shape[:3], k.shape[2])
    return tuple(capture[name].shape)
