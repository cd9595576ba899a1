"""The KV cache step by step: each decoding step's new query row over the cached keys, the
cache's size per layer, and cached against uncached logits."""

from __future__ import annotations

from typing import cast

import torch
from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.hooks import hooked
from attnviz.model.masks import padding_mask
from attnviz.model.runner import generating, stepwise
from attnviz.model.served import DecoderCache

from ..errors import CannotServe
from ..payloads.blocks import Deferred
from ..payloads.schemas import Index, TextRequest
from ..payloads.wire import BYTES_PER_ENTRY, encode
from .context import LabContext


class KVCacheRequest(TextRequest):
    layer: Index | None = Field(
        None, description="Only this decoder layer's rows (default: every layer's)."
    )


class KVCacheStep(Deferred):
    step: int
    token: str = Field(
        description="The token fed at this step (a prompt read in one pass: its last, whose "
        "row is shown)."
    )
    fed_tokens: int = Field(
        1, description="Tokens this step put into the cache: 1, or a prompt's length at step 0."
    )
    predicted: str = Field(description="The most likely next token.")
    keys: list[str] = Field(description="The cached keys the new query attends over.")
    rows: list[s.Matrix] = Field(
        description="Per layer of `layers`: each query head's new row (H x keys)."
    )
    cache_bytes: list[int] = Field(
        description="Per decoder layer: bytes of cached keys and values (one per key/value "
        "head: grouped-query attention caches fewer than it has query heads)."
    )
    max_abs_diff: float = Field(description="Cached against uncached logits at this step.")


class KVCacheResponse(BaseModel):
    model: str
    piece: str = Field(
        description="The text decoded: the first piece of a long text, or a decoder-only "
        "model's prompt."
    )
    output: list[str] = Field(
        description="What the decoder made of it (after <bos>), or the continuation fed: the "
        "one sent, else greedy decoding's."
    )
    output_text: str | None = Field(None, description="A continuation's tokens as text.")
    prompt_tokens: int | None = Field(
        None, description="A decoder-only model: the prompt's tokens, read in step 0's pass."
    )
    pieces: int = Field(description="How many pieces the text is decoded in (40 characters).")
    ended: bool = Field(
        description="The output ended with <eos> (a stop token) within the length limit."
    )
    layers: list[int] = Field(description="The decoder layers whose rows the steps carry.")
    query_heads: int
    kv_heads: int = Field(description="Key/value heads cached per layer.")
    steps: list[KVCacheStep]
    truncated: bool = Field(description="More steps than the limit: the first ones are shown.")


MAX_STEPS = 64
MAX_GENERATED = 16  # a prompt without a continuation: greedy steps decoded here


def kv_cache(ctx: LabContext, req: KVCacheRequest) -> KVCacheResponse:
    spec = ctx.spec("decoder.self")
    layers = list(range(spec.layers))
    if req.layer is not None:
        ctx.check_head(spec, req.layer, 0)
        layers = [req.layer]
    if ctx.runner.capabilities.generation:
        return causal(ctx, layers)
    return pieces(ctx, layers)


JSON_TOKEN = 16  # bytes of one key's token in the answer (a weight: BYTES_PER_ENTRY)


def check_size(ctx: LabContext, steps: int, keys: int, rows: int) -> None:
    """A 422 before any step is run where the answer (steps x keys, a row of weights per
    layer and head, the keys' tokens) would pass ATTNVIZ_MAX_RESPONSE_BYTES."""
    size = steps * keys * (rows * BYTES_PER_ENTRY["json"] + JSON_TOKEN)
    limit = ctx.inference.settings.max_response_bytes
    if size > limit:
        raise CannotServe(
            f"{steps} steps over up to {keys} keys, in {rows} rows each, make an answer of "
            f"about {size / 1e6:.0f} MB, over the {limit / 1e6:.0f} MB an answer may have "
            "(ATTNVIZ_MAX_RESPONSE_BYTES): ask for one layer (`layer`) or a shorter prompt",
        )


def cache_bytes(cache: DecoderCache) -> list[int]:
    """Per layer: the bytes of its cached self-attention keys and values."""
    return [
        sum(t.numel() * t.element_size() for kv in layer.values() for t in (kv.k, kv.v)
            if t is not None)
        for layer in cache.layers
    ]  # fmt: skip


def pieces(ctx: LabContext, layers: list[int]) -> KVCacheResponse:
    """An encoder-decoder: greedy decoding of the first piece, step by step through the cache."""
    model, cfg = ctx.model, ctx.config
    runner = stepwise(ctx.runner)
    vocab = runner.target_vocabulary()
    spec = ctx.spec("decoder.self")
    names = [spec.hook(i, "hook_weights") for i in layers]
    steps = []
    with torch.no_grad():
        parts = runner.decoded_pieces(ctx.result)
        first = parts[0]
        src, tokens = first.source, first.target_ids
        steps_total = len(tokens)
        tokens = tokens[:MAX_STEPS]
        check_size(ctx, steps=len(tokens), keys=len(tokens), rows=len(layers) * spec.query_heads)
        src_mask = padding_mask(src, cfg.pad_id)
        memory = model.encode(src, src_mask)
        cache = DecoderCache(cfg.decoder_layers)
        pad = torch.tensor([cfg.pad_id])
        for step, token in enumerate(tokens):
            fed = torch.tensor([tokens[: step + 1]])
            with hooked(model, names) as capture:
                hidden = model.decode(fed[:, -1:], memory, src_mask, cache=cache)
            cached = model.logits(hidden[:, -1])
            full = model.logits(model.decode(fed, memory, src_mask)[:, -1])
            best = int(cached.index_fill(-1, pad, float("-inf")).argmax())  # never <pad>
            steps.append(
                KVCacheStep(
                    step=step,
                    token=vocab[token],
                    predicted=vocab[best],
                    keys=[vocab[t] for t in tokens[: step + 1]],
                    rows=[encode(capture[n][0, :, 0], "json") for n in names],
                    cache_bytes=cache_bytes(cache),
                    max_abs_diff=float((cached - full).abs().max()),
                )
            )
    return KVCacheResponse(
        model=ctx.entry.id,
        piece="".join(ctx.result.raw("source")[: src.size(1)]),
        output=[vocab[t] for t in first.target_ids[1:]],  # after <bos>
        pieces=len(parts),
        ended=first.ended,
        layers=layers,
        steps=steps,
        truncated=steps_total > MAX_STEPS,
        query_heads=spec.query_heads,
        kv_heads=spec.kv_heads,
    )


def causal(ctx: LabContext, layers: list[int]) -> KVCacheResponse:
    """A decoder-only model: the prompt read into the cache in one pass (step 0: its last
    token's row), then each token of the continuation sent (or, without one, of greedy
    decoding) fed one at a time; every step's logits against one uncached pass over all."""
    model, runner = ctx.model, generating(ctx.runner)
    spec = ctx.spec("decoder.self")
    names = [spec.hook(i, "hook_weights") for i in layers]
    ids = ctx.result.source_ids
    prompt = ids[: len(ids) - len(ctx.continuation)]
    given = list(ctx.continuation)
    if not prompt:
        raise CannotServe("the prompt has no tokens")
    room = model.config.max_seq_len - len(prompt)
    limit = min(len(given) if given else MAX_GENERATED, MAX_STEPS, room)
    check_size(ctx, steps=limit + 1, keys=len(prompt) + limit, rows=len(layers) * spec.query_heads)
    shown = runner.target_vocabulary()
    fed, steps, ended = list(prompt), [], False
    cached_logits = []
    with torch.no_grad():
        cache = DecoderCache(model.config.decoder_layers)
        step_input = torch.tensor([prompt])
        for step in range(limit + 1):
            with hooked(model, names) as capture:
                hidden = model.decode(step_input, cache=cache)
            logits = model.logits(hidden[:, -1])[0]
            cached_logits.append(logits)
            best = int(logits.argmax())
            steps.append(
                KVCacheStep(
                    step=step,
                    token=runner.shown(fed)[-1],  # (a character split between tokens named)
                    predicted=shown[best],
                    keys=runner.shown(fed),
                    rows=[],
                    cache_bytes=cache_bytes(cache),
                    max_abs_diff=0.0,  # below, against the uncached pass
                    fed_tokens=len(prompt) if step == 0 else 1,
                )
            )
            rows = [capture[n][0, :, -1] for n in names]
            if len({r.shape for r in rows}) == 1:  # one array, written a few rows a call
                steps[-1]._floats["rows"] = torch.stack(rows).double().cpu().numpy()
            else:  # (a sliding-window layer's row holds fewer keys)
                steps[-1].rows = [cast(s.Matrix, encode(r, "json")) for r in rows]
            if step == limit or (not given and best in runner.stop_ids):
                # ended on a stop token: the one predicted last, or the continuation's last
                ended = (given[limit - 1] if given and limit else best) in runner.stop_ids
                break
            token = given[step] if given else best
            fed.append(token)
            step_input = torch.tensor([[token]])
        # uncached: one pass over every token fed (causal: position i sees only 0..i)
        full_hidden = model.decode(torch.tensor([fed]))
        at = torch.arange(len(prompt) - 1, len(fed))
        full = model.logits(full_hidden[0, at])
        for made, cached in zip(steps, cached_logits, strict=True):
            made.max_abs_diff = float((cached - full[made.step]).abs().max())
    generated = fed[len(prompt) :]
    return KVCacheResponse(
        model=ctx.entry.id,
        piece=ctx.result.text,
        output=runner.shown(fed)[len(prompt) :],
        pieces=1,
        ended=ended,
        layers=layers,
        steps=steps,
        truncated=len(given) > limit,
        query_heads=spec.query_heads,
        kv_heads=spec.kv_heads,
        output_text=runner.decode(generated),
        prompt_tokens=len(prompt),
    )
