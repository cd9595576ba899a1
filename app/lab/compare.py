"""One head for two inputs, or two models, with the difference where tokens match."""

from __future__ import annotations

import difflib

import torch
from pydantic import BaseModel, Field

import attnviz.app.lab.schemas as s

from ..payloads.schemas import AttentionType
from ..payloads.text import Text
from ..payloads.wire import encode
from .context import LabContext


class CompareRequest(s.HeadRequest):
    other_text: Text | None = Field(None, description="Default: the same text.")
    other_model: str | None = Field(None, description="Default: the same model.")


class CompareResponse(BaseModel):
    models: list[str]
    type: AttentionType
    layer: int
    head: int
    first_rows: list[str]
    first_predicted: list[str] | None = Field(
        None, description="Where rows are decoder steps: the token each predicts."
    )
    first_columns: list[str]
    first: s.Matrix
    second_rows: list[str]
    second_predicted: list[str] | None = Field(
        None, description="The second run's own predictions, per step."
    )
    second_columns: list[str]
    second: s.Matrix
    aligned_rows: list[str] = Field(description="Tokens matched in both inputs, in order.")
    aligned_predicted: list[str] | None = Field(
        None, description="The first run's predictions at the aligned rows."
    )
    aligned_columns: list[str]
    difference: s.Matrix = Field(description="first - second on the aligned tokens.")


def compare(first: LabContext, req: CompareRequest) -> CompareResponse:
    """One head of two inputs (or two models), and its difference where tokens match."""
    other_text = req.text if req.other_text is None else req.other_text
    # the same input, prompt options included, unless another text is asked (or the
    # other model does not generate)
    other = first.inference.entry(req.other_model or req.model)
    same = req.other_text is None and other.runner.capabilities.generation
    prompt = (req.chat, req.continuation) if same else (False, ())
    second = LabContext(first.inference, other.id, other_text, *prompt)
    spec_a = first.spec(req.type)
    spec_b = second.spec(spec_a.type)
    first.check_head(spec_a, req.layer, req.head)
    second.check_head(spec_b, req.layer, req.head)
    a = first.weights(first.result.captured, spec_a, req.layer)[req.head].float()
    b = second.weights(second.result.captured, spec_b, req.layer)[req.head].float()
    rows_a, cols_a = first.tokens(spec_a)
    rows_b, cols_b = second.tokens(spec_b)
    ra, rb = matched(rows_a, rows_b)
    pred_a = first.predicted(spec_a)
    ca, cb = matched(cols_a, cols_b)
    difference = a[ra][:, ca] - b[rb][:, cb] if ra and ca else torch.zeros(0, 0)
    return CompareResponse(
        models=[first.entry.id, second.entry.id],
        type=spec_a.type,
        layer=req.layer,
        head=req.head,
        first_rows=rows_a,
        first_predicted=pred_a,
        first_columns=cols_a,
        first=encode(a, "json"),
        second_rows=rows_b,
        second_predicted=second.predicted(spec_b),
        second_columns=cols_b,
        second=encode(b, "json"),
        aligned_rows=[rows_a[i] for i in ra],
        aligned_predicted=[pred_a[i] for i in ra] if pred_a else None,
        aligned_columns=[cols_a[i] for i in ca],
        difference=encode(difference, "json"),
    )


def matched(a: list[str], b: list[str]) -> tuple[list[int], list[int]]:
    """Positions of the tokens two sequences share, in the first one's order: first the
    longest in-order matches (difflib, so an inserted word leaves the rest aligned), then
    among the tokens left over the k-th occurrence in `a` pairs with the k-th left in `b`
    (so a permutation aligns completely)."""
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    pairs = {block.a + k: block.b + k for block in blocks for k in range(block.size)}
    taken = set(pairs.values())
    left: dict[str, list[int]] = {}
    for j, token in enumerate(b):
        if j not in taken:
            left.setdefault(token, []).append(j)
    for i, token in enumerate(a):
        if i not in pairs and left.get(token):
            pairs[i] = left[token].pop(0)
    first = sorted(pairs)
    return first, [pairs[i] for i in first]
