"""From a request to a capture to a payload: model runs (bounded and cached), summaries,
matrices in the requested encoding, positional tables, exports."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from fastapi import HTTPException

from model.analysis import entropy_bits
from model.positional import sinusoidal_table
from model.pronounce.pronouncer import Transcription
from model.runtime import release_free_memory

from .schemas import INVISIBLE, AttentionRequest, Block, HeadSummary, TypedArray
from .settings import Settings
from .zoo import ATTENTION_TYPES, ModelEntry, Zoo

HOOK_OF_KIND = {
    "weights": "hook_pattern",
    "scores": "hook_scores",
    "mask": "hook_mask",
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
}
# bytes each matrix entry takes in the response, for the size check before building it
BYTES_PER_ENTRY = {"json": 10, "u1": 4 / 3, "f2": 8 / 3, "f4": 16 / 3}
_INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]+")


def reading_form(text: str) -> str:
    """The text a model reads: in Unicode NFC (é typed as e + U+0301 reads as é), without
    invisible characters (a zero-width joiner or direction mark pasted into a word would
    otherwise be an unknown token that changes its transcription)."""
    return _INVISIBLE_CHARS.sub("", unicodedata.normalize("NFC", text))


class RunLimiter:
    """At most `concurrent` model runs at once and `queued` waiting; past that, 503."""

    def __init__(self, concurrent: int, queued: int) -> None:
        self._running = threading.Semaphore(concurrent)
        self._lock = threading.Lock()
        self._admitted = 0
        self._capacity = concurrent + queued

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._lock:
            if self._admitted >= self._capacity:
                raise HTTPException(
                    503,
                    "the server is busy running other requests; retry shortly",
                    headers={"Retry-After": "1"},
                )
            self._admitted += 1
        try:
            with self._running:
                yield
        finally:
            with self._lock:
                self._admitted -= 1


class CaptureCache:
    """Least-recently-used transcriptions with their captures, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[Transcription, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> Transcription | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: Transcription) -> None:
        size = sum(t.nbytes for t in value.capture.values()) if value.capture else 0
        if size > self.max_bytes:
            return
        evicted = []
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (old, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
                evicted.append(old)
        if evicted:
            del evicted, old  # the last references, unless a request still reads them
            release_free_memory()


class Inference:
    def __init__(self, zoo: Zoo, settings: Settings) -> None:
        self.zoo = zoo
        self.settings = settings
        self.limiter = RunLimiter(settings.max_concurrent_runs, settings.max_queued_runs)
        self.cache = CaptureCache(settings.cache_bytes)

    def entry(self, model_id: str | None) -> ModelEntry:
        model_id = self.zoo.default if model_id is None else model_id
        entry = self.zoo.models.get(model_id)
        if entry is None:
            known = ", ".join(self.zoo.ids())
            raise HTTPException(404, f"unknown model {model_id!r}; the models are: {known}")
        return entry

    def run(self, entry: ModelEntry, text: str) -> Transcription:
        """The transcription of `text` with every hook point captured, from the cache if
        this (model, text) was run before."""
        limit = self.settings.max_text_chars
        if len(text) > limit:
            raise HTTPException(
                422, f"text has {len(text)} characters; the limit is {limit}: shorten it"
            )
        text = reading_form(text)
        if not text.strip():
            raise HTTPException(422, "text is empty: type a sentence")
        key = hashlib.sha256(f"{entry.id}\0{text}".encode()).hexdigest()
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        with self.limiter.slot():
            try:
                result = entry.runner.transcribe(text)
            except ValueError as exc:  # nothing left to read once normalised
                raise HTTPException(422, f"text cannot be read: {exc}") from exc
        self.cache.put(key, result)
        return result


def tokens_of(result: Transcription, attention_type: str) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of an attention type."""
    src, tgt = result.source_tokens, result.decoder_tokens
    return {
        "encoder.self": (src, src),
        "decoder.self": (tgt, tgt),
        "decoder.cross": (tgt, src),
    }[attention_type]


def hook_name(attention_type: str, layer: int, hook: str) -> str:
    stack, module = ATTENTION_TYPES[attention_type]
    return f"{stack}.{layer}.{module}.{hook}"


def summaries(entry: ModelEntry, result: Transcription) -> list[HeadSummary]:
    out = []
    for attention_type in entry.attention_types():
        for layer in range(entry.layers(attention_type)):
            pattern = result.capture[hook_name(attention_type, layer, "hook_pattern")][0]
            entropy = entropy_bits(pattern).mean(-1)  # (H,)
            peak = pattern.max(-1).values.mean(-1)
            for head in range(pattern.size(0)):
                out.append(
                    HeadSummary(
                        type=attention_type,
                        layer=layer,
                        head=head,
                        entropy=round(float(entropy[head]), 6),
                        max_weight=round(float(peak[head]), 6),
                    )
                )
    return out


def _check_choice(name: str, wanted: list[int] | None, available: int) -> list[int]:
    if wanted is None:
        return list(range(available))
    bad = sorted({i for i in wanted if i >= available})
    if bad:
        raise HTTPException(
            422, f"{name} {bad} out of range: this model's {name} are 0..{available - 1}"
        )
    return list(dict.fromkeys(wanted))


def attention_items(
    entry: ModelEntry, result: Transcription, req: AttentionRequest, max_bytes: int
) -> list[Block]:
    """The requested matrices, a block per type, layer and kind, checked against the model
    and the response size limit."""
    types = list(dict.fromkeys(req.types or entry.attention_types()))
    unknown = sorted(set(types) - set(entry.attention_types()))
    if unknown:
        raise HTTPException(
            422, f"{entry.id} has no attention of type {unknown}: it has {entry.attention_types()}"
        )
    if req.encoding == "u1":
        bad = sorted(set(req.kinds) - {"weights", "mask"})
        if bad:
            raise HTTPException(
                422, f"u1 holds values in [0, 1] only (weights, mask); ask f2 or f4 for {bad}"
            )
    reshaped = req.granularity == "word" or req.hide_special
    if reshaped and set(req.kinds) != {"weights"}:
        raise HTTPException(422, "granularity=word and hide_special apply to weights only")
    if req.granularity == "word" and result.source_words is None:
        raise HTTPException(422, f"{entry.id} has no word pieces: ask granularity=token")
    heads = _check_choice("heads", req.heads, entry.config.n_heads)
    kinds = list(dict.fromkeys(req.kinds))
    plan = []
    for attention_type in types:
        layers = _check_choice("layers", req.layers, entry.layers(attention_type))
        plan += [(attention_type, layer) for layer in layers]

    size = 0.0
    d_head = entry.config.head_dim
    for attention_type, _ in plan:
        rows, columns = tokens_of(result, attention_type)
        per_kind = {"q": len(rows) * d_head, "k": len(columns) * d_head}
        per_kind["v"] = per_kind["k"]
        for kind in kinds:
            entries = per_kind.get(kind, len(rows) * len(columns))
            stacked = 1 if kind == "mask" else len(heads)
            # the data, and each block's fields with its two token lists
            size += stacked * entries * BYTES_PER_ENTRY[req.encoding]
            size += 200 + 12 * (len(rows) + len(columns))
    if size > max_bytes:
        raise HTTPException(
            422,
            f"the response would take about {size / 1e6:.1f} MB, over the limit of "
            f"{max_bytes / 1e6:.1f} MB: ask for fewer types, layers, heads or kinds, "
            "or use encoding u1 or f2",
        )

    blocks = []
    index = torch.tensor(heads)
    for attention_type, layer in plan:
        queries, keys = tokens_of(result, attention_type)
        for kind in kinds:
            tensor = result.capture[hook_name(attention_type, layer, HOOK_OF_KIND[kind])][0]
            stack = tensor if kind == "mask" else tensor.index_select(0, index)
            rows = keys if kind in ("k", "v") else queries
            columns = None if kind in ("q", "k", "v") else keys
            if reshaped and attention_type == "encoder.self":
                stack, rows = regroup(stack, rows, result.source_words, req)
                columns = rows
            blocks.append(
                Block(
                    type=attention_type,
                    layer=layer,
                    kind=kind,
                    heads=None if kind == "mask" else heads,
                    rows=rows,
                    columns=columns,
                    shape=list(stack.shape),
                    data=encode(stack, req.encoding),
                )
            )
    return blocks


SPECIAL_TOKENS = frozenset({"[CLS]", "[SEP]"})


def regroup(
    stack: torch.Tensor, tokens: list[str], words: list[int | None] | None, req: AttentionRequest
) -> tuple[torch.Tensor, list[str]]:
    """Self-attention weights (heads, T, T) without [CLS]/[SEP] (rows renormalised) and/or
    by word: a word's row is the mean of its pieces' rows, its column the sum of theirs."""
    keep = [i for i, t in enumerate(tokens) if not (req.hide_special and t in SPECIAL_TOKENS)]
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


def encode(stack: torch.Tensor, encoding: str) -> list | TypedArray:
    """Nested lists (rounded to 6 decimals) or a plotly.js typed array, row-major."""
    if encoding == "json":
        return np.round(stack.double().numpy(), 6).tolist()
    if encoding == "u1":
        data = (stack.float() * 255).round_().clamp_(0, 255).to(torch.uint8).numpy()
    else:
        data = stack.float().numpy().astype("<f2" if encoding == "f2" else "<f4")
    shape = ",".join(str(n) for n in stack.shape)
    return TypedArray(dtype=encoding, bdata=base64.b64encode(data.tobytes()).decode(), shape=shape)


def positional_table(entry: ModelEntry, positions: int, dims: int) -> dict:
    """The table the model adds (or its rotary angles), and the positions' cosine similarity."""
    cfg = entry.config
    if positions > cfg.max_seq_len:
        raise HTTPException(
            422, f"positions must be at most {cfg.max_seq_len}, this model's max_seq_len"
        )
    model = entry.runner.model
    stack = model.encoder if cfg.has_encoder else model.decoder
    if cfg.positional == "sinusoidal":
        full = sinusoidal_table(positions, cfg.d_model)
        formula = "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)); PE(pos, 2i+1) = cos(...)"
    elif cfg.positional == "learned":
        full = stack.pos.table(0, positions).detach()
        formula = "a trained vector per position (nn.Embedding(max_seq_len, d_model))"
    elif cfg.positional == "rotary":
        full = stack.pos.angles(0, positions)
        formula = "angle(pos, i) = pos * theta^(-2i/d_head); q and k are rotated by it"
    else:
        full = torch.zeros(positions, 0)
        formula = "no positional encoding: attention does not see order"
    if dims > max(1, full.size(1)) and full.size(1):
        raise HTTPException(422, f"dims must be at most {full.size(1)} for this model")
    unit = torch.nn.functional.normalize(full, dim=-1) if full.size(1) else full
    similarity = unit @ unit.T if full.size(1) else torch.zeros(positions, positions)
    return {
        "kind": cfg.positional,
        "formula": formula,
        "positions": positions,
        "dims": min(dims, full.size(1)),
        "table": encode(full[:, :dims], "json"),
        "similarity": encode(similarity, "json"),
    }


def export_npz(entry: ModelEntry, text: str, result: Transcription) -> tuple[bytes, str]:
    """Every captured tensor as float32 in an .npz, and its file name."""
    arrays = {name: t.float().numpy() for name, t in result.capture.items()}
    arrays["source_tokens"] = np.array(result.source_tokens, dtype=str)
    arrays["target_tokens"] = np.array(result.decoder_tokens, dtype=str)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return buffer.getvalue(), f"{entry.id}-{digest}.npz"
