"""From a request to a capture to a payload: model runs (bounded and cached), summaries,
matrices in the requested encoding, positional tables, exports."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import hashlib
import io
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch
from fastapi import HTTPException

from model.analysis import focus, head_roles
from model.positional import NO_POSITIONS_FORMULA
from model.runner import AttentionSpec, RunResult
from model.runtime import release_free_memory

from .schemas import INVISIBLE, AttentionRequest, Block, HeadSummary, TypedArray
from .settings import Settings
from .zoo import ModelEntry, Zoo

HOOK_OF_KIND = {
    "weights": "hook_weights",
    "scores": "hook_scores",
    "mask": "hook_mask",
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
}
# bytes each matrix entry takes in the response, for the size check before building it
BYTES_PER_ENTRY = {"json": 10, "u1": 4 / 3, "f2": 8 / 3, "f4": 16 / 3}
T = TypeVar("T")
_INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]+")


def reading_form(text: str) -> str:
    """The text a model reads: in Unicode NFC (é typed as e + U+0301 reads as é), without
    invisible characters (a zero-width joiner or direction mark pasted into a word would
    otherwise be an unknown token that changes its transcription)."""
    return _INVISIBLE_CHARS.sub("", unicodedata.normalize("NFC", text))


def read_text(text: str, limit: int, field: str = "text") -> str:
    """A request's text as a model reads it (`reading_form`), or a 422 that says what to
    change: over the character limit, or nothing left to read."""
    if len(text) > limit:
        raise HTTPException(
            422, f"{field} has {len(text)} characters; the limit is {limit}: shorten it"
        )
    text = reading_form(text)
    if not text.strip():
        raise HTTPException(422, f"{field} is empty: type a sentence")
    return text


class RunLimiter:
    """At most `concurrent` model runs at once and `queued` waiting; past that, 503."""

    def __init__(self, concurrent: int, queued: int) -> None:
        self._running = threading.Semaphore(concurrent)
        self._lock = threading.Lock()
        self._admitted = 0
        self._capacity = concurrent + queued

    @contextmanager
    def admission(self) -> Iterator[None]:
        """Counted among the admitted (a 503 past capacity), without waiting for a slot."""
        with self._lock:
            if self._admitted >= self._capacity:
                raise HTTPException(
                    503,
                    "the server is busy running other requests; retry shortly",
                    headers={"Retry-After": "1"},
                )
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self.admission(), self._running:
            yield


class RunCache:
    """Least-recently-used runs with their captures, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[RunResult, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> RunResult | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: RunResult) -> None:
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


def tensor_threads(settings: Settings) -> ThreadPoolExecutor:
    """The threads every route's tensor work runs on: one per concurrent run, kept for
    the server's life.

    Each thread that runs torch gets an OpenMP team of its own (a worker per extra torch
    thread), and where the teams' threads outnumber the cores, libgomp stops its workers
    spinning between parallel regions: every region then waits for sleeping workers to
    wake. On 2 cores, a second team made `pronounce`'s run of 126 characters take 140 ms
    instead of 78 (measured); so the zoo loads on these threads too, and the event loop
    and the request thread pool never run torch."""
    return ThreadPoolExecutor(settings.concurrent_runs(), thread_name_prefix="attnviz-torch")


class Inference:
    def __init__(
        self, zoo: Zoo, settings: Settings, threads: ThreadPoolExecutor | None = None
    ) -> None:
        self.zoo = zoo
        self.settings = settings
        self.threads = threads or tensor_threads(settings)
        runs = settings.concurrent_runs()
        self.limiter = RunLimiter(runs, settings.max_queued_runs)
        # requests on or waiting for the tensor threads, bounded as the runs are
        self._admitted = RunLimiter(runs + settings.max_queued_runs, queued=0)
        self.runs = RunCache(settings.cache_bytes)
        # runs under way by key: a request for the same (model, text) waits for that run
        # instead of running the model again (the page asks for a text's summary and its
        # first head at once)
        self._running: dict[str, Future[RunResult]] = {}
        self._running_lock = threading.Lock()

    async def on_tensor_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on a tensor thread (in this request's context), or a 503
        when as many requests as runs may queue are already there."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        with self._admitted.admission():
            return await asyncio.get_running_loop().run_in_executor(self.threads, call)

    def entry(self, model_id: str | None) -> ModelEntry:
        model_id = self.zoo.default if model_id is None else model_id
        entry = self.zoo.models.get(model_id)
        if entry is None:
            known = ", ".join(self.zoo.ids())
            raise HTTPException(404, f"unknown model {model_id!r}; the models are: {known}")
        return entry

    def run(self, entry: ModelEntry, text: str) -> RunResult:
        """The run of `text` with every hook point captured, from the run cache if this
        (model, text) was run before."""
        text = read_text(text, self.settings.max_text_chars)
        key = hashlib.sha256(f"{entry.id}\0{text}".encode()).hexdigest()
        with self._running_lock:
            cached = self.runs.get(key)
            if cached is not None:
                return cached
            running = self._running.get(key)
            if running is None:
                self._running[key] = future = Future()
        if running is not None:
            return running.result()  # that run's result, or its error (503, 422)
        try:
            with self.limiter.slot():
                try:
                    result = entry.runner.run(text)
                except ValueError as exc:  # nothing left to read once normalised
                    raise HTTPException(422, f"text cannot be read: {exc}") from exc
            self.runs.put(key, result)
            future.set_result(result)
            return result
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._running_lock:
                del self._running[key]


def tokens_of(result: RunResult, spec: AttentionSpec) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of an attention type."""
    return result.tokens(spec.rows), result.tokens(spec.columns)


def summaries(entry: ModelEntry, result: RunResult) -> list[HeadSummary]:
    out = []
    for spec in entry.specs.values():
        _, keys = tokens_of(result, spec)
        special = [i for i, t in enumerate(keys) if t in entry.runner.special_tokens]
        for layer in range(spec.layers):
            weights = result.capture[spec.hook(layer, "hook_weights")][0].float()
            entropy, peak = focus(weights)  # (H,)
            roles = head_roles(weights, spec.self_attention, special)
            for head in range(entropy.size(0)):
                out.append(
                    HeadSummary(
                        type=spec.type,
                        layer=layer,
                        head=head,
                        entropy=round(float(entropy[head]), 6),
                        max_weight=round(float(peak[head]), 6),
                        role=roles[head],
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


def attention_blocks(
    entry: ModelEntry, result: RunResult, req: AttentionRequest, max_bytes: int
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
    kinds = list(dict.fromkeys(req.kinds))
    plan = []
    for attention_type in types:
        spec = entry.specs[attention_type]
        heads = _check_choice("heads", req.heads, spec.query_heads)
        layers = _check_choice("layers", req.layers, spec.layers)
        plan += [(spec, layer, heads) for layer in layers]

    size = 0.0
    for spec, _, heads in plan:
        rows, columns = tokens_of(result, spec)
        per_kind = {"q": len(rows) * spec.head_dim, "k": len(columns) * spec.head_dim}
        per_kind["v"] = per_kind["k"]
        for kind in kinds:
            entries = per_kind.get(kind, len(rows) * len(columns))
            stacked = 1 if kind == "mask" else len(heads)
            # the data, and each block's fields with its two token lists
            size += stacked * entries * BYTES_PER_ENTRY[req.encoding]
            size += 200 + 12 * (len(rows) + len(columns))
    if req.legacy_items:
        size *= 2  # the blocks again under their deprecated name
    if size > max_bytes:
        copy = (
            " or send legacy_items: false (the blocks are sent twice)" if req.legacy_items else ""
        )
        raise HTTPException(
            422,
            f"the response would take about {_bytes(size)}, over the limit of "
            f"{_bytes(max_bytes)}: ask for fewer types, layers, heads or kinds, "
            f"or use encoding u1 or f2{copy}",
        )

    blocks = []
    for spec, layer, heads in plan:
        queries, keys = tokens_of(result, spec)
        for kind in kinds:
            tensor = result.capture[spec.hook(layer, HOOK_OF_KIND[kind])][0]
            every_head = kind == "mask" or heads == list(range(tensor.size(0)))
            stack = tensor if every_head else tensor.index_select(0, torch.tensor(heads))
            rows = keys if kind in ("k", "v") else queries
            columns = None if kind in ("q", "k", "v") else keys
            steps = spec.rows == "target" and kind not in ("k", "v")
            predicted = result.predicted_tokens if steps and result.predicted_tokens else None
            if reshaped and spec.type == "encoder.self":
                words = result.source_words
                stack, rows = regroup(stack, rows, words, entry.runner.special_tokens, req)
                columns = rows
            blocks.append(
                Block(
                    type=spec.type,
                    layer=layer,
                    kind=kind,
                    heads=None if kind == "mask" else heads,
                    rows=rows,
                    predicted=predicted,
                    columns=columns,
                    shape=list(stack.shape),
                    data=encode(stack, req.encoding),
                )
            )
    return blocks


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


def encode(stack: torch.Tensor, encoding: str) -> list | TypedArray:
    """Nested lists (rounded to 6 decimals) or a plotly.js typed array, row-major."""
    if encoding == "json":
        return np.round(stack.double().numpy(), 6).tolist()
    if encoding == "u1":
        data = (stack.float() * 255).round_().clamp_(0, 255).to(torch.uint8).numpy()
    else:
        data = stack.float().numpy().astype("<f2" if encoding == "f2" else "<f4", copy=False)
    shape = ",".join(str(n) for n in stack.shape)
    bdata = base64.b64encode(memoryview(np.ascontiguousarray(data)).cast("B")).decode("ascii")
    return TypedArray(dtype=encoding, bdata=bdata, shape=shape)


def positional_table(entry: ModelEntry, positions: int, dims: int) -> dict:
    """The table the model adds (or its rotary angles), and the positions' cosine similarity."""
    cfg = entry.config
    if positions > cfg.max_seq_len:
        raise HTTPException(
            422, f"positions must be at most {cfg.max_seq_len}, this model's max_seq_len"
        )
    model = entry.runner.model
    encoding = (model.encoder if cfg.has_encoder else model.decoder).pos
    if encoding is None:
        full, formula = torch.zeros(positions, 0), NO_POSITIONS_FORMULA
    else:
        full, formula = encoding.encoding(0, positions).detach(), encoding.formula
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


def export_npz(entry: ModelEntry, text: str, result: RunResult) -> tuple[bytes, str]:
    """Every captured tensor as float32 in an .npz, and its file name."""
    arrays = {name: t.float().numpy() for name, t in result.capture.items()}
    arrays["source_tokens"] = np.array(result.source_tokens, dtype=str)
    arrays["target_tokens"] = np.array(result.target_tokens, dtype=str)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return buffer.getvalue(), f"{entry.id}-{digest}.npz"
