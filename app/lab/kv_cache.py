"""The KV cache step by step: each decoding step's new query row over the cached keys, the
cache's size per layer, and cached against uncached logits."""

from __future__ import annotations

import torch

from model.hooks import hooked
from model.masks import padding_mask
from model.transformer import DecoderCache

from ..service import encode
from . import schemas as s
from .context import LabContext

MAX_STEPS = 64


def kv_cache(ctx: LabContext, req: s.TextRequest) -> s.KVCacheResponse:
    """Greedy decoding of the first piece, step by step through the cache."""
    model, cfg = ctx.model, ctx.config
    vocab = ctx.runner.target_vocabulary()
    spec = ctx.spec("decoder.self")
    names = [spec.hook(i, "hook_weights") for i in range(spec.layers)]
    steps = []
    with torch.no_grad():
        parts = ctx.runner.decoded_pieces(ctx.result)
        first = parts[0]
        src, tokens = first.source, first.target_ids
        steps_total = len(tokens)
        tokens = tokens[:MAX_STEPS]
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
            sizes = [
                sum(t.numel() * t.element_size()
                    for kv in layer.values() for t in (kv.k, kv.v) if t is not None)
                for layer in cache.layers
            ]  # fmt: skip
            best = int(cached.index_fill(-1, pad, float("-inf")).argmax())  # never <pad>
            steps.append(
                s.KVCacheStep(
                    step=step,
                    token=vocab[token],
                    predicted=vocab[best],
                    keys=[vocab[t] for t in tokens[: step + 1]],
                    rows=[encode(capture[n][0, :, 0], "json") for n in names],
                    cache_bytes=sizes,
                    max_abs_diff=float((cached - full).abs().max()),
                )
            )
    return s.KVCacheResponse(
        model=ctx.entry.id,
        piece="".join(ctx.result.source_tokens[: src.size(1)]),
        output=[vocab[t] for t in first.target_ids[1:]],  # after <bos>
        pieces=len(parts),
        ended=first.ended,
        steps=steps,
        truncated=steps_total > MAX_STEPS,
    )
