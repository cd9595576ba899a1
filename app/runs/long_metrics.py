"""A long input's head summaries, computed in the background: every head's metrics in one
pass over its rows (model/long/layer.py `head_stats`), a quarter of a head's rows at a time
on the tensor threads as a client of their own (another request waits for one such part
at most: 270 heads take about 55 s at 8,192 SmolLM2 tokens, so a part about 50 ms).

What is done is kept on the run's capture. One long run is summarised at a time (the
latest asked for; an older one's work stops, and goes on when it is asked for again), and
the work holds its capture weakly: a run the cache has dropped is not kept alive by it,
and is not summarised further. Work nobody has asked for in IDLE_S stops too."""

from __future__ import annotations

import contextvars
import itertools
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass, field

from attnviz.model.attention_types import AttentionSpec
from attnviz.model.long import HeadStats, LayerAttention, LongCapture
from attnviz.model.methods.analysis import role_of
from attnviz.model.runner import RunResult

from ..catalog.zoo import ModelEntry
from ..payloads.schemas import HeadSummary
from ..request import CLIENT
from .inference import Inference

LOG = logging.getLogger(__name__)
BACKGROUND = "(head metrics)"  # the client name its work is queued under
IDLE_S = 30.0  # unread this long: the rest is not computed (until asked again)
PARTS = 4  # turns a head's rows take on the tensor threads (another request waits for one)


@dataclass
class Summaries:
    total: int
    done: list[HeadSummary] = field(default_factory=list)
    read: float = field(default_factory=time.monotonic)
    running: bool = False
    stop: threading.Event = field(default_factory=threading.Event)


_LOCK = threading.Lock()
_CURRENT: Summaries | None = None  # the job working now


def long_summaries(
    inference: Inference, entry: ModelEntry, result: RunResult
) -> tuple[list[HeadSummary], int]:
    """The summaries computed so far and how many there will be; a call starts (or goes
    on with) the work for this run, stopping any other's."""
    global _CURRENT
    capture = result.capture
    assert isinstance(capture, LongCapture)
    with _LOCK:
        job = capture.background.get("summaries")
        if not isinstance(job, Summaries):
            total = sum(s.layers * s.query_heads for s in entry.specs.values())
            job = capture.background["summaries"] = Summaries(total)
        job.read = time.monotonic()
        if not job.running and len(job.done) < job.total:
            if _CURRENT is not None and _CURRENT is not job:
                _CURRENT.stop.set()  # one run summarised at a time: the latest asked
            job.stop = threading.Event()
            job.running, _CURRENT = True, job
            plan = _plan(entry, result)[len(job.done) :]
            thread = threading.Thread(
                target=_work, args=(inference, weakref.ref(capture), plan, job), daemon=True,
                name="attnviz-head-metrics",
            )  # fmt: skip
            thread.start()
        return list(job.done), job.total


def stop_all() -> None:
    """Stop the work under way (the server is stopping)."""
    with _LOCK:
        if _CURRENT is not None:
            _CURRENT.stop.set()


def _plan(entry: ModelEntry, result: RunResult) -> list[tuple[AttentionSpec, int, int, list[int]]]:
    """(spec, layer, head, special key positions) of every head, in order."""
    specials = set(entry.runner.special_tokens)
    out = []
    for spec in entry.specs.values():
        keys = result.tokens(spec.columns)
        special = [i for i, token in enumerate(keys) if token in specials]
        out += [(spec, layer, head, special) for layer in range(spec.layers)
                for head in range(spec.query_heads)]  # fmt: skip
    return out


def _work(
    inference: Inference,
    capture: weakref.ref[LongCapture],
    plan: list[tuple[AttentionSpec, int, int, list[int]]],
    job: Summaries,
) -> None:
    context = contextvars.copy_context()
    context.run(CLIENT.set, BACKGROUND)
    try:
        for spec, layer, head, special in plan:
            if job.stop.is_set() or time.monotonic() - job.read > IDLE_S:
                return  # another run asked for, or nobody reading: goes on when asked again
            held = capture()
            if held is None:
                return  # the run left the cache: nobody can ask for it any more
            heads = held.attention[spec.hook(layer, "")[:-1]]
            del held
            stats = HeadStats()
            try:
                for rows in _parts(heads.queries):  # (each a turn on the tensor threads)
                    if job.stop.is_set():
                        return
                    work = context.run(inference.threads.submit, _rows, inference, spec, head,
                                       heads, special, stats, rows)  # fmt: skip
                    work.result()
                made = _summary(spec, layer, head, heads, stats)
            except RuntimeError:  # the server is stopping: its threads take no more work
                return
            except Exception:
                LOG.exception("head metrics of a long run failed at L%d H%d", layer, head)
                return
            finally:
                del heads
            with _LOCK:
                job.done.append(made)
    finally:
        with _LOCK:
            job.running = False


def _parts(queries: int) -> list[tuple[int, int]]:
    """A head's rows in PARTS turns on the tensor threads (a causal head's later rows read
    more keys: cut where each part has as many query-key pairs)."""
    cuts = [0] + [round(queries * math.sqrt(i / PARTS)) for i in range(1, PARTS)] + [queries]
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _rows(
    inference: Inference,
    spec: AttentionSpec,
    head: int,
    heads: LayerAttention,
    special: list[int],
    stats: HeadStats,
    rows: tuple[int, int],
) -> None:
    with inference.limiter.running():
        heads.head_stats(head, spec.self_attention, special, stats, rows)


def _summary(
    spec: AttentionSpec, layer: int, head: int, heads: LayerAttention, stats: HeadStats
) -> HeadSummary:
    means = stats.means()
    role = role_of(
        {**means, "alignment": None if spec.self_attention else means["alignment"]},
        means["fixed_offset"],
        spec.self_attention,
        heads.queries,
        heads.keys,
    )
    return HeadSummary(
        type=spec.type,
        layer=layer,
        head=head,
        entropy=round(means["entropy"], 6),
        max_weight=round(means["max_weight"], 6),
        role=role,
    )
