"""Model runs: the text a model reads, the bound on runs at once (503 past it), the run
cache, the threads tensor work runs on, and `Inference`, which ties them to the zoo."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import hashlib
import logging
import queue
import re
import threading
import time
import unicodedata
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from attnviz.model.lean import LeanCapture, capture_bytes
from attnviz.model.long import LongCapture
from attnviz.model.runner import RunResult, generating
from attnviz.model.runtime import lower_priority, release_free_memory

from ..catalog.zoo import ModelEntry, Zoo
from ..errors import Busy, CannotServe, NotFound
from ..payloads.text import INVISIBLE
from ..request import CLIENT
from ..settings import Settings
from .progress import ProgressBoard, Stops

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


# set for the work of a request whose client has gone (Inference.on_tensor_thread)
_STOP: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "attnviz_stop", default=None
)


class ClientGone(Exception):
    """The request this work is for was cancelled: nobody will read its answer."""


def stop_if_cancelled() -> None:
    """Raise ClientGone where the request of the work on this thread was cancelled; the
    work calls it before each step worth skipping (a model run)."""
    stop = _STOP.get()
    if stop is not None and stop.is_set():
        raise ClientGone


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
                raise Busy(
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

    @contextmanager
    def running(self) -> Iterator[None]:
        """A run slot alone, for a request admitted already (a generation's next step)."""
        with self._running:
            yield

    def check(self) -> None:
        """A 503 now where admission would refuse (nothing is counted)."""
        with self.admission():
            pass


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


class FairQueue:
    """A ThreadPoolExecutor's work queue that takes its clients in turn (`CLIENT` of the
    context that submitted each item): a client's items in the order sent, but one
    client's seventeen never all ahead of another's one (with a FIFO queue, another
    client's request waited 52 s behind them; measured)."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[str, deque] = OrderedDict()  # by client, in turn
        self._stops: deque = deque()  # the executor's None: a worker is to exit
        self._ready = threading.Condition()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._ready:
            if item is None:
                self._stops.append(item)
            else:
                self._waiting.setdefault(CLIENT.get(), deque()).append(item)
            self._ready.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self._ready:
            while True:
                if self._waiting:
                    client, items = self._waiting.popitem(last=False)
                    item = items.popleft()
                    if items:
                        self._waiting[client] = items  # the back of the turn
                    return item
                if self._stops:
                    return self._stops.popleft()
                if not block:
                    raise queue.Empty
                self._ready.wait()

    def get_nowait(self) -> Any:
        return self.get(block=False)


def tensor_threads(settings: Settings) -> ThreadPoolExecutor:
    """The threads every route's tensor work runs on: one per concurrent run, kept for
    the server's life.

    Each thread that runs torch gets an OpenMP team of its own (a worker per extra torch
    thread), and where the teams' threads outnumber the cores, libgomp stops its workers
    spinning between parallel regions: every region then waits for sleeping workers to
    wake. On 2 cores, a second team made `pronounce`'s run of 126 characters take 140 ms
    instead of 78 (measured); so the zoo loads on these threads too, and the event loop
    and the request thread pool never run torch. They run at a lower priority than the
    event loop (`lower_priority`), their OpenMP teams too."""
    threads = ThreadPoolExecutor(
        settings.concurrent_runs(), thread_name_prefix="attnviz-torch", initializer=lower_priority
    )
    threads._work_queue = FairQueue()  # type: ignore[assignment]  # (before any submit)
    return threads


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
        self.progress = ProgressBoard()  # how far each run under way has read
        # runs under way by key: a request for the same (model, text) waits for that run
        # instead of running the model again (the page asks for a text's summary and its
        # first head at once)
        self._running: dict[str, Future[RunResult]] = {}
        self._running_lock = threading.Lock()
        self.stops = Stops()  # generations under way that their client may stop

    async def on_tensor_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on a tensor thread (in this request's context), or a 503
        when as many requests as runs may queue are already there. Cancelled (its client
        went away), it never starts if it was still waiting for a thread, and is told to
        stop (`cancelled`) if it was running."""
        stop = threading.Event()
        context = contextvars.copy_context()
        context.run(_STOP.set, stop)
        call = functools.partial(context.run, fn, *args, **kwargs)
        with self._admitted.admission():
            try:
                return await asyncio.get_running_loop().run_in_executor(self.threads, call)
            except asyncio.CancelledError:
                stop.set()
                raise

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
