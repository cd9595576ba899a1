"""The run cache: the runs made, with their captures, least recently used dropped first,
bounded in bytes and in number; a large capture kept lean."""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from attnviz.model.lean import LeanCapture, capture_bytes
from attnviz.model.long import LongCapture
from attnviz.model.runner import RunResult
from attnviz.model.runtime import release_free_memory

LEAN_PAST = 8  # a capture above this share of the cache is kept lean


# Runs the cache keeps at most, whatever their bytes: each holds 100-450 objects Python's
# collector tracks (a tensor a hook point), and a full collection walks them all holding
# the interpreter's lock. Thousands of short runs fill 1.5 GiB: in a fuzz of 41,000
# requests the collections took 63-132 ms, every 30-40 s, each one an event-loop stall;
# with 256 runs at most, none passed 26 ms.
MOST_RUNS = 256


class RunCache:
    """Least-recently-used runs with their captures, bounded in bytes and in number."""

    def __init__(self, max_bytes: int, most: int = MOST_RUNS) -> None:
        self.max_bytes, self.most = max_bytes, most
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
            while self._bytes > self.max_bytes or len(self._items) > self.most:
                _, (old, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
                evicted.append(old)
        if evicted:
            del evicted, old  # the last references, unless a request still reads them
            release_free_memory()
