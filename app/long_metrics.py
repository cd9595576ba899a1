"""A long input's head summaries, computed in the background: every head's metrics in one
pass over its rows (model/long.py `head_stats`), a head at a time on the tensor threads as
a client of their own (another request waits for one head at most: a quarter of a second
at 8,192 SmolLM2 tokens), kept on the run's capture while it is cached, and stopped when
nobody has asked for them for a while."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from dataclasses import dataclass, field

from model.analysis import role_of
from model.long import HeadStats, LongCapture
from model.runner import RunResult

from .clients import CLIENT
from .runs import Inference
from .schemas import HeadSummary
from .zoo import ModelEntry

LOG = logging.getLogger(__name__)
BACKGROUND = "(head metrics)"  # the client name its work is queued under
IDLE_S = 120.0  # unread this long: the rest is not computed


@dataclass
class Summaries:
    total: int
    done: list[HeadSummary] = field(default_factory=list)
    read: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


_STARTING = threading.Lock()


def long_summaries(
    inference: Inference, entry: ModelEntry, result: RunResult
) -> tuple[list[HeadSummary], int]:
    """The summaries computed so far and how many there will be; the first call starts
    the work."""
    capture = result.capture
    assert isinstance(capture, LongCapture)
    with _STARTING:
        job = capture.background.get("summaries")
        if not isinstance(job, Summaries):
            total = sum(s.layers * s.query_heads for s in entry.specs.values())
            job = capture.background["summaries"] = Summaries(total)
            thread = threading.Thread(
                target=_work, args=(inference, entry, result, job), daemon=True,
                name="attnviz-head-metrics",
            )  # fmt: skip
            thread.start()
    with job.lock:
        job.read = time.monotonic()
        return list(job.done), job.total


def _work(inference: Inference, entry: ModelEntry, result: RunResult, job: Summaries) -> None:
    context = contextvars.copy_context()
    context.run(CLIENT.set, BACKGROUND)
    specials = set(entry.runner.special_tokens)
    for spec in entry.specs.values():
        keys = result.tokens(spec.columns)
        special = [i for i, token in enumerate(keys) if token in specials]
        for layer in range(spec.layers):
            for head in range(spec.query_heads):
                if time.monotonic() - job.read > IDLE_S:
                    LOG.info("head metrics of a long run stopped: unread for %.0f s", IDLE_S)
                    return
                try:
                    work = context.run(
                        inference.threads.submit, _head, inference, result, spec, layer, head,
                        special,
                    )  # fmt: skip
                    made = work.result()
                except RuntimeError:  # the server is stopping
                    return
                except Exception:
                    LOG.exception("head metrics of a long run failed")
                    return
                with job.lock:
                    job.done.append(made)


def _head(
    inference: Inference, result: RunResult, spec, layer: int, head: int, special: list[int]
) -> HeadSummary:
    assert isinstance(result.capture, LongCapture)
    heads = result.capture.attention[spec.hook(layer, "")[:-1]]
    stats = HeadStats()
    with inference.limiter.running():
        heads.head_stats(head, spec.self_attention, special, stats)
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
