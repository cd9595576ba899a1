"""Direct logit attribution: how much each head, each feed-forward block and the
embeddings push the prediction at a position towards one token rather than another. Each
term of the residual stream is read through the final norm with the position's scale held
at what the model computed (as TransformerLens's `apply_ln_to_stack`), on the difference
of the two tokens' unembeddings: W_U[target] − W_U[baseline]. A head's term is its output
at the position, Σ_j α_ij f(x_j) (its weights times its value vectors through its slice
of the output projection). The terms sum to logit[target] − logit[baseline]: the default
is the predicted token against the runner-up. Only the direct path: what a head does
through later layers is not counted here."""

from __future__ import annotations

from pydantic import BaseModel, Field

from attnviz.model.methods.lens import attribute

from ..errors import CannotServe
from ..payloads.schemas import Index, TextRequest, TokenId
from .context import LabContext
from .lens import Guess, guesser, position_of, stream_of


class DlaRequest(TextRequest):
    position: Index | None = Field(None, description="The position read (default: the last).")
    target: TokenId | None = Field(None, description="Token id (default: the predicted one).")
    baseline: TokenId | None = Field(
        None, description="Token id compared against (default: the runner-up)."
    )


class DlaResponse(BaseModel):
    model: str
    tokens: list[str] = Field(description="The input's tokens, one per position.")
    raw_tokens: list[str] = Field(description="The same as the tokenizer spells them.")
    position: int
    target: Guess
    baseline: Guess
    logit_diff: float = Field(description="logit[target] − logit[baseline], the model's own.")
    heads: list[list[float]] = Field(description="[layer][head]: each head's direct effect.")
    attention_bias: list[float] = Field(
        description="Per layer, the attention output projection's bias (it belongs to no head)."
    )
    feed_forward: list[float] = Field(description="Per layer, the feed-forward block's.")
    embeddings: float = Field(description="The token (and position) embeddings'.")
    biases: float = Field(description="The final norm's and the unembedding's biases'.")
    total: float = Field(description="The sum of every term: equal to logit_diff.")
    candidates: list[Guess] = Field(
        description="The ten most likely tokens at the position: targets and baselines to pick."
    )


def dla(ctx: LabContext, req: DlaRequest) -> DlaResponse:
    tokens = ctx.result.target_tokens
    position = position_of(req.position, tokens)
    stream = stream_of(ctx)
    logits = stream.logits[position]
    size = logits.numel()
    for name, asked in (("target", req.target), ("baseline", req.baseline)):
        if asked is not None and asked >= size:
            raise CannotServe(f"{name} {asked} out of range: the vocabulary has 0..{size - 1}")
    ranked = logits.argsort(descending=True).tolist()
    target = req.target if req.target is not None else ranked[0]
    baseline = req.baseline
    if baseline is None:
        baseline = ranked[1] if ranked[0] == target else ranked[0]
    if baseline == target:
        raise CannotServe("target and baseline are the same token: nothing to compare")
    spec = ctx.spec("decoder.self")
    try:
        made = attribute(ctx.model, stream, ctx.result.captured, spec, position, target, baseline)
    except ValueError as exc:
        raise CannotServe(f"{ctx.entry.id}: {exc}") from None
    probs = logits.softmax(-1)
    named = guesser(ctx)

    def guess(i: int) -> Guess:
        return named(i, float(probs[i]))

    return DlaResponse(
        model=ctx.entry.id,
        tokens=tokens,
        raw_tokens=ctx.result.raw("target"),
        position=position,
        target=guess(target),
        baseline=guess(baseline),
        logit_diff=made.logit_diff,
        heads=made.heads,
        attention_bias=made.attention_bias,
        feed_forward=made.feed_forward,
        embeddings=made.embeddings,
        biases=made.biases,
        total=made.total,
        candidates=[guess(i) for i in ranked[:10]],
    )
