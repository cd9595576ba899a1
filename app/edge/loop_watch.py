"""The event loop's own lag, watched: a task that asks to wake every 10 ms and, where it
woke later than ATTNVIZ_LOOP_STALL_WARN_MS, logs a warning (something held the loop, or
the interpreter's lock, that long: every request and probe waited meanwhile), naming the
requests in flight then: the one that held it, where a request did, is among them; where
the server's own work did (a garbage collection walking the run cache held it 63-132 ms
before the cache was bounded in runs), they only waited. The worst lag since start is
kept (`worst_ms`)."""

from __future__ import annotations

import asyncio
import logging
import time

from .logs import in_flight

LOG = logging.getLogger("attnviz.loop")
PERIOD_S = 0.01


class LoopWatch:
    def __init__(self, warn_ms: float) -> None:
        self.warn_ms = warn_ms
        self.worst_ms = 0.0
        self.stalls = 0  # wakes later than warn_ms
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self.warn_ms and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-watch")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self) -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(PERIOD_S)
            late = (time.perf_counter() - began - PERIOD_S) * 1000
            self.worst_ms = max(self.worst_ms, late)
            if late > self.warn_ms:
                self.stalls += 1
                answering = in_flight()
                LOG.warning(
                    "the event loop was held %.0f ms (ATTNVIZ_LOOP_STALL_WARN_MS: %g); "
                    "requests in flight: %s",
                    late,
                    self.warn_ms,
                    ", ".join(answering) or "none",
                    extra={"stall_ms": round(late, 1), "in_flight": answering},
                )
