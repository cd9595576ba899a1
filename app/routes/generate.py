"""Generation: a prompt continued token by token, whole or streamed as server-sent events."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from model.pretrained.causal import Sampling, Step

from ..runs import Inference, read_text
from ..schemas import Alternative, GeneratedStep, GenerateRequest, GenerateResponse
from ..zoo import ModelEntry
from .deps import ERRORS, InferenceDep, on_tensor_thread

router = APIRouter(prefix="/api/v1", tags=["generation"])
log = logging.getLogger("attnviz.generate")


class Generation:
    """One request's generation: the prompt read and checked, and its steps as they come."""

    def __init__(self, inference: Inference, req: GenerateRequest) -> None:
        self.entry: ModelEntry = inference.entry(req.model)
        runner = self.entry.runner
        if not runner.capabilities.generation:
            raise HTTPException(
                422,
                f"{self.entry.id} does not continue a prompt: it makes a "
                f"{runner.output_kind}; generation is for models that do",
            )
        limit = inference.settings.max_new_tokens
        # default: as many as the limit leaves after the continuation continued
        room = limit - len(req.continuation)
        self.max_new_tokens = room if req.max_new_tokens is None else req.max_new_tokens
        if self.max_new_tokens > limit:
            raise HTTPException(
                422,
                f"max_new_tokens is {self.max_new_tokens}; the limit is {limit} "
                "(ATTNVIZ_MAX_NEW_TOKENS)",
            )
        text = read_text(req.text, inference.settings.max_text_chars)
        inference.prompt_options(self.entry, req.chat, req.continuation)  # checked
        if self.max_new_tokens < 1 or len(req.continuation) + self.max_new_tokens > limit:
            raise HTTPException(
                422,
                f"continuation ({len(req.continuation)}) and max_new_tokens "
                f"({self.max_new_tokens}) add up to more than the limit of {limit} "
                "(ATTNVIZ_MAX_NEW_TOKENS): the answer's continuation could not be sent back",
            )
        try:
            self.prompt, self.ids, self.truncated, _ = runner.prompt(text, req.chat)
        except ValueError as exc:
            raise HTTPException(422, f"text cannot be read: {exc}") from exc
        self.runner = runner
        self.before = list(req.continuation)  # generated earlier, continued now
        self.sampling = Sampling(req.temperature, req.top_k, req.top_p, req.seed)
        self.new: list[int] = []
        self.stop = "max_new_tokens"

    def steps(self) -> Iterator[Step]:
        """The runner's steps (each one model call), recording the tokens and the stop."""
        start = [*self.ids, *self.before]
        context = self.entry.config.max_seq_len
        for step in self.runner.generate(start, self.max_new_tokens, self.sampling):
            self.new.append(step.token_id)
            if step.token_id in self.runner.stop_ids:
                self.stop = "end-of-turn"
            yield step
        if self.stop != "end-of-turn" and len(start) + len(self.new) >= context:
            self.stop = "context"

    def step_answer(self, step: Step) -> GeneratedStep:
        vocab = self.runner.target_vocabulary()
        return GeneratedStep(
            index=step.index,
            id=step.token_id,
            token=vocab[step.token_id],
            probability=round(step.probability, 6),
            top=[Alternative(id=i, token=vocab[i], probability=round(p, 6)) for i, p in step.top],
            text=self.runner.tokenizer.decode(self.new, skip_special_tokens=False),
        )

    def answer(self, steps: list[GeneratedStep]) -> GenerateResponse:
        shown = self.runner.shown([*self.ids, *self.before, *self.new])
        return GenerateResponse(
            model=self.entry.id,
            prompt=self.prompt,
            prompt_tokens=shown[: len(self.ids)],
            truncated=self.truncated,
            continuation=[*self.before, *self.new],
            tokens=shown[len(shown) - len(self.new) :] if self.new else [],
            text=self.runner.tokenizer.decode(self.new, skip_special_tokens=False),
            steps=steps,
            stop=self.stop,
        )


@router.post("/generate", responses=ERRORS)
@on_tensor_thread
def generate(req: GenerateRequest, inference: InferenceDep) -> GenerateResponse:
    """Continue the prompt: greedy, or sampled (temperature, top-k, top-p, seed); each step
    with its token's probability and the 10 likeliest. Send `continuation` back with the
    text to see the whole sequence's attention. /generate/stream sends the steps as made."""
    generation = Generation(inference, req)
    with inference.limiter.slot():
        steps = [generation.step_answer(step) for step in generation.steps()]
    return generation.answer(steps)


def event(kind: str, body: str) -> bytes:
    return f"event: {kind}\ndata: {body}\n\n".encode()


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
            with inference.limiter.admission():  # counted among the runs while it streams
                while (step := await inference.on_tensor_thread(one)) is not None:
                    made.append(generation.step_answer(step))
                    yield event("step", made[-1].model_dump_json())
                yield event("done", generation.answer(made).model_dump_json())
                done = True
        except HTTPException as exc:  # e.g. the server too busy for the next step
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
