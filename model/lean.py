"""A capture kept lean for the run cache: without its attention scores and weights, the
largest tensors a run captures (two (H, Tq, Tk) per attention module: 566 of the 671 MB of
SmolLM2's 512-token run), each recomputed when read from the captured queries, keys and
mask by the very functions the forward pass used (`attention_scores`, `masked_softmax`).

It is made from the capture of a plain forward pass (no hook functions: the run cache's
runs). A module's scores and weights are dropped only where recomputing gives back the
captured tensors bit for bit, checked at construction on one module of each stack, module
name and shape (a model that computes them otherwise keeps them stored); a capture with
more than one firing of a module (cached decoding) or without its queries and keys keeps
them too."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

from torch import Tensor

from .attention import attention_scores, masked_softmax
from .hooks import Capture
from .long import LongCapture

DERIVED = ("hook_scores", "hook_weights")
RECENT = 4  # recomputed tensors kept (a request reads one layer's, often twice)


def capture_bytes(capture: Capture) -> int:
    """Bytes a capture holds (a lean one: what it stores, not what it recomputes)."""
    if isinstance(capture, (LeanCapture, LongCapture)):
        return capture.stored_bytes
    return sum(t.nbytes for t in capture.values())


class LeanCapture(Capture):
    """The same names and tensors as the capture it is made from (a `Capture`: the latest
    firing by name, `all` for every firing), holding the scores and weights of each
    attention module as a recipe."""

    def __init__(self, full: Capture) -> None:
        super().__init__()
        self._names = list(full)
        self._store = {name: full.all(name) for name in self._names}
        self._recipes: dict[str, tuple[str, str]] = {}  # name -> (module prefix, hook)
        self._recent: OrderedDict[str, Tensor] = OrderedDict()
        self._lock = threading.Lock()  # requests read a cached run on several threads
        checked: dict[tuple, bool] = {}
        for name in self._names:
            prefix, _, hook = name.rpartition(".")
            if hook not in DERIVED or not self._derivable(prefix):
                continue
            # one module per stack, module name, hook and shape is recomputed and compared:
            # the others like it compute the same way
            stack, module = prefix.split(".")[0], prefix.split(".")[-1]
            group = (stack, module, hook, tuple(self._store[name][0].shape))
            if group not in checked:
                checked[group] = self._derive(prefix, hook).equal(self._store[name][0])
            if checked[group]:
                self._recipes[name] = (prefix, hook)
        # the recomputed tensors it keeps at most, counted in its bytes
        self._recent_bytes = RECENT * max(
            (self._store[name][0].nbytes for name in self._recipes), default=0
        )
        for name in self._recipes:
            del self._store[name]

    def _derivable(self, prefix: str) -> bool:
        """One firing each of the module's queries, keys and (where it has one) mask."""
        parts = [f"{prefix}.hook_q", f"{prefix}.hook_k", f"{prefix}.hook_scores"]
        firings = [len(self._store.get(n, ())) for n in parts]
        mask = len(self._store.get(f"{prefix}.hook_mask", [None]))
        return firings == [1, 1, 1] and mask == 1

    def _derive(self, prefix: str, hook: str) -> Tensor:
        q = self._store[f"{prefix}.hook_q"][0]
        k = self._store[f"{prefix}.hook_k"][0]
        if q.size(1) != k.size(1):  # grouped-query attention: each key head serves a group
            k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
        scores = attention_scores(q, k)
        if hook == "hook_scores":
            return scores
        mask = self._store.get(f"{prefix}.hook_mask", [None])[0]
        return masked_softmax(scores, mask)

    @property
    def stored_bytes(self) -> int:
        """What it stores, and the most its recently recomputed tensors take."""
        stored = sum(t.nbytes for firings in self._store.values() for t in firings)
        return stored + self._recent_bytes

    @property
    def recomputed(self) -> list[str]:
        """The names held as recipes."""
        return list(self._recipes)

    def __getitem__(self, name: str) -> Tensor:
        if name not in self._recipes:
            return self._store[name][-1]
        with self._lock:
            if name in self._recent:
                self._recent.move_to_end(name)
                return self._recent[name]
        tensor = self._derive(*self._recipes[name])
        with self._lock:
            self._recent[name] = tensor
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._names

    def all(self, name: str) -> list[Tensor]:
        return [self[name]] if name in self._recipes else list(self._store[name])

    def add(self, name: str, tensor: Tensor) -> None:
        raise TypeError("a lean capture is read-only")
