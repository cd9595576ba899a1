"""Generation through the KV cache: how a causal model's next token is chosen (greedy, or
sampled with temperature, top-k, top-p and a seed) and what each generated step reports
(the probability of its token, the top alternatives and, if asked, every head's new
attention row). `CausalLM.generate` runs it on its model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention import fused
from ..hooks import hooked
from ..long.reading import newest_row
from ..transformer import DecoderCache, Transformer

if TYPE_CHECKING:
    from ..hf.model import HFTransformer

TOP = 10  # alternatives reported per generated step


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy (temperature 0), or sampled from the
    distribution at `temperature`, cut to its `top_k` most likely tokens (0: all) and to
    the smallest set whose probability reaches `top_p` (1: all), with a `seed`."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Step:
    """One generated token: its id, its probability and the top alternatives at that step
    (of the model's distribution, before any sampling cut), and the new attention rows of
    every layer (name -> (1, H, 1, keys)) where they were captured."""

    index: int  # position of the token in the whole sequence (prompt + generated)
    token_id: int
    probability: float
    top: list[tuple[int, float]]  # (id, probability), most likely first
    rows: dict[str, Tensor] = field(default_factory=dict, repr=False)


GREEDY = Sampling()


def choose(logits: Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """The next token from one step's logits (V,)."""
    if sampling.greedy:
        return int(logits.argmax())
    # from the likeliest logit down, in float64: a temperature as small as 5e-324 sends the
    # others to -inf and leaves the likeliest at 0, never 0/0 (NaN)
    scaled = (logits.double() - logits.max()) / sampling.temperature
    if 0 < sampling.top_k < scaled.numel():
        kth = scaled.topk(sampling.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = probs.sort(descending=True)
        before = ordered.cumsum(0) - ordered  # mass of the more likely tokens
        drop = before >= sampling.top_p
        drop[0] = False  # the likeliest always stays (a top_p that rounds to 0 in float32)
        ordered = ordered.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def generate(
    model: Transformer | HFTransformer,
    stop_ids: frozenset[int],
    prompt: list[int],
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    rows: bool = False,
    stop: bool = True,
) -> Iterator[Step]:
    """Continue a prompt token by token through the model's KV cache, until one of
    `stop_ids` (unless `stop` is False: benchmarks run a fixed length) or
    `max_new_tokens`; with `rows`, each step carries every layer's new attention row."""
    if not prompt:
        raise ValueError("the prompt has no tokens")
    cfg = model.config
    generator = None
    if not sampling.greedy:
        generator = torch.Generator().manual_seed(sampling.seed)
    cache = DecoderCache(cfg.decoder_layers)
    prefixes = [f"decoder.{i}.self_attn" for i in range(cfg.decoder_layers)]
    names = [f"{p}.{point}" for p in prefixes for point in ("hook_q", "hook_k")]
    step_input = torch.tensor([prompt])
    position = len(prompt)
    for _ in range(max_new_tokens):
        if position >= cfg.max_seq_len:
            break
        # fused attention: a long prompt's pass holds no (T, T) matrix; the rows asked
        # for are the newest query's, recomputed from its query and the keys
        with fused(), hooked(model, names if rows else []) as capture:
            hidden = model.decode(step_input, cache=cache)
        logits = model.logits(hidden[:, -1])[0]
        probs = torch.softmax(logits, dim=-1)
        token = choose(logits, sampling, generator)
        best = probs.topk(TOP)
        top = [(int(i), float(p)) for p, i in zip(best.values, best.indices, strict=True)]
        new_rows = {}
        for p in prefixes if rows else []:
            row = newest_row(capture, p, cfg, cache.noted.get(p))
            # a sliding-window cache (transformers') keeps the window's keys only: the
            # keys it dropped have weight 0
            dropped = cache.length - row.size(-1)
            new_rows[f"{p}.hook_weights"] = F.pad(row, (dropped, 0)) if dropped > 0 else row
        yield Step(position, token, float(probs[token]), top, new_rows)
        if stop and token in stop_ids:
            break
        step_input = torch.tensor([[token]])
        position += 1
