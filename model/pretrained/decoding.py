"""Generation through the KV cache: how a causal model's next token is chosen (greedy, or
sampled with temperature, top-k, top-p and a seed) and what each generated step reports
(the probability of its token, the top alternatives and, if asked, every head's new
attention row). `CausalLM.generate` runs it on its model."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention import fused
from ..hooks import Capture, hooked
from ..long.capture import LongCapture, long_names
from ..long.reading import LOGIT_CHUNK, newest_row
from ..served import DecoderCache, ServedModel
from ..transformer import Transformer

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

# the hook points of a position's own (its query, embedding, output, rotary angles): each
# step adds its new token's; its keys and values are the cache's, every position's
_OWN = ("hook_q", "hook_embed", "hook_out", "hook_pos")
# each tensor's token axis
_TOKEN_AXIS = {"hook_q": 2, "hook_embed": 1, "hook_out": 1, "hook_pos": 0}


class Recording:
    """A generation kept as the long run of its whole sequence (prompt and generated
    tokens), so that the sequence is not read again to be shown: the prompt pass's queries,
    keys and values, each step's new query, each position's predicted token and the
    logits from `last_from` on; `finish` feeds the last token and gives the run's capture.
    Our model code's (a transformers model's long pass is its own)."""

    def __init__(self, last_from: int) -> None:
        self.last_from = last_from
        self.cache: DecoderCache | None = None
        self.ids: list[int] = []  # the tokens fed so far
        self.passes: list[Capture] = []
        self.predicted: list[int] = []
        self.last: list[Tensor] = []  # logits rows from last_from on
        self.next: int | None = None  # the token made last, not fed yet

    @staticmethod
    def wanted(name: str) -> bool:
        """What a pass records: its new tokens' own tensors (`finish` takes the keys and
        values from the cache, whole)."""
        return long_names(name) and name.endswith(_OWN)

    def keep(self, model: ServedModel, fed: list[int], capture: Capture, hidden: Tensor) -> None:
        """One pass's recorded tensors, and its positions' predictions (a chunk of logits at
        a time: never all of a long prompt's at once)."""
        start = len(self.ids)
        self.ids += fed
        self.passes.append(Capture())
        for name in capture:
            if self.wanted(name):
                self.passes[-1].add(name, capture[name])
        for i in range(0, hidden.size(1), LOGIT_CHUNK):
            logits = model.logits(hidden[:, i : i + LOGIT_CHUNK])[0]
            self.predicted += logits.argmax(-1).tolist()
            first = max(0, self.last_from - start - i)
            if first < logits.size(0):
                self.last.append(logits[first:])

    @torch.no_grad()
    def finish(self, model: Transformer) -> tuple[LongCapture, list[int], Tensor] | None:
        """(capture, predicted, logits from last_from) of the whole sequence, the last
        token fed through the cache; None where the context has no room for it."""
        if self.cache is None or self.next is None or len(self.ids) >= model.config.max_seq_len:
            return None
        with fused(), hooked(model, long_names) as capture:
            hidden = model.decode(torch.tensor([[self.next]]), cache=self.cache)
        self.keep(model, [self.next], capture, hidden)
        self.next, self.cache = None, None  # (finished once)
        whole = Capture()
        for name in capture:
            point = name.rpartition(".")[2]
            if point in _TOKEN_AXIS:  # each pass's new positions, in order
                parts = [p[name] for p in self.passes if name in p]
                whole.add(name, torch.cat(parts, dim=_TOKEN_AXIS[point]))
            else:  # the last pass saw every position's (the cache's keys and values)
                whole.add(name, capture[name])
        ids = torch.tensor([self.ids])
        return LongCapture(whole, model.mask_rules(None, ids)), self.predicted, torch.cat(self.last)


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
    model: ServedModel,
    stop_ids: frozenset[int],
    prompt: list[int],
    max_new_tokens: int,
    sampling: Sampling = GREEDY,
    rows: bool = False,
    stop: bool = True,
    record: Recording | None = None,
    inputs: Mapping[str, Tensor] | None = None,
) -> Iterator[Step]:
    """Continue a prompt token by token through the model's KV cache, until one of
    `stop_ids` (unless `stop` is False: benchmarks run a fixed length) or
    `max_new_tokens`; with `rows`, each step carries every layer's new attention row;
    with `record`, the passes are kept as the sequence's run (`Recording`)."""
    if not prompt:
        raise ValueError("the prompt has no tokens")
    cfg = model.config
    generator = None
    if not sampling.greedy:
        generator = torch.Generator().manual_seed(sampling.seed)
    cache = DecoderCache(cfg.decoder_layers)
    cache.inputs = dict(inputs or {})  # (read by the prompt's pass: model/hf/model.py)
    if record is not None:
        if not model.records_generation:
            raise ValueError("a generation is recorded on our model code only")
        record.cache = cache
    prefixes = [f"decoder.{i}.self_attn" for i in range(cfg.decoder_layers)]
    names = [f"{p}.{point}" for p in prefixes for point in ("hook_q", "hook_k")]
    step_input = torch.tensor([prompt])
    position = len(prompt)
    for _ in range(max_new_tokens):
        if position >= cfg.max_seq_len:
            break
        # fused attention: a long prompt's pass holds no (T, T) matrix; the rows asked
        # for are the newest query's, recomputed from its query and the keys
        wanted: list[str] | Callable[[str], bool] = names if rows else []
        if record is not None:
            wanted = lambda name: (rows and name in names) or Recording.wanted(name)  # noqa: E731
        with fused(), hooked(model, wanted) as capture:
            hidden = model.decode(step_input, cache=cache)
        if record is not None:
            record.keep(model, step_input[0].tolist(), capture, hidden)
        logits = model.logits(hidden[:, -1])[0]
        probs = torch.softmax(logits, dim=-1)
        token = choose(logits, sampling, generator)
        best = probs.topk(min(TOP, probs.numel()))  # (a vocabulary may be smaller)
        top = [(int(i), float(p)) for p, i in zip(best.values, best.indices, strict=True)]
        new_rows = {}
        for p in prefixes if rows else []:
            row = newest_row(capture, p, cfg, cache.noted.get(p))
            # a sliding-window cache (transformers') keeps the window's keys only: the
            # keys it dropped have weight 0
            dropped = cache.length - row.size(-1)
            new_rows[f"{p}.hook_weights"] = F.pad(row, (dropped, 0)) if dropped > 0 else row
        if record is not None:
            record.next = token
        yield Step(position, token, float(probs[token]), top, new_rows)
        if stop and token in stop_ids:
            break
        step_input = torch.tensor([[token]])
        position += 1
