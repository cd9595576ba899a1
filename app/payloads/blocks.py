"""The attention route's contract (POST /api/v1/attention): which blocks a client asks
for, and the blocks it gets, each one array in the wire encoding its kind is sent in."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, PrivateAttr, StrictBool, StrictInt

from .schemas import (
    MOST_LISTED,
    RAW,
    AttentionType,
    Encoding,
    Index,
    InputRequest,
    Kind,
    Position,
    _integral,
)

# The wire encoding the page asks for each kind of block (POST /api/v1/attention), sent to
# it in the boot JSON (its one table, static/js/encodings.js). u1 (a byte a value, x 255)
# holds [0, 1] only, so the server takes it for weights and the mask alone; raw scores are
# unbounded and keep full precision (f4); q, k and v are activations, f2 is enough to draw
# them, and so are the value-weighted norms (unbounded, drawn on their own scale).
ENCODING_OF_KIND: dict[Kind, Encoding] = {
    "weights": "u1",
    "mask": "u1",
    "scores": "f4",
    "q": "f2",
    "k": "f2",
    "v": "f2",
    "norms": "f2",
}


class AttentionRequest(InputRequest):
    types: list[AttentionType] | None = Field(
        None, min_length=1, max_length=MOST_LISTED, description="Default: all."
    )
    layers: list[Index] | None = Field(
        None, min_length=1, max_length=MOST_LISTED, description="Default: every layer."
    )
    heads: list[Index] | None = Field(
        None, min_length=1, max_length=MOST_LISTED, description="Default: every head."
    )
    kinds: list[Kind] = Field(
        ["weights"],
        min_length=1,
        max_length=MOST_LISTED,
        description="weights (after softmax), scores (scaled, before the mask), mask, q, k, v; "
        "norms: value-weighted attention (Kobayashi et al. 2020), per head the norm of what "
        "key j adds to query i, ‖α_ij f_h(x_j)‖ with f_h(x) = (x W_V^h + b_V^h) W_O^h (the "
        "value vector through the head's slice of the output projection; its bias belongs "
        "to no head): a weight on a token whose transformed value is small adds little. "
        "Whole heads, or windows and pooled cells like the weights (a long input's too), on "
        "either backend; refused where the "
        "attention's output is gated or normalized before its projection reads it.",
    )
    granularity: Literal["token", "word"] = Field(
        "token",
        description="word: WordPiece pieces merged into words (weights only, WordPiece models):"
        " a query word's row is the mean of its pieces' rows, a key word's column the sum.",
    )
    hide_special: StrictBool = Field(
        False,
        description="Drop [CLS] and [SEP] rows and columns and renormalise each row to 1 "
        "(weights only).",
    )
    encoding: Encoding = Field(
        "json",
        description="json: nested lists; u1/f2/f4: plotly.js typed arrays "
        '{"dtype", "bdata" (base64), "shape"}. u1 (value x 255) only for weights and mask.',
    )
    rows: list[Position] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[start, stop): the query positions of a window (weights, scores, mask, "
        "norms); default all. A long input's head is read by windows: without pool each cell "
        "is one query and key, exact.",
    )
    columns: list[Position] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[start, stop): the key positions of a window; default all.",
    )
    pool: Annotated[StrictInt, Field(ge=1, le=4096), BeforeValidator(_integral)] | None = Field(
        None,
        description="At most this many cells per axis: each cell covers ceil(n / pool) "
        "positions (the last the rest) and holds the max or mean (reduce) of the exact values "
        "it covers; the block's row_edges and column_edges say where each cell starts.",
    )
    reduce: Literal["max", "mean"] = Field(
        "max",
        description="With pool: a cell's largest value (a sink or a diagonal stays visible at "
        "any size) or its mean (a row's cells times their widths sum to its weight there).",
    )
    repeat_tokens: StrictBool = Field(
        True,
        description="false: a block whose rows or columns are the response's source_tokens "
        "or target_tokens names that side (rows_from, columns_from) instead of repeating "
        "the list, and leaves predicted to the response's predicted_tokens (at 16 tokens "
        "the lists are a fifth of an all-heads u1 answer).",
    )


class TypedArray(BaseModel):
    dtype: Literal["u1", "f2", "f4"]
    bdata: str = Field(description="Base64 of the little-endian values, row-major.")
    shape: str = Field(description='Comma-separated sizes, e.g. "12,10,10".')


class Deferred(BaseModel):
    """A model whose large float fields may be held as arrays (`_floats`, by field name),
    written into its JSON a few rows a call (wire.json_with_arrays), not validated as
    millions of floats and dumped in one call that holds the GIL."""

    _floats: dict[str, Any] = PrivateAttr(default_factory=dict)


class Block(Deferred):
    """The requested heads of one attention type, layer and kind, stacked: one array."""

    type: AttentionType
    layer: int
    kind: Kind
    heads: list[int] | None = Field(
        description="The head of each entry of the first axis, in order; null for kind mask, "
        "which is the same for every head and sent once (first axis of size 1). For k and "
        "v these are key/value heads: with grouped-query attention (kv_heads < query_heads) "
        "the ones the requested query heads read, query head h reading h // (query_heads / "
        "kv_heads)."
    )
    rows: list[str] | None = Field(
        description="Token of each row (queries; keys for k and v): for decoder rows, the "
        "token fed in at that step; null where rows_from names the list."
    )
    rows_from: Literal["source", "target"] | None = Field(
        None,
        description="With repeat_tokens false: the rows are the response's source_tokens or "
        "target_tokens (and for decoder rows, predicted its predicted_tokens).",
    )
    predicted: list[str] | None = Field(
        None,
        description="Decoder rows only (decoder.self and decoder.cross; not k and v): the "
        "token each row's step predicts, which the page labels cross-attention rows by; "
        "null where rows are not decoder steps.",
    )
    columns: list[str] | None = Field(
        description="Token of each column (keys); null for q, k, v, whose columns are dims, "
        "and where columns_from names the list."
    )
    columns_from: Literal["source", "target"] | None = Field(
        None, description="With repeat_tokens false: the columns are that side's tokens."
    )
    row_edges: list[int] | None = Field(
        None,
        description="A window or pooled block (rows, columns, pool asked, or a long input): the "
        "position where each row cell starts, then where the last ends (rows_from names the "
        "token list they index; consecutive positions: one token per cell).",
    )
    column_edges: list[int] | None = Field(
        None, description="The same for the columns (columns_from names their token list)."
    )
    reduce: Literal["max", "mean"] | None = Field(
        None, description="Pooled blocks: what each cell holds of the values it covers."
    )
    shape: list[int] = Field(description="[heads, rows, columns]; columns are d_head for q/k/v.")
    data: list[list[list[float]]] | TypedArray


class AttentionResponse(BaseModel):
    model: str
    source_tokens: list[str]
    source_raw: list[str] = Field([], description=RAW.format(side="source_tokens"))
    target_tokens: list[str]
    target_raw: list[str] = Field([], description=RAW.format(side="target_tokens"))
    predicted_tokens: list[str] = Field(
        [], description="Per decoder position, the token its step predicts (see analyze)."
    )
    truncated: bool
    encoding: Encoding
    computed_in: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="The dtype the values sent were computed in: the model's own (its eager "
        "attention's rounding) for a short input; float32 for a long input's windows and "
        "pooled blocks, recomputed from the model's q and k (see precision).",
    )
    precision: str = Field("", description="What computed_in means for this answer, in words.")
    blocks: list[Block] = Field(description="One block per requested type, layer and kind.")
