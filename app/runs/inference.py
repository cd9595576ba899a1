"""Model runs: the text a model reads, a run's price (`work_units`), the run cache, and
`Inference`, which ties them to the zoo and the tensor threads (runs/scheduling.py)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import logging
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from attnviz.model.config import ModelConfig
from attnviz.model.lean import LeanCapture, capture_bytes
from attnviz.model.long import LongCapture
from attnviz.model.runner import RunResult, generating
from attnviz.model.runtime import release_free_memory

from ..catalog.zoo import ModelEntry, Zoo
from ..errors import CannotServe, NotFound
from ..payloads.text import INVISIBLE
from ..request import CLIENT, charge
from ..settings import Settings
from .progress import ProgressBoard, Stops
from .scheduling import RunLimiter, tensor_threads

log = logging.getLogger(__name__)

T = TypeVar("T")
_INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]+")


# Unicode's stream-safe format (UAX #15, section 13): past 30 combining marks in a row a
# combining grapheme joiner (U+034F) is put in, so that NFC's reordering of a run, quadratic
# in its length, never takes more than 30 marks at once (4,000 marks in one run took 17 ms
# of the GIL per line: an upload of 500 such lines held /healthz past 100 ms).
_MARKS = "".join(re.escape(chr(c)) for c in range(0x110000) if unicodedata.combining(chr(c)))
_LONG_RUN = re.compile(f"([{_MARKS}]{{30}})(?=[{_MARKS}])")
_JOINER = "\u034f"


def reading_form(text: str) -> str:
    """The text a model reads: in Unicode NFC (é typed as e + U+0301 reads as é), without
    invisible characters (a zero-width joiner or direction mark pasted into a word would
    otherwise be an unknown token that changes its transcription). A run of more than 30
    combining marks (no writing system has one) is ordered 30 at a time."""
    safe = _LONG_RUN.sub(lambda m: m.group(1) + _JOINER, text)
    normal = unicodedata.normalize("NFC", safe)
    return _INVISIBLE_CHARS.sub("", normal.replace(_JOINER, "") if safe is not text else normal)


def read_text(text: str, limit: int, field: str = "text") -> str:
    """A request's text as a model reads it (`reading_form`), or a 422 that says what to
    change: over the character limit, or nothing left to read."""
    if len(text) > limit:
        raise CannotServe(f"{field} has {len(text)} characters; the limit is {limit}: shorten it")
    text = reading_form(text)
    if not text.strip():
        raise CannotServe(f"{field} is empty: type a sentence")
    return text


# A text's characters per token its model reads, at most: the bound is the model's tokens
# (a text past them is read up to them, `truncated`), and the character cap only bounds
# the tokenizer's work. English prose is ~4.7 characters a SmolLM2 token (a cap of 4 a
# token refused 7,900 tokens of licence text, 36,861 characters, in an 8,192-token
# context); code's indentation and rules of "=====" run to ~16.
CHARS_PER_TOKEN = 16


def text_limit(settings: Settings, runner: Any) -> int:
    """The characters a text for this model may have: ATTNVIZ_MAX_TEXT_CHARS, or 16 per
    token the model reads where that is more, so that any real text of as many tokens as
    the model reads is read."""
    return max(settings.max_text_chars, CHARS_PER_TOKEN * runner.max_tokens)


# A unit of work, the currency of a client's budget of the minute (a GET costs 1): 256
# tokens through one layer. Pronounce's sentence (20 characters, 6 layers) is half a unit,
# SmolLM2's 1,000-token prompt (30 layers) 117, its 8,192-token context 960 (~40 s here).
TOKEN_LAYERS_A_UNIT = 256


def work_units(config: ModelConfig, tokens: float, passes: float = 1.0) -> float:
    """The price of `passes` passes of `tokens` tokens through every layer of a model."""
    layers = config.n_layers * config.has_encoder + config.decoder_layers * config.has_decoder
    return passes * tokens * max(layers, 1) / TOKEN_LAYERS_A_UNIT


# set for the work of a request whose client has gone (Inference.on_tensor_thread)
_STOP: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "attnviz_stop", default=None
)


class ClientGone(Exception):
    """The request this work is for was cancelled: nobody will read its answer."""


# when the work of the request on this thread must have ended (Inference.on_tensor_thread)
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "attnviz_deadline", default=None
)


def stop_if_cancelled() -> None:
    """Raise ClientGone where the request of the work on this thread was cancelled, and
    a 422 where it has run past its deadline; the work calls it before each step worth
    skipping (a model run, a layer of one)."""
    stop = _STOP.get()
    if stop is not None and stop.is_set():
        raise ClientGone
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise CannotServe(
            f"this request's work ran past its {deadline[1]:g} s (ATTNVIZ_RUN_DEADLINE_S) "
            "and was stopped: ask for less (a shorter text, a smaller experiment)"
        )


LEAN_PAST = 8  # a capture above this share of the cache is kept lean


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
        """Keep a run; a large capture kept lean (model/lean.py: its attention scores and
        weights recomputed when read), so that a long input's views read it from here
        instead of running the model again for each block."""
        if not self.max_bytes:  # the cache is off
            return
        capture = value.capture
        lean = capture is not None and not isinstance(capture, LongCapture)
        if capture is not None and lean and capture_bytes(capture) > self.max_bytes // LEAN_PAST:
            value = dataclasses.replace(value, capture=LeanCapture(capture))
        size = capture_bytes(value.capture) if value.capture else 0
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
    def __init__(
        self, zoo: Zoo, settings: Settings, threads: ThreadPoolExecutor | None = None
    ) -> None:
        self.zoo = zoo
        self.settings = settings
        self.threads = threads or tensor_threads(settings)
        runs = settings.concurrent_runs()
        # model runs at once and waiting, a client's share of them bounded (the page's
        # requests for one text wait for one run: several of its own at once are a client
        # that runs many texts)
        self.limiter = RunLimiter(
            runs, settings.max_queued_runs, shares=bool(settings.client_requests)
        )
        # requests on or waiting for the tensor threads, bounded as the runs are
        self._admitted = RunLimiter(runs + settings.max_queued_runs, queued=0)
        self.runs = RunCache(settings.cache_bytes)
        self.progress = ProgressBoard()  # how far each run under way has read
        # runs under way by key: a request for the same (model, text) waits for that run
        # instead of running the model again (the page asks for a text's summary and its
        # first head at once)
        self._running: dict[str, Future[RunResult]] = {}
        self._running_lock = threading.Lock()
        self.stops = Stops()  # generations under way that their client may stop
        # work run in steps (app/runs/stepping.py) whose state (a KV cache, rows) is held
        # between its steps: as many at once as runs, so that the memory budgets, which
        # count a run's capture a run slot, still hold while others run between the steps
        self.stepping = asyncio.Semaphore(runs)
        # when the tensor threads last started or ended a request's work (`wedged`)
        self.moved = time.monotonic()

    def wedged(self) -> str | None:
        """Why the tensor threads look stuck, or None: requests are waiting for them and
        none has started or ended for longer than a request's deadline may take (its
        work stops at the layer past it) and a minute more."""
        waiting = self._admitted.admitted
        still = time.monotonic() - self.moved
        if waiting and still > self.settings.run_deadline_s + 60:
            return (
                f"the tensor threads have started or ended no work for {still:.0f} s, with "
                f"{waiting} requests waiting for them"
            )
        return None

    async def on_tensor_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on a tensor thread (in this request's context), or a 503
        when as many requests as runs may queue are already there. Cancelled (its client
        went away), it never starts if it was still waiting for a thread, and is told to
        stop (`cancelled`) if it was running."""
        with self._admitted.admission():
            return await self.on_tensor_thread_admitted(fn, *args, **kwargs)

    async def on_tensor_thread_admitted(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`on_tensor_thread` for the next step of work admitted whole already (a
        generation's, a stepped experiment's: app/runs/stepping.py), which a full queue
        must not stop half done."""
        stop = threading.Event()
        context = contextvars.copy_context()
        context.run(_STOP.set, stop)
        seconds = self.settings.run_deadline_s

        def started() -> T:  # (the deadline counts from the work's start, not its wait)
            _DEADLINE.set((time.monotonic() + seconds, seconds))
            self.moved = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.moved = time.monotonic()

        call = functools.partial(context.run, started)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.threads, call)
        except asyncio.CancelledError:
            stop.set()
            raise

    def check_anonymous(self, tokens: int) -> None:
        """A 422 where a client without an API key asks for a run of more tokens than
        ATTNVIZ_ANONYMOUS_MAX_TOKENS (where the server sets one)."""
        most = self.settings.anonymous_max_tokens
        client = CLIENT.get()
        if most and tokens > most and client and not client.startswith("key:"):
            raise CannotServe(
                f"a run of {tokens:,} tokens: this server reads at most {most:,} for a client "
                "without an API key (ATTNVIZ_ANONYMOUS_MAX_TOKENS); send a shorter text, or "
                "ask its operator for a key"
            )

    def prompt_options(
        self, entry: ModelEntry, chat: bool, continuation: Sequence[int]
    ) -> dict[str, Any]:
        """The run's prompt options, checked: {} for a plain run; a 422 where the model
        does not continue prompts or a continuation does not fit it."""
        if not chat and not continuation:
            return {}
        if not entry.runner.capabilities.generation:
            raise CannotServe(
                f"chat and continuation are for models that continue a prompt; {entry.id} "
                "does not generate",
            )
        limit = self.settings.max_new_tokens
        if len(continuation) > limit:
            raise CannotServe(
                f"continuation has {len(continuation)} tokens; the limit is {limit} "
                "(ATTNVIZ_MAX_NEW_TOKENS)",
            )
        vocab = entry.config.target_vocab_size
        if any(i >= vocab for i in continuation):
            raise CannotServe(
                f"continuation holds a token id out of range: {entry.id} has 0..{vocab - 1}"
            )
        return {"chat": chat, "continuation": list(continuation)}

    def entry(self, model_id: str | None) -> ModelEntry:
        model_id = self.zoo.default if model_id is None else model_id
        entry = self.zoo.models.get(model_id)
        if entry is None:
            known = ", ".join(self.zoo.ids())
            raise NotFound(f"unknown model {model_id!r}; the models are: {known}")
        return entry

    def _settle(
        self, key: str, future: Future, result: RunResult | None = None, error=None
    ) -> None:
        """A run's end, told to its waiters once it is no longer under way (a waiter that
        runs it again, its own client having left, must not find this run)."""
        with self._running_lock:
            del self._running[key]
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    @staticmethod
    def run_key(entry: ModelEntry, text: str, chat: bool, continuation: Sequence[int]) -> str:
        """The run cache's key of a run: the model, the text as read (`read_text`) and, for
        a model that continues prompts, its chat mode and continuation."""
        extra = f"\0{int(chat)}\0{','.join(map(str, continuation))}" if chat or continuation else ""
        return hashlib.sha256(f"{entry.id}\0{text}{extra}".encode()).hexdigest()

    def keep(self, key: str, result: RunResult) -> None:
        """A run made elsewhere (a generation's own passes) kept as the run of `key`."""
        self.runs.put(key, result)

    def run(
        self,
        entry: ModelEntry,
        text: str,
        chat: bool = False,
        continuation: Sequence[int] = (),
    ) -> RunResult:
        """The run of `text` with every hook point captured, from the run cache if this
        (model, text) was run before. A model that continues a prompt may read it as a
        chat turn, and run it with tokens generated after it (`continuation`)."""
        stop_if_cancelled()
        text = read_text(text, text_limit(self.settings, entry.runner))
        prompt = self.prompt_options(entry, chat, continuation)
        key = self.run_key(entry, text, chat, continuation)
        with self._running_lock:
            cached = self.runs.get(key)
            if cached is not None:
                return cached
            running = self._running.get(key)
            if running is None:
                future: Future[RunResult] = Future()
                self._running[key] = future
        if running is not None:
            try:
                return running.result()  # that run's result, or its error (503, 422)
            except ClientGone:  # the request that ran it went away: run it for this one
                return self.run(entry, text, chat, continuation)
        try:
            if chat:  # the template rendered before a run slot is taken (bounded, causal.py)
                try:
                    generating(entry.runner).chat_prompt(text)
                except ValueError as exc:
                    raise CannotServe(f"text cannot be read: {exc}") from exc
            # priced before it runs, by what it reads (a cached run, above, is free)
            tokens = entry.runner.tokens_read(text) + len(continuation)
            self.check_anonymous(tokens)
            charge(work_units(entry.config, tokens), f"a run of {tokens:,} tokens")
            with self.limiter.slot():
                try:
                    runner = entry.loaded_runner()  # (one for the watch and the run)
                    began = time.perf_counter()
                    with self.progress.watching(runner.model, stop_if_cancelled):
                        result = runner.run(text, **prompt)
                    # one line per model run: an operator (and a test) sees what was read
                    log.info(
                        "%s read %d tokens in %.2f s",
                        entry.id,
                        len(result.source_ids),
                        time.perf_counter() - began,
                    )
                except ValueError as exc:  # nothing left to read once normalised
                    raise CannotServe(f"text cannot be read: {exc}") from exc
            self.runs.put(key, result)
            self._settle(key, future, result=result)
            return result
        except BaseException as exc:
            self._settle(key, future, error=exc)
            raise
