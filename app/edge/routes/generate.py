"""Generation: a prompt continued token by token, whole or streamed as server-sent events."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from ...errors import AttnvizError, NotFound
from ...payloads.schemas import Strict
from ...runs.generation import GeneratedStep, GenerateRequest, GenerateResponse, Generation
from ...runs.stepping import stepped
from ..logs import REQUEST_ID
from .deps import ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1", tags=["generation"])
log = logging.getLogger("attnviz.generate")


@router.post("/generate", responses=ERRORS)
async def generate(req: GenerateRequest, inference: InferenceDep) -> GenerateResponse:
    """Continue the prompt: greedy, or sampled (temperature, top-k, top-p, seed); each step
    with its token's probability and the 10 likeliest. Send `continuation` back with the
    text to see the whole sequence's attention. /generate/stream sends the steps as made."""
    generation = await inference.on_tensor_thread(Generation, inference, req)  # 4xx here
    inference.limiter.check()
    async with contextlib.aclosing(
        stepped(inference, generation.steps(), generation.stopping)
    ) as steps:
        made = [generation.step_answer(step) async for step in steps]
    return await inference.on_tensor_thread(generation.answer, made)


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

    async def events() -> AsyncIterator[bytes]:
        made: list[GeneratedStep] = []
        done = False
        try:
            async with contextlib.aclosing(
                stepped(inference, generation.steps(), generation.stopping)
            ) as steps:
                async for step in steps:
                    made.append(generation.step_answer(step))
                    yield event("step", made[-1].model_dump_json())
            answer = await inference.on_tensor_thread(generation.answer, made)
            yield event("done", answer.model_dump_json())
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
