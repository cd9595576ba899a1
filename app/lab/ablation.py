"""Switch off heads and see the output change: the transcription and its tokens'
probabilities, or the sentence embedding's cosine to the original."""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s
from attnviz.model.hooks import hooked
from attnviz.model.methods.analysis import ablate_heads, cosine
from attnviz.model.runner import DecodedPiece, generating, stepwise
from attnviz.model.twins import model_inputs

from ..payloads.schemas import TextRequest
from .context import LabContext


class AblationRequest(TextRequest):
    ablate: list[s.HeadRef] = Field(
        max_length=1000,
        description="Heads to switch off.",
    )


class AblationResponse(BaseModel):
    model: str
    ablated: list[s.HeadRef] = Field(description="The heads switched off.")
    output: list[str] = Field(
        description="The model's output (transcription) as it is; a model that generates: "
        "its prediction at each step of the continuation and the next token."
    )
    ablated_output: list[str] = Field(description="The output with the heads switched off.")
    probability_tokens: list[str] = Field(
        description="The tokens of probabilities: each piece's output and its end (<eos>)."
    )
    probabilities: list[float] = Field(
        description="Each of those tokens' probability as the model decoded it (teacher-forced "
        "per piece)."
    )
    ablated_probabilities: list[float] = Field(
        description="The same tokens' probabilities with the heads off (teacher-forced)."
    )
    cosine: float | None = Field(
        description="Embedding models: cosine of the sentence embeddings with/without."
    )
    changed: bool


def ablation(ctx: LabContext, req: AblationRequest) -> AblationResponse:
    by_module: dict[str, list[int]] = {}
    for ref in req.ablate:
        spec = ctx.spec(ref.type)
        ctx.check_head(spec, ref.layer, ref.head)
        by_module.setdefault(spec.hook(ref.layer, "hook_context"), []).append(ref.head)
    hooks = [(name, ablate_heads(heads)) for name, heads in by_module.items()]
    on: list[float] = []
    off: list[float] = []
    labels: list[str] = []
    with torch.no_grad():
        decodes = ctx.runner.capabilities.kv_cache  # its output comes piece by piece
        parts = stepwise(ctx.runner).decoded_pieces(ctx.result) if decodes else []
        # a generating model: the same prompt (as read: chat-templated already) and the same
        # continuation, and what it predicts at each generated step and next
        with hooked(ctx.model, fwd_hooks=hooks, capture=False):
            if ctx.continuation:
                ablated = generating(ctx.runner).run(
                    ctx.result.text, capture=False, continuation=ctx.continuation
                )
            else:
                ablated = ctx.runner.run(ctx.result.text, capture=False)
            if parts:
                off, _ = probabilities(ctx, parts)
        if parts:
            on, labels = probabilities(ctx, parts)
    similarity = None
    if ablated.embedding is not None and ctx.result.embedding is not None:
        similarity = cosine(ablated.embedding, ctx.result.embedding)
    output, ablated_output = ctx.result.output_tokens, ablated.output_tokens
    if ctx.runner.capabilities.generation:  # the continuation is given: its predictions
        steps = len(ctx.continuation) + 1
        output = ctx.result.predicted_tokens[-steps:]
        ablated_output = ablated.predicted_tokens[-steps:]
    changed = ablated_output != output or (similarity is not None and similarity < 1 - 1e-6)
    return AblationResponse(
        model=ctx.entry.id,
        ablated=req.ablate,
        output=output,
        ablated_output=ablated_output,
        probability_tokens=labels,
        probabilities=on,
        ablated_probabilities=off,
        cosine=similarity,
        changed=changed,
    )


def probabilities(ctx: LabContext, parts: list[DecodedPiece]) -> tuple[list[float], list[str]]:
    """Teacher-forced, piece by piece as the model decoded them: the probability of each
    output token and of each piece's end, with their labels."""
    vocab, eos = stepwise(ctx.runner).target_vocabulary(), ctx.config.eos_id
    probs, labels = [], []
    for part in parts:
        tokens = part.target_ids
        inputs = model_inputs(ctx.config, part.source, torch.tensor([tokens]))
        logits = ctx.model(*inputs)[0]  # (T, V)
        wanted = [*tokens[1:], eos] if part.ended else tokens[1:]
        picked = logits.softmax(-1)[torch.arange(len(wanted)), torch.tensor(wanted)]
        probs += [round(float(p), 6) for p in picked]
        labels += [vocab[t] for t in wanted]
    return probs, labels
