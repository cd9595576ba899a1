"""Model runs: a run's price (`work_units`), the run cache, and `Inference`, which ties
them to the zoo, the text a model reads (runs/reading.py) and the tensor threads
(runs/scheduling.py, runs/turns.py)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from attnviz.model.config import ModelConfig
from attnviz.model.runner import RunResult, generating, pictures

from ..catalog.yours import OwnRunner
from ..catalog.zoo import ModelEntry, Zoo
from ..errors import CannotServe, NotFound
from ..images import Picture, Pictures
from ..request import CLIENT, charge
from ..settings import Settings
from .cache import RunCache
from .inputs import check_input, tokens_read
from .progress import ProgressBoard, Stops
from .reading import read_text, text_limit
from .scheduling import Between, NotNow, RunLimiter, lent, tensor_threads
from .turns import give_way, positions, short_capture_bytes, start_turn

log = logging.getLogger(__name__)

T = TypeVar("T")
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
        self.pictures = Pictures(settings.images_bytes)  # (by digest: runs name them)
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
            return await self._on_tensor_thread(fn, args, kwargs, between=False)

    async def between_layers(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`on_tensor_thread` for work that may run in a long pass's turn, between two of
        its layers (app/runs/turns.py), where it is a short run (see `run`)."""
        with self._admitted.admission():
            return await self._on_tensor_thread(fn, args, kwargs, between=True)

    async def on_tensor_thread_admitted(self, fn: Callable[[], T], left_s: float) -> T:
        """`on_tensor_thread` for the next step of work admitted whole already (a
        generation's, a stepped experiment's: app/runs/stepping.py), which a full queue
        must not stop half done; stopped `left_s` after it starts (what the job's deadline
        has left)."""
        return await self._on_tensor_thread(fn, (), {}, between=False, left_s=left_s)

    async def _on_tensor_thread(
        self,
        fn: Callable[..., T],
        args: tuple,
        kwargs: dict,
        between: bool,
        left_s: float | None = None,
    ) -> T:
        stop = threading.Event()
        context = contextvars.copy_context()
        context.run(_STOP.set, stop)
        seconds = self.settings.run_deadline_s
        left = seconds if left_s is None else left_s

        def started() -> T:  # (the deadline counts from the work's start, not its wait)
            _DEADLINE.set((time.monotonic() + left, seconds))
            start_turn()
            self.moved = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.moved = time.monotonic()

        call: Callable[[], T] = functools.partial(context.run, started)
        if between:
            call = Between(call)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.threads, call)
        except asyncio.CancelledError:
            stop.set()
            raise

    def _between_layers(self) -> None:
        """At a layer of a run's pass: stopped where its client went away or its deadline
        passed, and other clients' short runs lent a turn where it has run one
        (app/runs/turns.py), its deadline moved by their time."""
        stop_if_cancelled()
        turn_s = self.settings.turn_s if self.settings.turn_bytes else 0.0
        lent_s = give_way(self.threads, turn_s)
        deadline = _DEADLINE.get()
        if lent_s and deadline is not None:
            _DEADLINE.set((deadline[0] + lent_s, deadline[1]))

    def _check_short(
        self,
        entry: ModelEntry,
        key: str,
        text: str,
        continuation: int,
        chat: bool,
        picture: Picture | None = None,
    ) -> int | None:
        """NotNow where a run lent another's turn (app/runs/turns.py) is not short: its capture
        (estimated; a cached one's by what it read) past ATTNVIZ_TURN_BYTES, a model of
        yours still to be read, or the same run under way (that turn may be its). The
        tokens it reads, where they were counted (not for a cached run)."""
        cached = self.runs.get(key)
        tokens = None
        if cached is not None:
            read = positions(entry.config, cached)
        elif key in self._running or (
            isinstance(entry.runner, OwnRunner) and not entry.runner.is_loaded
        ):
            raise NotNow
        else:
            tokens = tokens_read(entry, text, picture) + continuation
            read = tokens + (64 if chat else 0)  # (a chat template's tokens, at most)
            if entry.config.has_encoder and entry.config.has_decoder:
                read *= 2  # (its output, as long as its input or shorter, not yet known)
        if short_capture_bytes(entry.config, read) > self.settings.turn_bytes:
            raise NotNow
        return tokens

    def picture(self, digest: str | None) -> Picture | None:
        """The picture a request names (None: none), or a 404 where it is not held."""
        if digest is None:
            return None
        found = self.pictures.get(digest)
        if found is None:
            raise NotFound(
                f"this server does not hold the picture {digest[:12]}… (it keeps the latest "
                "ATTNVIZ_IMAGES_BYTES of them): send it again to POST /api/v1/images"
            )
        return found

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
    def run_key(
        entry: ModelEntry,
        text: str,
        chat: bool,
        continuation: Sequence[int],
        picture: Picture | None = None,
    ) -> str:
        """The run cache's key of a run: the model, the text as read (`read_text`), the
        picture's digest where there is one and, for a model that continues prompts, its
        chat mode and continuation."""
        extra = f"\0{int(chat)}\0{','.join(map(str, continuation))}" if chat or continuation else ""
        if picture is not None:
            extra += f"\0image:{picture.digest}"
        return hashlib.sha256(f"{entry.id}\0{text}{extra}".encode()).hexdigest()

    def keep(self, key: str, result: RunResult) -> None:
        """A run made elsewhere (a generation's own passes) kept as the run of `key`."""
        self.runs.put(key, result)

    def run(
        self,
        entry: ModelEntry,
        text: str | None,
        chat: bool = False,
        continuation: Sequence[int] = (),
        picture: Picture | None = None,
    ) -> RunResult:
        """The run of `text` (and of `picture`, for a model that reads pictures) with every
        hook point captured, from the run cache if this (model, input) was run before. A
        model that continues a prompt may read it as a chat turn, and run it with tokens
        generated after it (`continuation`)."""
        stop_if_cancelled()
        check_input(entry, text, picture)
        if picture is not None and chat:
            raise CannotServe(
                "a run of a picture reads its prompt as written: no chat turn is read with one yet"
            )
        text = "" if text is None else read_text(text, text_limit(self.settings, entry.runner))
        prompt = self.prompt_options(entry, chat, continuation)
        key = self.run_key(entry, text, chat, continuation, picture)
        # lent a turn, checked before it charges or changes anything (its tokens counted)
        counted = (
            self._check_short(entry, key, text, len(continuation), chat, picture)
            if lent()
            else None
        )
        with self._running_lock:
            cached = self.runs.get(key)
            if cached is not None:
                return cached
            running = self._running.get(key)
            if running is None:
                future: Future[RunResult] = Future()
                self._running[key] = future
        if running is not None:
            if lent():  # (it may be the very run whose turn this is)
                raise NotNow
            try:
                return running.result()  # that run's result, or its error (503, 422)
            except ClientGone:  # the request that ran it went away: run it for this one
                return self.run(entry, text or None, chat, continuation, picture)
        try:
            if chat:  # the template rendered before a run slot is taken (bounded, causal.py)
                try:
                    generating(entry.runner).chat_prompt(text)
                except ValueError as exc:
                    raise CannotServe(f"text cannot be read: {exc}") from exc
            # priced before it runs, by what it reads (a cached run, above, is free)
            tokens = counted or tokens_read(entry, text, picture) + len(continuation)
            self.check_anonymous(tokens)
            charge(work_units(entry.config, tokens), f"a run of {tokens:,} tokens")
            # (lent a turn, it runs in that turn's slot)
            with self.limiter.admission() if lent() else self.limiter.slot():
                try:
                    runner = entry.loaded_runner()  # (one for the watch and the run)
                    began = time.perf_counter()
                    with self.progress.watching(runner.model, self._between_layers):
                        if picture is None:
                            result = runner.run(text, **prompt)
                        else:
                            result = pictures(runner).read_picture(
                                picture.pixels, picture.digest, text or None,
                                continuation=list(continuation),
                            )  # fmt: skip
                    # one line per model run: an operator (and a test) sees what was read
                    log.info(
                        "%s read %d %s in %.2f s",
                        entry.id,
                        len(result.source_tokens if picture else result.source_ids),
                        "positions of a picture" if picture else "tokens",
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
