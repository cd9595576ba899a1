"""Needle in a haystack (Wu et al. 2024, "Retrieval Head Mechanistically Explains
Long-Context Factuality"): a pass key of random digits (seeded) hidden at a chosen depth of
a long filler text, and the model asked for it at the end (the pass-key prompt of Mohtashami
and Jaggi 2023). While the model writes its answer, a head copy-pastes a token of the key
when its strongest key at that step is that very token in the needle; its retrieval score
is the share of the key's tokens it copied. The heads ranked, and the answer again with the
top heads switched off, against as many other heads drawn at random (seeded)."""

from __future__ import annotations

import random
import sys
from collections.abc import Generator
from contextlib import nullcontext

import torch
from pydantic import BaseModel, Field
from torch import Tensor

import attnviz.app.lab.schemas as s
from attnviz.model.attention_types import AttentionSpec
from attnviz.model.hooks import HookFn, hooked
from attnviz.model.long import edges
from attnviz.model.runner import generating

from ..errors import CannotServe
from ..payloads.schemas import TextRequest
from ..runs.inference import stop_if_cancelled
from ..runs.progress import ProgressBoard
from .context import LabContext
from .induction import without


class NeedleRequest(TextRequest):
    """The text is not read: the experiment writes its own prompt."""

    length: int | None = Field(
        None, ge=128, le=1 << 20,
        description="Tokens of the prompt: the filler text with the needle in it, and the "
        "question. At most what the server reads of the model, less the answer's tokens. "
        "Default: 1,024, or that most where it is fewer.",
    )  # fmt: skip
    depth: float = Field(
        0.5, ge=0, le=1, description="Where the needle sits in the filler: 0 first, 1 last."
    )
    digits: int = Field(5, ge=3, le=12, description="Digits of the pass key.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Of the key and of the control heads.")
    ablate: int = Field(5, ge=1, le=32, description="How many top retrieval heads to switch off.")


class NeedleAnswer(BaseModel):
    text: str = Field(description="The model's greedy answer: the key's tokens and two more.")
    tokens: list[str]
    recalled: bool = Field(description="The answer starts with the pass key.")


class RetrievalHead(BaseModel):
    layer: int
    head: int
    retrieval: float = Field(
        description="The share of the key's tokens this head copy-pasted: at the step that "
        "wrote the token, its strongest key was that token in the needle (Wu et al. 2024)."
    )
    copied: list[int] = Field(description="Which of the key's tokens (0 = its first).")


class NeedleProfile(BaseModel):
    head: s.HeadRef
    values: list[float] = Field(
        description="Its weights over every position at the step shown, max-pooled: cell i "
        "is the largest weight on positions edges[i] to edges[i + 1] - 1."
    )
    edges: list[int]


class NeedleResponse(BaseModel):
    model: str
    length: int = Field(description="Tokens of the prompt.")
    depth: float
    seed: int
    key: str = Field(description="The pass key hidden in the filler.")
    needle: list[int] = Field(description="[start, stop) positions of the needle's sentence.")
    key_positions: list[int] = Field(description="[start, stop) positions of the key's tokens.")
    ids: list[int] = Field(description="The prompt's ids, to run it elsewhere.")
    question: str = Field(description="The prompt's last words, which the answer continues.")
    answer: NeedleAnswer
    heads: list[RetrievalHead] = Field(description="Every head, by retrieval score, highest first.")
    ablated: list[s.HeadRef] = Field(description="The top retrieval heads, switched off.")
    answer_ablated: NeedleAnswer = Field(description="The answer with them off.")
    control: list[s.HeadRef] = Field(
        description="As many other heads, drawn at random (seeded): the control."
    )
    answer_control: NeedleAnswer = Field(description="The answer with those off.")
    retrieval_is_theirs: bool = Field(
        description="The claim, as measured: the model recalls the key, still recalls it "
        "with the random heads off, and does not with the top retrieval heads off."
    )
    profile_step: int = Field(description="The answer's step the profiles are of (from 0).")
    profile_token: str = Field(description="The token that step wrote.")
    profiles: list[NeedleProfile] = Field(
        description="The top heads' (up to 3) weights over the prompt at that step."
    )


INTRO = (
    "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the pass key there."
)
FILLER = (
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
)
NEEDLE = (" The pass key is", "{key}", ". Remember it.")  # the key: its own tokens
QUESTION = " What is the pass key? The pass key is"
AFTER_KEY = 2  # answer tokens written after the key's
DEFAULT_LENGTH = 1024  # prompt tokens, where the model reads that many
PROFILE_CELLS = 1024  # cells of a head's row over the prompt (max-pooled)
SHOWN_PROFILES = 3


def needle(ctx: LabContext, req: NeedleRequest) -> Generator[None, None, NeedleResponse]:
    """The request checked (its 422s now, before a run slot is taken), then the
    experiment in steps (a token of an answer a step: its route runs each in a run slot
    of its own, `LabRoute.stepped`)."""
    spec = ctx.spec("decoder.self")
    rng = random.Random(req.seed)
    key = "".join(rng.choice("0123456789") for _ in range(req.digits))
    ids, needle_span, key_span = prompt(ctx, key, req.length, req.depth)
    steps = key_span[1] - key_span[0] + AFTER_KEY
    most = ctx.config.max_seq_len
    if len(ids) + steps > most:
        raise CannotServe(
            f"the prompt and its answer ({len(ids) + steps} tokens) are longer than "
            f"{ctx.entry.id} reads ({most}): at most {most - steps}",
        )  # fmt: skip
    return searched(ctx, req, spec, key, ids, needle_span, key_span)


def searched(
    ctx: LabContext,
    req: NeedleRequest,
    spec: AttentionSpec,
    key: str,
    ids: list[int],
    needle_span: tuple[int, int],
    key_span: tuple[int, int],
) -> Generator[None, None, NeedleResponse]:
    """The experiment's steps: the answer with the rows of every step, the heads ranked,
    the answers with the top heads and the control heads off."""
    runner = generating(ctx.runner)
    key_ids = ids[key_span[0] : key_span[1]]
    steps = len(key_ids) + AFTER_KEY
    written, rows = yield from answer(ctx, ids, steps, rows=True)
    # at each step, each head's strongest key: a copy where it is a token of the key in the
    # needle and the very token the step wrote
    sequence = ids + written
    copied = torch.zeros(spec.layers, spec.query_heads, len(key_ids), dtype=torch.bool)
    for token, step_rows in zip(written, rows, strict=True):
        strongest = torch.stack([step_rows[spec.hook(i, "hook_weights")][0, :, 0].argmax(-1)
                                 for i in range(spec.layers)])  # fmt: skip  # (L, H)
        for (layer, head), j in zip(heads_of(spec), strongest.flatten().tolist(), strict=True):
            if key_span[0] <= j < key_span[1] and sequence[j] == token:
                copied[layer, head, j - key_span[0]] = True
    score = copied.float().mean(-1)
    ranked = sorted(heads_of(spec), key=lambda lh: (-float(score[lh]), lh))
    k = min(req.ablate, len(ranked) - 1)
    top, others = ranked[:k], ranked[k:]
    generator = torch.Generator().manual_seed(req.seed)
    control = sorted(others[i] for i in torch.randperm(len(others), generator=generator)[:k])
    off, _ = yield from answer(ctx, ids, steps, off=without(spec, top))
    control_off, _ = yield from answer(ctx, ids, steps, off=without(spec, control))

    def said(tokens: list[int]) -> NeedleAnswer:
        text = runner.decode(tokens)
        return NeedleAnswer(
            text=text, tokens=runner.shown(tokens), recalled=text.strip().startswith(key)
        )

    def ref(head: tuple[int, int]) -> s.HeadRef:
        return s.HeadRef(type=spec.type, layer=head[0], head=head[1])

    plain, ablated, controlled = said(written), said(off), said(control_off)
    shown_step = min(len(key_ids) // 2, len(written) - 1)  # the key's middle token's step
    profiles = []
    for layer, head in ranked[:SHOWN_PROFILES]:
        row = rows[shown_step][spec.hook(layer, "hook_weights")][0, head, 0]
        values, cells = pooled(row)
        profiles.append(NeedleProfile(head=ref((layer, head)), values=values, edges=cells))
    return NeedleResponse(
        model=ctx.entry.id,
        length=len(ids),
        depth=req.depth,
        seed=req.seed,
        key=key,
        needle=list(needle_span),
        key_positions=list(key_span),
        ids=ids,
        question=QUESTION.strip(),
        answer=plain,
        heads=[
            RetrievalHead(
                layer=layer,
                head=head,
                retrieval=round(float(score[layer, head]), 6),
                copied=[i for i, hit in enumerate(copied[layer, head].tolist()) if hit],
            )
            for layer, head in ranked
        ],
        ablated=[ref(lh) for lh in top],
        answer_ablated=ablated,
        control=[ref(lh) for lh in control],
        answer_control=controlled,
        retrieval_is_theirs=plain.recalled and controlled.recalled and not ablated.recalled,
        profile_step=shown_step,
        profile_token=runner.shown([written[shown_step]])[0],
        profiles=profiles,
    )


def heads_of(spec) -> list[tuple[int, int]]:
    return [(layer, head) for layer in range(spec.layers) for head in range(spec.query_heads)]


def prompt(
    ctx: LabContext, key: str, length: int | None, depth: float
) -> tuple[list[int], tuple[int, int], tuple[int, int]]:
    """(the prompt's ids, the needle's [start, stop), the key's): the introduction, the
    filler repeated (the last time in part) to `length` tokens in all (default: 1,024, or
    the most the model reads) with the needle after
    `depth` of it, and the question. Each part is tokenized on its own, so the key's tokens
    are exactly its own."""
    runner = generating(ctx.runner)

    def ids(text: str, first: bool = False) -> list[int]:
        return runner.encode(text, None if first else False, limit=sys.maxsize)[0]

    intro, filler, question = ids(INTRO, first=True), ids(FILLER), ids(QUESTION)
    before, key_ids, after = (ids(part.format(key=f" {key}")) for part in NEEDLE)
    fixed = len(intro) + len(before) + len(key_ids) + len(after) + len(question)
    most = min(runner.max_tokens, ctx.config.max_seq_len - len(key_ids) - AFTER_KEY)
    if length is None:
        length = min(DEFAULT_LENGTH, most)
    if length > most:
        raise CannotServe(
            f"a prompt of {length:,} tokens is longer than this server reads of "
            f"{ctx.entry.id} with room for the answer: at most {most:,}",
        )  # fmt: skip
    repeats, rest = divmod(length - fixed, len(filler))
    if repeats < 1:
        raise CannotServe(f"length {length}: at least {fixed + len(filler)} tokens")
    first = round(repeats * depth)
    start = len(intro) + first * len(filler)
    needle_ids = before + key_ids + after
    tail = filler * (repeats - first) + filler[:rest]
    out = intro + filler * first + needle_ids + tail + question
    key_start = start + len(before)
    return out, (start, start + len(needle_ids)), (key_start, key_start + len(key_ids))


def answer(
    ctx: LabContext,
    ids: list[int],
    steps: int,
    rows: bool = False,
    off: list[tuple[str, HookFn]] | None = None,
) -> Generator[None, None, tuple[list[int], list[dict[str, Tensor]]]]:
    """The model's greedy answer (`steps` tokens, stop tokens or not), with the hook
    functions `off` (heads switched off), and, with `rows`, each step's new attention rows
    (name -> (1, H, 1, keys)); a step per token, each model call in a hook block of its
    own, the prompt's pass reporting its layers (and stopped at the next one if its client
    goes away)."""
    board: ProgressBoard = ctx.inference.progress
    made = generating(ctx.runner).generate(ids, steps, rows=rows, stop=False)
    written: list[int] = []
    found: list[dict[str, Tensor]] = []
    while True:
        stop_if_cancelled()
        watched = nullcontext() if written else board.watching(ctx.model, stop_if_cancelled)
        hooks = hooked(ctx.model, fwd_hooks=off, capture=False) if off else nullcontext()
        with watched, hooks:
            step = next(made, None)
        if step is None:
            return written, found
        written.append(step.token_id)
        found.append(step.rows)
        yield


def pooled(row: Tensor) -> tuple[list[float], list[int]]:
    """A row of weights max-pooled to at most PROFILE_CELLS cells, with their edges."""
    cells = edges(0, row.numel(), PROFILE_CELLS)
    width = cells[1] - cells[0]
    padded = torch.zeros(width * (len(cells) - 1))
    padded[: row.numel()] = row
    values = padded.view(-1, width).amax(-1)
    return [round(float(v), 7) for v in values], cells
