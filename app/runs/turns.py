"""A long pass gives way to short runs: between two layers of a model pass that has held
its tensor thread for ATTNVIZ_TURN_S, other clients' short runs waiting (`Between`
tasks: an analysis or attention of a capture under ATTNVIZ_TURN_BYTES) run on that thread,
in that pass's run slot, one a client in turn; then the pass goes on. A 7,800-token
SmolLM2 pass took ~38 s here, and every other client's analysis waited for all of it.

A task lent a turn runs in its own context (its client's, its request's hooks), so its
pass and the long one see nothing of each other's; where it turns out not to be short, or
would wait for what the turn holds, it raises NotNow before it charges or changes
anything, and goes back to the queue to run in a turn of its own. The run slot it borrows
is the long pass's, so the memory it adds is bounded by ATTNVIZ_TURN_BYTES, which the
memory budgets count (app/budgets.py). Passes of our model code give way (their progress
watch sees each layer: app/runs/progress.py); transformers' do not."""

from __future__ import annotations

import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from attnviz.model.config import ModelConfig
from attnviz.model.runner import RunResult

from .scheduling import FairQueue, NotNow, lending, lent

TURN_CLIENTS = 8  # clients whose short run waiting is lent one turn of a long pass at most

# when the work on this thread last started or gave way to others' short work
_TURN: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "attnviz_turn", default=None
)


def short_capture_bytes(config: ModelConfig, tokens: int) -> int:
    """At most what a short run (its whole (T, T) matrices kept) of `tokens` positions
    captures: per attention module its queries, keys and values, scores, weights and mask,
    and eight of the model's rows a position (the app's models capture 14-55 % of it)."""
    both = config.has_encoder and config.has_decoder
    modules = config.n_layers * config.has_encoder + config.decoder_layers * config.has_decoder
    modules += config.decoder_layers if both else 0  # (cross-attention)
    per_module = (
        tokens * (config.n_heads + 2 * config.kv_heads) * config.head_dim
        + 3 * config.n_heads * tokens * tokens
        + 8 * tokens * config.d_model
    )
    return 4 * max(modules, 1) * per_module


def positions(config: ModelConfig, result: RunResult) -> int:
    """The positions a run's modules read: an encoder-decoder's both sides, a decoder's
    prompt and what it was fed after it (its target), an encoder's input."""
    if config.has_encoder and config.has_decoder:
        return len(result.source_ids) + len(result.target_ids)
    return max(len(result.source_ids), len(result.target_ids))


def start_turn() -> None:
    """The work on this thread starts its turn now (a tensor thread task's start)."""
    _TURN.set([time.monotonic()])


def give_way(threads: ThreadPoolExecutor, turn_s: float) -> float:
    """Called between two layers of a model pass on a tensor thread: where its work has
    run `turn_s` since it started or last gave way, the short runs waiting run now, here:
    one a client, in turn, as the tensor threads take clients (the pass is its client's
    one), TURN_CLIENTS at most, and none started once they have taken TURN_CLIENTS turns'
    time. The seconds they took (0.0: none)."""
    turn = _TURN.get()
    if turn is None or lent() or not turn_s:
        return 0.0
    began = time.monotonic()
    queue = threads._work_queue  # type: ignore[attr-defined]
    if began - turn[0] < turn_s or not isinstance(queue, FairQueue):
        return 0.0
    for client, item in queue.take_between(TURN_CLIENTS):
        if time.monotonic() - began > TURN_CLIENTS * turn_s:  # (the pass's turn again)
            queue.put_back(client, item)
        else:
            _lend(queue, client, item)
    turn[0] = time.monotonic()
    return turn[0] - began


def _lend(queue: FairQueue, client: str, item: Any) -> None:
    """Run a waiting tensor thread task (a ThreadPoolExecutor's work item) in this
    thread's turn; back in the queue where it raises NotNow (its future still pending: a
    worker runs it later as any other), never lent a turn again."""
    future = item.future
    outcome: BaseException | None = None
    if not future.cancelled():
        with lending():
            try:
                value = item.fn(*item.args, **item.kwargs)
            except NotNow:
                item.fn.too_long = True
                queue.put_back(client, item)
                return
            except BaseException as exc:  # (as the executor's own worker does)
                outcome = exc
    queue.lent(client)
    if not future.set_running_or_notify_cancel():  # (cancelled: before, or meanwhile)
        return
    if outcome is not None:
        future.set_exception(outcome)
    else:
        future.set_result(value)
