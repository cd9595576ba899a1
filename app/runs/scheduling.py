"""Who runs when: the tensor threads every route's tensor work runs on, taking clients in
turn (`FairQueue`), the bound on model runs at once and waiting (`RunLimiter`, 503
past it), and short work run in a long pass's turn (`Between`, `lent`: see
app/runs/turns.py)."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.thread import _WorkItem
from contextlib import contextmanager
from typing import Any

from attnviz.model.runtime import lower_priority

from ..errors import Busy, OverClientLimit
from ..request import CLIENT
from ..settings import Settings


class _Lent(threading.local):
    on = False  # (each thread's own, False until it lends)


_LENT = _Lent()


def lent() -> bool:
    """Whether the work on this thread runs in another's turn: between two layers of a long
    pass on the same thread, whose run slot it borrows (app/runs/turns.py)."""
    return _LENT.on


@contextmanager
def lending() -> Iterator[None]:
    """This thread's work, within this block, runs in another's turn (`lent`)."""
    _LENT.on = True
    try:
        yield
    finally:
        _LENT.on = False


class NotNow(Exception):
    """Work run in another's turn (`lent`) that is not short, or would wait for what that
    turn holds (a run slot, the same run under way): put back in the queue, to run in a
    turn of its own. Raised before it has charged or changed anything."""


class Between:
    """A tensor thread task that may run in a long pass's turn, between two of its layers
    (a request for a short run: app/runs/turns.py lends it that turn, and the task
    raises NotNow where it is not short after all)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.too_long = False  # found not short in a turn (NotNow): not lent one again

    def __call__(self) -> Any:
        return self.call()


class RunLimiter:
    """At most `concurrent` model runs at once and `queued` waiting; past that, 503. With
    `shares`, one client (`CLIENT`) may hold at most a quarter of the places, or four
    where that is more: past its share a 429, so that three clients cannot fill the queue
    (each with eight requests in flight, three filled seventeen places and everyone else
    had 503s)."""

    def __init__(self, concurrent: int, queued: int, shares: bool = False) -> None:
        self._running = threading.Semaphore(concurrent)
        self._lock = threading.Lock()
        self._admitted = 0
        self._capacity = concurrent + queued
        self._share = max(min(4, self._capacity), self._capacity // 4) if shares else self._capacity
        self._of_client: dict[str, int] = {}

    @contextmanager
    def admission(self) -> Iterator[None]:
        """Counted among the admitted (a 503 past capacity, a 429 past the client's
        share), without waiting for a slot."""
        client = CLIENT.get()
        with self._lock:
            if self._admitted >= self._capacity:
                raise Busy(
                    "the server is busy running other requests; retry shortly",
                    headers={"Retry-After": "1"},
                )
            held = self._of_client.get(client, 0)
            if held >= self._share:
                raise OverClientLimit(
                    f"this client has {held} requests waiting for or running on the "
                    f"server's {self._capacity} places, its share: wait for their answers",
                    headers={"Retry-After": "1"},
                )
            self._admitted += 1
            self._of_client[client] = held + 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1
                left = self._of_client[client] - 1
                if left:
                    self._of_client[client] = left
                else:
                    del self._of_client[client]

    @property
    def admitted(self) -> int:
        return self._admitted

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Admission and a run slot; NotNow in another's turn (`lent`), whose slot is held
        (`Inference.run` vets its short run and takes admission alone)."""
        if lent():
            raise NotNow
        with self.admission(), self._running:
            yield

    @contextmanager
    def running(self) -> Iterator[None]:
        """A run slot alone, for a request admitted already (a generation's next step)."""
        if lent():
            raise NotNow
        with self._running:
            yield

    def check(self) -> None:
        """A 503 now where admission would refuse (nothing is counted)."""
        with self.admission():
            pass


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
                while self._waiting:
                    client, items = self._waiting.popitem(last=False)
                    if not items:  # (its item is lent a turn: `take_between`)
                        continue
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

    def take_between(self, most: int) -> list[tuple[str, Any]]:
        """Up to `most` waiting items that may run in a long pass's turn (`Between`, not
        found too long already), one a client in turn order: each client's first item,
        where it is one (a client's items keep their order), with its client. Its client
        keeps its place until the item has run (`lent`) or is put back (`put_back`)."""
        taken: list[tuple[str, Any]] = []
        with self._ready:
            for client, items in self._waiting.items():
                if len(taken) >= most:
                    break
                first = items[0] if items else None
                if (
                    isinstance(first, _WorkItem)
                    and isinstance(first.fn, Between)
                    and not first.fn.too_long
                ):
                    taken.append((client, items.popleft()))
        return taken

    def lent(self, client: str) -> None:
        """A taken item has run in another's turn: its client had its turn."""
        with self._ready:
            items = self._waiting.get(client)
            if items is None:
                return
            if items:
                self._waiting.move_to_end(client)
            else:
                del self._waiting[client]

    def put_back(self, client: str, item: Any) -> None:
        """A taken item that did not run: first of its client's again, its client where
        it was in turn."""
        with self._ready:
            self._waiting.setdefault(client, deque()).appendleft(item)
            self._ready.notify()


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
