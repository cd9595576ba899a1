"""Generation: what a request to continue a prompt is and answers (its schemas), and
`Generation`, one request's prompt read and checked with its steps as they come. The
routes (app/edge/routes/generate.py) answer it whole or stream it."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Generator
from typing import Literal, cast

from pydantic import BaseModel, Field, StrictFloat

from attnviz.model.outputs import output_of
from attnviz.model.patches import PicturePrompt
from attnviz.model.pretrained.causal import Sampling, Step
from attnviz.model.runner import PictureGeneratingRunner, generating

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe
from ..payloads.schemas import Alternative, InputRequest, NewTokens, Whole
from ..request import charge
from .answers import raw_piece
from .inference import Inference, stop_if_cancelled, work_units
from .inputs import check_input
from .reading import read_text, text_limit

log = logging.getLogger("attnviz.generate")


class GenerateRequest(InputRequest):
    max_new_tokens: NewTokens | None = Field(
        None,
        description="Tokens to add at most (it stops earlier at the end-of-turn token); "
        "default: what the server's ATTNVIZ_MAX_NEW_TOKENS (64) leaves after `continuation`; "
        "more than that: 422.",
    )
    temperature: StrictFloat = Field(
        0.0, ge=0.0, le=5.0, description="0: greedy (the likeliest token each step); else sampled."
    )
    top_k: Whole = Field(0, ge=0, le=1_000_000, description="Sample among the k likeliest; 0: all.")
    top_p: StrictFloat = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="Sample among the likeliest tokens whose probability reaches p; 1: all.",
    )
    seed: Whole = Field(0, ge=0, le=2**53, description="The same seed draws the same tokens.")


class GeneratedStep(BaseModel):
    index: int = Field(description="Its position in the sequence (prompt, then generated).")
    id: int
    token: str = Field(description="The token alone, as people read it.")
    raw: str | None = Field(
        None, description='The token as the tokenizer spells it ("Ġthe"); null: as token.'
    )
    probability: float = Field(description="Its probability in the model's distribution.")
    top: list[Alternative] = Field(description="The 10 likeliest tokens at this step.")
    text: str = Field(description="The continuation decoded so far, this token included.")


class GenerateResponse(BaseModel):
    model: str
    prompt: str = Field(description="The prompt as the model read it (chat: templated).")
    prompt_tokens: list[str]
    truncated: bool = Field(description="The prompt was longer than the model reads: cut.")
    continuation: list[int] = Field(
        description="Every token id after the prompt (the request's continuation, then the "
        "new ones): send it back with the same text to analyze, attention, export and the "
        "lab to see the attention of the whole sequence."
    )
    tokens: list[str] = Field(description="The new tokens as people read them, in context.")
    text: str = Field(description="The new tokens decoded.")
    steps: list[GeneratedStep]
    stop: Literal["end-of-turn", "max_new_tokens", "context", "stopped"] = Field(
        description="Why it stopped: the model ended its turn, the token limit, its context, "
        "or its client asked it to stop (/generate/stop)."
    )


class Generation:
    """One request's generation: the prompt read and checked, and its steps as they come."""

    def __init__(self, inference: Inference, req: GenerateRequest) -> None:
        self.entry: ModelEntry = inference.entry(req.model)
        self.inference = inference
        self.progress = inference.progress
        runner = self.entry.runner
        if runner.capabilities.generation:
            runner = self.entry.loaded_runner()  # held for the whole generation
        if not runner.capabilities.generation:
            raise CannotServe(
                f"{self.entry.id} does not continue a prompt (generation is for models "
                f"that do). {output_of(runner).said}",
            )
        generator = generating(runner)
        limit = inference.settings.max_new_tokens
        # default: as many as the limit leaves after the continuation continued
        room = limit - len(req.continuation)
        self.max_new_tokens = room if req.max_new_tokens is None else req.max_new_tokens
        if self.max_new_tokens > limit:
            raise CannotServe(
                f"max_new_tokens is {self.max_new_tokens}; the limit is {limit} "
                "(ATTNVIZ_MAX_NEW_TOKENS)",
            )
        picture = inference.picture(req.image)
        check_input(self.entry, req.text, picture)
        limit_ = text_limit(inference.settings, self.entry.runner)
        self.text = text = "" if req.text is None else read_text(req.text, limit_)
        self.chat = req.chat
        inference.prompt_options(self.entry, req.chat, req.continuation)  # checked
        if picture is not None and req.chat:
            raise CannotServe(
                "a prompt with a picture is read as written: no chat turn is read with one yet"
            )
        if self.max_new_tokens < 1 or len(req.continuation) + self.max_new_tokens > limit:
            raise CannotServe(
                f"continuation ({len(req.continuation)}) and max_new_tokens "
                f"({self.max_new_tokens}) add up to more than the limit of {limit} "
                "(ATTNVIZ_MAX_NEW_TOKENS): the answer's continuation could not be sent back",
            )
        # a picture's prompt (a vision-language model's): its ids and the pixels its
        # first pass reads beside them
        self.read: PicturePrompt | None = None
        try:
            if picture is None:
                self.prompt, self.ids, self.truncated, self.length = generator.prompt(
                    text, req.chat
                )
            else:
                self.read = cast(PictureGeneratingRunner, generator).read_prompt(
                    picture.pixels, req.text
                )
                self.prompt, self.ids = self.read.prompt, self.read.ids
                self.truncated, self.length = False, len(self.ids)
        except ValueError as exc:
            raise CannotServe(f"text cannot be read: {exc}") from exc
        self.runner = generator
        # priced before it runs: the prompt's pass, then a token a step
        tokens = len(self.ids) + len(req.continuation) + self.max_new_tokens
        charge(
            work_units(self.entry.config, tokens),
            f"a generation of {self.max_new_tokens} tokens after {len(self.ids):,}",
        )
        self.before = list(req.continuation)  # generated earlier, continued now
        self.sampling = Sampling(req.temperature, req.top_k, req.top_p, req.seed)
        self.new: list[int] = []
        self.stop = "max_new_tokens"
        # a sequence read by the long path: the generation's passes are kept as its run, so
        # that showing it (analyze with the continuation) does not read the prompt again
        self.record = generator.recording(self.ids, self.before, self.max_new_tokens)
        self.stopping = threading.Event()  # set by /generate/stop: no step more

    def steps(self) -> Generator[Step, None, None]:
        """The runner's steps (each one model call), recording the tokens and the stop."""
        start = [*self.ids, *self.before]
        context = self.entry.config.max_seq_len
        made = self.runner.generate(
            start, self.max_new_tokens, self.sampling, record=self.record,
            inputs=self.read.inputs if self.read is not None else None,
        )  # fmt: skip
        # the prompt's pass (a long prompt's takes seconds): its progress by layer, and a
        # stop at the next layer if its client goes away
        with self.progress.watching(self.runner.model, stop_if_cancelled):
            first = next(made, None)
        for step in itertools.chain([] if first is None else [first], made):
            self.new.append(step.token_id)
            if step.token_id in self.runner.stop_ids:
                self.stop = "end-of-turn"
            yield step
            if self.stopping.is_set():
                self.stop = "stopped"
                break
            follows = len(self.new) < self.max_new_tokens and len(start) + len(self.new) < context
            if self.stop != "end-of-turn" and follows:  # (another step: stopped first where
                stop_if_cancelled()  # its client has gone or the job's deadline is spent)
        if self.stop not in ("end-of-turn", "stopped") and len(start) + len(self.new) >= context:
            self.stop = "context"
        self.keep_run()

    def keep_run(self) -> None:
        """The sequence's run from the generation's own passes, in the run cache as the run
        of its text and continuation: the page shows it without reading the prompt again."""
        if self.record is None or not self.new:
            return
        generated = [*self.before, *self.new]
        result = self.runner.recorded(
            self.prompt, self.ids, generated, self.record, self.truncated, self.length
        )
        if result is None:
            return
        key = self.inference.run_key(self.entry, self.text, self.chat, generated)
        self.inference.keep(key, result)
        log.info(
            "generation kept its run: %d tokens read once (%d prompt, %d generated)",
            len(result.source_ids),
            len(self.ids),
            len(generated),
        )

    def step_answer(self, step: Step) -> GeneratedStep:
        vocab = self.runner.target_vocabulary()
        raw = raw_piece(self.runner, vocab.__getitem__)
        return GeneratedStep(
            index=step.index,
            id=step.token_id,
            token=vocab[step.token_id],
            raw=raw(step.token_id),
            probability=round(step.probability, 6),
            top=[
                Alternative(id=i, token=vocab[i], probability=round(p, 6), raw=raw(i))
                for i, p in step.top
            ],
            text=self.runner.decode(self.new),
        )

    def answer(self, steps: list[GeneratedStep]) -> GenerateResponse:
        shown = self.runner.shown([*self.ids, *self.before, *self.new])
        if self.read is not None:  # (its image tokens named by their patches: "▦ 3,5")
            shown = self.read.shown(shown)
        return GenerateResponse(
            model=self.entry.id,
            prompt=self.prompt,
            prompt_tokens=shown[: len(self.ids)],
            truncated=self.truncated,
            continuation=[*self.before, *self.new],
            tokens=shown[len(shown) - len(self.new) :] if self.new else [],
            text=self.runner.decode(self.new),
            steps=steps,
            stop=self.stop,
        )
