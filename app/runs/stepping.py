"""Long work in steps: a generation, or a lab experiment that runs the model many times,
written as a generator that yields between its model calls, and run one step per tensor
thread task in a run slot of its own, so that other clients' requests run between its
steps. Held whole, a generation kept them waiting for its length, and three clients'
`needle` experiments on a 2,000-token prompt kept a fourth client's short request waiting
119 s (measured). Jobs in steps themselves run as many at once as runs, each holding its
state (a KV cache) between its steps.

A step must not leave a hook block (`hooked`) or a progress watch open across its
`yield`: the next step runs in another task's context, and the hooks of the model are
that context's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncGenerator, Generator
from typing import Any, TypeVar

from .inference import Inference

Y = TypeVar("Y")
R = TypeVar("R")


async def stepped(
    inference: Inference,
    steps: Generator[Y, None, Any],
    stopping: threading.Event | None = None,
) -> AsyncGenerator[Y, None]:
    """What `steps` yields, each step one tensor thread task in a run slot of its own.
    Counted among the runs (admitted) while it lasts, its steps never refused half way by
    a full queue; it starts when fewer such jobs than runs hold their state between steps
    (`Inference.stepping`); with `stopping`, its client may stop it (/generate/stop);
    stopped once its steps have run ATTNVIZ_RUN_DEADLINE_S in all (at the next layer: a
    422); closed after the step under way, if any."""
    turn = threading.Lock()  # a step and the closing never overlap
    done = object()
    spent = 0.0  # seconds its steps have run, against ATTNVIZ_RUN_DEADLINE_S

    def one() -> Any:
        nonlocal spent
        with turn, inference.limiter.running():
            began = time.monotonic()
            try:
                return next(steps, done)
            finally:
                spent += time.monotonic() - began

    def close() -> None:
        with turn:
            steps.close()

    stoppable = inference.stops.stoppable(stopping) if stopping else contextlib.nullcontext()
    deadline = inference.settings.run_deadline_s
    try:
        with inference.limiter.admission(), stoppable:
            async with inference.stepping:
                while (
                    step := await inference.on_tensor_thread_admitted(one, deadline - spent)
                ) is not done:
                    yield step
    finally:
        # after a step still running on a tensor thread, if any (this task may be
        # cancelled while it waits for one)
        inference.threads.submit(close)


async def finished(inference: Inference, steps: Generator[Any, None, R]) -> R:
    """The value `steps` returns, run to its end in steps (`stepped`)."""
    value: list[R] = []

    def keeping() -> Generator[Any, None, None]:
        value.append((yield from steps))

    async with contextlib.aclosing(stepped(inference, keeping())) as each:
        async for _ in each:
            pass
    return value[0]
