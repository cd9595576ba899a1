"""Generation: a prompt continued token by token, whole or streamed as server-sent events."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from attnviz.model.pretrained.causal import Step

from ...errors import AttnvizError, NotFound
from ...payloads.schemas import Strict
from ...runs.generation import GeneratedStep, GenerateRequest, GenerateResponse, Generation
from ...runs.inference import stop_if_cancelled
from ..logs import REQUEST_ID
from .deps import ERRORS, InferenceDep, on_tensor_thread

router = APIRouter(prefix="/api/v1", tags=["generation"])
log = logging.getLogger("attnviz.generate")


@router.post("/generate", responses=ERRORS)
@on_tensor_thread
def generate(req: GenerateRequest, inference: InferenceDep) -> GenerateResponse:
    """Continue the prompt: greedy, or sampled (temperature, top-k, top-p, seed); each step
    with its token's probability and the 10 likeliest. Send `continuation` back with the
    text to see the whole sequence's attention. /generate/stream sends the steps as made."""
    generation = Generation(inference, req)
    steps = []
    with inference.stops.stoppable(generation.stopping), inference.limiter.slot():
        for step in generation.steps():
            steps.append(generation.step_answer(step))
            stop_if_cancelled()  # its client went away: no step more
    return generation.answer(steps)


def event(name: str, body: str) -> bytes:
    return f"event: {name}\ndata: {body}\n\n".encode()


@router.post(
    "/generate/stream",
    responses={
        **ERRORS,
        200: {
            "content": {"text/event-stream": {}},
            "description": "Server-sent events: a `step` event (GeneratedStep) per token as "
            "it is made, then one `done` event (GenerateResponse), or an `error` event.",
        },
    },
    response_class=StreamingResponse,
)
async def generate_stream(req: GenerateRequest, inference: InferenceDep) -> StreamingResponse:
    """/generate, streamed: each step is sent as soon as the model has made it. A client
    that goes away stops the generation: no step is made after it."""
    generation = await inference.on_tensor_thread(Generation, inference, req)  # 4xx here
    # a 503 now where the server is full (a stream admitted a moment later can still find it
    # full when it starts: then its first event is an error event)
    inference.limiter.check()
    steps = generation.steps()
    turn = threading.Lock()  # a step and the closing never overlap

    def one() -> Step | None:
        with turn, inference.limiter.running():  # a run slot per step: others run between
            return next(steps, None)

    def close() -> None:
        with turn:
            steps.close()

    async def events() -> AsyncIterator[bytes]:
        made: list[GeneratedStep] = []
        done = False
        try:
            # counted among the runs while it streams; its client may stop it (/generate/stop)
            with inference.limiter.admission(), inference.stops.stoppable(generation.stopping):
                while (step := await inference.on_tensor_thread(one)) is not None:
                    made.append(generation.step_answer(step))
                    yield event("step", made[-1].model_dump_json())
                yield event("done", generation.answer(made).model_dump_json())
                done = True
        except AttnvizError as exc:  # e.g. the server too busy for the next step
            yield event("error", json.dumps({"detail": exc.detail}))
            done = True
        except Exception:
            log.exception("generation failed after %d steps", len(made))
            yield event("error", json.dumps({"detail": "the generation failed on the server"}))
            done = True
        finally:
            if not done:
                log.info("generation stopped after %d steps: the client went away", len(made))
            # after a step still running on a tensor thread, if any (this task may be
            # cancelled while it waits for one)
            inference.threads.submit(close)

    return StreamingResponse(events(), media_type="text/event-stream")


class StopRequest(Strict):
    request_id: str = Field(
        pattern=f"^{REQUEST_ID.pattern}$",
        description="The X-Request-ID its generation was sent with (by this client).",
    )


class StopResponse(BaseModel):
    stopping: Literal[True] = Field(
        description="It makes no step more: its stream ends with its `done` event (stop "
        '"stopped"), its tokens so far and their run kept.'
    )


@router.post("/generate/stop", responses=ERRORS)
async def stop(req: StopRequest, inference: InferenceDep) -> StopResponse:
    """Stop a generation under way after the step it is making: its tokens so far are
    answered, as at its end. Only the client that sent it, by its X-Request-ID."""
    if not inference.stops.stop(req.request_id):
        raise NotFound(f"no generation of yours is under way as {req.request_id}")
    return StopResponse(stopping=True)
