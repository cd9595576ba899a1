"""Induction heads (Olsson et al. 2022): a random sequence of tokens repeated twice. In the
second copy each token can be predicted by finding its earlier occurrence and copying the
token that followed it; a head that attends from a token to the one after its earlier
occurrence is an induction head. Each head's induction and previous-token scores, the
heads ranked, and the loss on the second copy with the top induction heads switched off,
against the same number of other heads chosen at random."""

from __future__ import annotations

import math
from collections.abc import Generator

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import Tensor

import attnviz.app.lab.schemas as s
from attnviz.model.attention_types import AttentionSpec
from attnviz.model.hooks import HookFn, hooked
from attnviz.model.methods.analysis import ablate_heads
from attnviz.model.runner import generating

from ..errors import CannotServe
from ..payloads.schemas import TextRequest
from ..payloads.wire import encode
from .context import LabContext


class InductionRequest(TextRequest):
    """The text is not read: the experiment makes its own sequence."""

    length: int = Field(50, ge=8, le=256, description="Tokens in each copy of the sequence.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Of the random tokens and the control.")
    ablate: int = Field(5, ge=1, le=32, description="How many top induction heads to switch off.")


class InductionHead(BaseModel):
    layer: int
    head: int
    induction: float = Field(
        description="Mean weight from a token of the second copy on the token after its "
        "earlier occurrence."
    )
    previous: float = Field(description="Mean weight on the token just before.")


class InductionResponse(BaseModel):
    model: str
    length: int
    seed: int
    tokens: list[str] = Field(description="The sequence: length random tokens, twice.")
    ids: list[int] = Field(description="Their ids, to run the sequence elsewhere.")
    heads: list[InductionHead] = Field(description="Every head, by induction score, highest first.")
    loss_first: float = Field(description="Mean next-token loss (nats) over the first copy.")
    loss_second: float = Field(
        description="The same over the second copy (its tokens after the first: those that "
        "can be copied from the first)."
    )
    chance_loss: float = Field(description="ln(vocabulary size): a uniform guess's loss.")
    ablated: list[s.HeadRef] = Field(description="The top induction heads, switched off.")
    loss_second_ablated: float = Field(description="The second copy's loss with them off.")
    control: list[s.HeadRef] = Field(
        description="As many other heads, drawn at random (seeded): the control."
    )
    loss_second_control: float = Field(description="The second copy's loss with those off.")
    copying_is_theirs: bool = Field(
        description="The claim, as measured: switching the top heads off raises the second "
        "copy's loss by more than 1 nat and more than twice what the random heads' raise it."
    )
    patterns: list[s.Matrix] = Field(
        description="The weights (2·length x 2·length) of the first ablated heads (up to 5)."
    )


SHOWN_PATTERNS = 5  # the top heads whose weights on the sequence the answer carries
# the claim holds where switching the top heads off raises the second copy's loss by more
# than this many nats and more than this many times what the random heads' raise it
CLAIM_NATS, CLAIM_RATIO = 1.0, 2.0


def induction(ctx: LabContext, req: InductionRequest) -> Generator[None, None, InductionResponse]:
    """The request checked (its 422s now, before a run slot is taken), then the
    experiment in steps (its three passes: its route runs each in a run slot of its own,
    `LabRoute.stepped`)."""
    spec = ctx.spec("decoder.self")
    n = req.length
    if 2 * n > ctx.runner.max_tokens:
        raise CannotServe(
            f"length {n} repeated twice is longer than {ctx.entry.id} reads "
            f"({ctx.runner.max_tokens} tokens): at most {ctx.runner.max_tokens // 2}",
        )  # fmt: skip
    return passes(ctx, req, spec)


def passes(
    ctx: LabContext, req: InductionRequest, spec: AttentionSpec
) -> Generator[None, None, InductionResponse]:
    """The experiment's steps: the sequence's pass, then with the top heads off, then with
    the control heads off."""
    n = req.length
    generator = torch.Generator().manual_seed(req.seed)
    ids = sequence(ctx, n, generator)
    names = [spec.hook(i, "hook_weights") for i in range(spec.layers)]
    with torch.no_grad(), hooked(ctx.model, names) as capture:
        logits = ctx.model(ids)
    yield
    weights = torch.stack([capture[name][0] for name in names])  # (L, H, 2n, 2n)
    ind, prev = scores(weights, n)
    ranked = sorted(
        ((layer, head) for layer in range(spec.layers) for head in range(spec.query_heads)),
        key=lambda lh: -float(ind[lh]),
    )
    k = min(req.ablate, len(ranked) - 1)
    top = ranked[:k]
    others = ranked[k:]
    picks = torch.randperm(len(others), generator=generator)[:k].tolist()
    control = sorted(others[i] for i in picks)
    loss = copy_losses(logits, ids, n)
    ablated = copy_losses(run_without(ctx, spec, top, ids), ids, n)
    yield
    controlled = copy_losses(run_without(ctx, spec, control, ids), ids, n)
    raised, control_raised = ablated[1] - loss[1], controlled[1] - loss[1]

    def ref(head: tuple[int, int]) -> s.HeadRef:
        return s.HeadRef(type=spec.type, layer=head[0], head=head[1])

    return InductionResponse(
        model=ctx.entry.id,
        length=n,
        seed=req.seed,
        tokens=generating(ctx.runner).shown(ids[0].tolist()),
        ids=ids[0].tolist(),
        heads=[
            InductionHead(
                layer=layer,
                head=head,
                induction=round(float(ind[layer, head]), 6),
                previous=round(float(prev[layer, head]), 6),
            )
            for layer, head in ranked
        ],
        loss_first=loss[0],
        loss_second=loss[1],
        chance_loss=round(math.log(len(generating(ctx.runner).target_vocabulary())), 6),
        ablated=[ref(lh) for lh in top],
        loss_second_ablated=ablated[1],
        control=[ref(lh) for lh in control],
        loss_second_control=controlled[1],
        copying_is_theirs=raised > CLAIM_NATS and raised > CLAIM_RATIO * max(control_raised, 0),
        patterns=[encode(weights[layer, head], "json") for layer, head in top[:SHOWN_PATTERNS]],
    )


def sequence(ctx: LabContext, n: int, generator: torch.Generator) -> Tensor:
    """(1, 2n): n tokens drawn uniformly from the vocabulary's ordinary tokens, twice."""
    specials = ctx.runner.special_tokens
    vocab = generating(ctx.runner).target_vocabulary()
    ordinary = torch.tensor([i for i, tok in enumerate(vocab) if tok not in specials])
    drawn = ordinary[torch.randint(len(ordinary), (n,), generator=generator)]
    return torch.cat([drawn, drawn]).unsqueeze(0)


def scores(weights: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Per (layer, head): the induction score, the mean weight from each token of the second
    copy (position n + j) on the token after its earlier occurrence (j + 1); and the
    previous-token score, the mean weight on the token just before, over the sequence."""
    j = torch.arange(n)
    induction = weights[..., n + j, j + 1].mean(-1)
    i = torch.arange(1, 2 * n)
    previous = weights[..., i, i - 1].mean(-1)
    return induction, previous


def copy_losses(logits: Tensor, ids: Tensor, n: int) -> tuple[float, float]:
    """Mean cross-entropy (nats) of the next token over the first copy (tokens 1..n-1) and
    over the second (tokens n+1..2n-1: those an induction head can copy; token n, the
    second copy's first, follows nothing seen before)."""
    per_token = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")  # predicts 1..
    first = per_token[: n - 1].mean()
    second = per_token[n:].mean()
    return round(float(first), 6), round(float(second), 6)


def without(spec, heads: list[tuple[int, int]]) -> list[tuple[str, HookFn]]:
    """Hook functions that zero these (layer, head)s' outputs."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    return [(spec.hook(layer, "hook_context"), ablate_heads(hs)) for layer, hs in by_layer.items()]


def run_without(ctx: LabContext, spec, heads: list[tuple[int, int]], ids: Tensor) -> Tensor:
    """The logits of the sequence with these heads' outputs zeroed."""
    with torch.no_grad(), hooked(ctx.model, fwd_hooks=without(spec, heads), capture=False):
        return ctx.model(ids)
