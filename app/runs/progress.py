"""How far each run under way has read, by its client and the id of the request that runs
it (a client sees its own runs only, and cannot push another's out): the page
polls it during a long run (a progress line with the time left), and each layer is a point
where a run whose client went away stops."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import Tensor, nn

from attnviz.model.hooks import HookedModule, hooked

from ..request import CLIENT, CURRENT_REQUEST

KEPT = 4096  # runs remembered (the oldest forgotten first)
KEPT_A_CLIENT = 16  # of one client (its oldest forgotten first: 300 tiny requests with
# ids of their own pushed another client's long run out of 256 shared places)


@dataclass
class RunProgress:
    """A run's layers read of `layers`, over `tokens` tokens."""

    layers: int
    tokens: int = 0
    layers_done: int = 0
    passes: int = 1  # (past the first, as in step-by-step decoding, no time left is known)
    finished: bool = False
    started: float = field(default_factory=time.monotonic)

    def answer(self) -> dict:
        elapsed = time.monotonic() - self.started
        left = None
        if self.finished:
            left = 0.0
        elif self.layers_done and self.passes == 1:
            left = elapsed / self.layers_done * (self.layers - self.layers_done)
        return {
            "tokens": self.tokens,
            "layers": self.layers,
            "layers_done": self.layers_done,
            "finished": self.finished,
            "elapsed_s": round(elapsed, 2),
            "left_s": None if left is None else round(left, 1),
        }


class ProgressBoard:
    """The latest runs' progress (KEPT_A_CLIENT a client, KEPT in all), by client (`CLIENT`
    of the request that runs it, or asks) and request id."""

    def __init__(self) -> None:
        self._runs: OrderedDict[tuple[str, str], RunProgress] = OrderedDict()
        self._of_client: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, request_id: str) -> RunProgress | None:
        with self._lock:
            return self._runs.get((CLIENT.get(), request_id))

    def _start(self, request_id: str, layers: int) -> RunProgress:
        progress = RunProgress(layers)
        client = CLIENT.get()
        with self._lock:
            if (client, request_id) in self._runs:
                self._forget((client, request_id))
            elif self._of_client.get(client, 0) >= KEPT_A_CLIENT:
                self._forget(next(key for key in self._runs if key[0] == client))
            self._runs[(client, request_id)] = progress
            self._of_client[client] = self._of_client.get(client, 0) + 1
            while len(self._runs) > KEPT:
                self._forget(next(iter(self._runs)))
        return progress

    def _forget(self, key: tuple[str, str]) -> None:
        del self._runs[key]
        left = self._of_client[key[0]] - 1
        if left:
            self._of_client[key[0]] = left
        else:
            del self._of_client[key[0]]

    @contextmanager
    def watching(self, model: nn.Module, check: Callable[[], None]) -> Iterator[None]:
        """Within this block, a run of `model` (our model code's) reports each layer it
        starts to the request's progress, and calls `check` there (which raises to stop a
        run whose client went away)."""
        names = []
        if isinstance(model, HookedModule):
            names = [n for n in model.hook_names() if n.endswith(".self_attn.hook_v")]
        request_id = CURRENT_REQUEST.get()
        progress = self._start(request_id, len(names)) if request_id and names else None

        def layer(x: Tensor, name: str) -> None:
            check()
            if progress is not None:
                progress.tokens = max(progress.tokens, x.size(-2))
                done = names.index(name)
                if done < progress.layers_done:
                    progress.passes += 1
                progress.layers_done = max(progress.layers_done, done)

        with hooked(model, fwd_hooks=[(n, layer) for n in names], capture=False):
            yield
        if progress is not None:
            progress.layers_done, progress.finished = progress.layers, True


class Stops:
    """Generations under way that their client may stop, by (client, request id)."""

    def __init__(self) -> None:
        self._flags: dict[tuple[str, str], threading.Event] = {}

    @contextmanager
    def stoppable(self, stop: threading.Event) -> Iterator[None]:
        """Within this block, this request's client may set `stop` by the request's id
        (`stop`); a request sent without an X-Request-ID cannot be stopped so."""
        request_id = CURRENT_REQUEST.get()
        key = (CLIENT.get(), request_id or "")
        if request_id is None or key in self._flags:
            yield
            return
        self._flags[key] = stop
        try:
            yield
        finally:
            self._flags.pop(key, None)

    def stop(self, request_id: str) -> bool:
        """Stop the generation this client runs as `request_id`; False where none is."""
        found = self._flags.get((CLIENT.get(), request_id))
        if found is not None:
            found.set()
        return found is not None
