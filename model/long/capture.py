"""A long run's capture, and the heads of any run read by windows."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ..hooks import Capture
from .heads import Heads, StoredAttention
from .layer import LayerAttention
from .masks import Mask

DERIVED = ("hook_scores", "hook_mask", "hook_weights")


def long_names(name: str) -> bool:
    """A long run's names filter: no (Tq, Tk) matrix, no per-head context, no logits."""
    return not name.endswith((*DERIVED, "hook_context", "hook_logits"))


class LongCapture(Capture):
    """A long run's capture: the tensors it recorded (queries, keys, values, embeddings:
    nothing N x N) and, per attention module (its hook prefix, e.g.
    "decoder.3.self_attn"), a `LayerAttention` of its first batch item with its mask
    described. Its scores, mask and weights are read through `attention`, a window at a
    time; asking for them by hook name is a KeyError that says so."""

    def __init__(
        self,
        capture: Capture,
        masks: Mapping[str, Mask | None],
        scales: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        self._store = {name: capture.all(name) for name in capture}
        self.background: dict[str, object] = {}  # what the app computes of it meanwhile
        self.attention: dict[str, LayerAttention] = {}
        for prefix, mask in masks.items():
            q, k = capture[f"{prefix}.hook_q"], capture[f"{prefix}.hook_k"]
            scale = (scales or {}).get(prefix)
            self.attention[prefix] = LayerAttention(q[0], k[0], mask, scale)

    def __getitem__(self, name: str) -> Tensor:
        if name.endswith(DERIVED) and name.rpartition(".")[0] in self.attention:
            raise KeyError(f"{name}: a long run keeps no (Tq, Tk) matrix; read it by windows")
        return super().__getitem__(name)

    @property
    def stored_bytes(self) -> int:
        stored = sum(t.nbytes for firings in self._store.values() for t in firings)
        return stored + sum(a.nbytes - a.q.nbytes - a.k.nbytes for a in self.attention.values())


def heads_of(capture: Capture, prefix: str) -> Heads:
    """One attention module's heads (hook prefix, e.g. "decoder.3.self_attn") of a run's
    first batch item: recomputed by windows for a long run, its stored tensors otherwise."""
    if isinstance(capture, LongCapture):
        return capture.attention[prefix]
    found = {
        hook: capture[f"{prefix}.{hook}"][0] for hook in DERIVED if f"{prefix}.{hook}" in capture
    }
    mask = found.get("hook_mask")
    return StoredAttention(
        found.get("hook_weights"), found.get("hook_scores"), None if mask is None else mask[0]
    )
