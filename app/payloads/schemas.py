"""The public JSON contract: request and response models of every route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
)

from .text import Text

AttentionType = Literal["encoder.self", "decoder.self", "decoder.cross"]
Kind = Literal["weights", "scores", "mask", "q", "k", "v", "norms"]
Encoding = Literal["json", "u1", "f2", "f4"]
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


def _integral(value: Any) -> Any:
    """2.0 is the integer 2 in JSON (and JSON Schema); 2.5, NaN, true and "2" are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Index = Annotated[StrictInt, Field(ge=0, le=10_000), BeforeValidator(_integral)]
# a token position of a (long) input
Position = Annotated[StrictInt, Field(ge=0, le=1_000_000), BeforeValidator(_integral)]
# a token id of a model's vocabulary (checked against the model's size by the server)
TokenId = Annotated[StrictInt, Field(ge=0, le=10_000_000), BeforeValidator(_integral)]
# a whole number however JSON writes it (5 or 5.0), as JSON Schema's integer
Whole = Annotated[StrictInt, BeforeValidator(_integral)]
NewTokens = Annotated[StrictInt, Field(ge=1, le=4096), BeforeValidator(_integral)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(BaseModel):
    status: Literal["ok"]
    models: list[str] = Field(description="Ids of the loaded models.")


class RunProgressInfo(BaseModel):
    """How far the run of a request (by its `X-Request-ID`) has read."""

    tokens: int = Field(description="Tokens the run reads (0 until its first layer).")
    layers: int = Field(description="Layers it runs through (its attention modules).")
    layers_done: int = Field(description="Layers it has read so far.")
    finished: bool = Field(description="Whether its pass is over.")
    elapsed_s: float = Field(description="Seconds since it started.")
    left_s: float | None = Field(
        description="Seconds it is likely to take still, at the pace of its layers so far "
        "(null before its first layer is read)."
    )


class ErrorMessage(BaseModel):
    detail: str | list = Field(description="What was wrong and how to fix it.")


HeadRole = Literal["alignment", "previous-token", "first-token", "positional", "broad"]


class TextRequest(Strict):
    model: str | None = Field(
        None, description="Model id; the default model when left out.", examples=["pronounce"]
    )
    text: Text = Field(
        description="The sentence to analyse: not blank, no control characters, at most "
        "maxLength characters (the server's ATTNVIZ_MAX_TEXT_CHARS). Invisible characters "
        "(zero-width, direction marks, BOM) are left out, and it is read in Unicode NFC.",
        examples=["行走在银行"],
    )
    chat: StrictBool = Field(
        False,
        description="Models that continue a prompt: read the text as one user turn of the "
        "model's chat template (its system line, then the turn, then the assistant's cue) "
        "instead of as the raw prompt.",
    )
    continuation: list[TokenId] = Field(
        [],
        max_length=4096,
        description="Models that continue a prompt: the token ids generated after it, as "
        "/generate answered (`continuation`); the run then covers the prompt and them in "
        "one pass. At most the server's ATTNVIZ_MAX_NEW_TOKENS.",
    )


class AnalyzeRequest(TextRequest):
    compare: Text | None = Field(
        None,
        description="A second sentence: the answer gives the cosine similarity of the two "
        "sentence embeddings (models that make one).",
    )


class HeadSummary(BaseModel):
    type: AttentionType
    layer: int
    head: int
    entropy: float = Field(description="Mean over query rows of the weights' entropy, in bits.")
    max_weight: float = Field(description="Mean over query rows of the largest weight.")
    role: HeadRole | None = Field(
        None,
        description="What the head does on this input, by its metrics (model.methods.analysis."
        "head_roles): alignment, previous-token, first-token, positional or broad; null: "
        "none of these.",
    )


RAW = (
    "The tokenizer's own pieces, one per token of {side}: a byte-level token as it spells "
    'it ("Ġthe", shown as "␣the"), pronounce\'s space as " " (shown as "␣"); '
    "the tokens themselves where they are shown as spelled."
)


class Alternative(BaseModel):
    id: int
    token: str = Field(
        description="The token as people read it (byte-level pieces decoded, a space as ␣, "
        "a line break as ↵)."
    )
    probability: float
    raw: str | None = Field(
        None, description='The token as the tokenizer spells it ("Ġthe"); null: as token.'
    )


class NextTokens(BaseModel):
    position: int = Field(description="The step's position: fed target_tokens[position].")
    top: list[Alternative] = Field(description="The likeliest next tokens, most likely first.")


class MaskedTokens(BaseModel):
    position: int = Field(description="The [MASK]'s position in source_tokens.")
    top: list[Alternative] = Field(description="The 5 likeliest tokens there, most likely first.")


class Piece(BaseModel):
    """One piece of a text as the model decoded it: its source and decoder positions."""

    source: tuple[int, int] = Field(
        description="[start, end) of its source tokens (source_tokens)."
    )
    target: tuple[int, int] = Field(
        description="[start, end) of its decoder positions (target_tokens): its <bos> and "
        "its output."
    )
    ended: bool = Field(
        description="The model ended its output (predicted <eos>); false: the output was "
        "stopped at its length limit (3 × its source tokens + 10, at most the decoder's "
        "positions), and what it would have said next is not shown."
    )


class AnalyzeResponse(BaseModel):
    model: str
    text: str = Field(description="The text as the model read it (whitespace collapsed).")
    source_tokens: list[str] = Field(
        description="The tokens read, as people read them (byte-level: a space as ␣, a line "
        "break as ↵, a tab as ⇥, another invisible character as ‹U+00A0›)."
    )
    source_raw: list[str] = Field([], description=RAW.format(side="source_tokens"))
    target_tokens: list[str] = Field(
        description="Decoder positions: <bos> and the output; empty for an encoder-only model."
    )
    target_raw: list[str] = Field([], description=RAW.format(side="target_tokens"))
    predicted_tokens: list[str] = Field(
        [],
        description="Per decoder position (target_tokens), the token the model predicts at "
        "that step in the captured pass (its argmax): the step fed target_tokens[i] predicts "
        "predicted_tokens[i], which is what the decoding made at that step. A text decoded in "
        "one piece: target_tokens shifted by one, ending in <eos>; in several (pieces), each "
        "piece's last step predicts its <eos> and the next piece opens with its own <bos>. "
        "Empty for an encoder-only model.",
    )
    pieces: list[Piece] = Field(
        [],
        description="A model that decodes its output step by step (an encoder-decoder): the "
        "pieces it decoded the text in, in order. pronounce was trained on sentences of at "
        "most 40 characters, so a longer text is decoded piece by piece (cut after a space "
        "or punctuation mark), and the captured pass reads the pieces as they were decoded: "
        "each piece's positions see only its own. Empty for other models.",
    )
    output: list[str] = Field(description="The model's output tokens (the transcription).")
    output_text: str = Field(
        description="The output tokens joined by spaces; a continuation: decoded to its text."
    )
    embedding: list[float] | None = Field(
        None, description="The sentence embedding, for a model that makes one (minilm)."
    )
    similarity: float | None = Field(
        None, description="Cosine similarity of the embeddings of text and compare."
    )
    truncated: bool = Field(
        description="The text had more than max_tokens (source_length says how many): its "
        "first max_tokens were read, the rest cut. (An output that stopped at its length "
        "limit is a piece whose `ended` is false.)"
    )
    source_length: int = Field(description="Source tokens before truncation.")
    unknown_tokens: int = Field(
        0,
        description="Source tokens the tokenizer could not read (the model info's "
        "unknown_token): what the model makes of them is a guess.",
    )
    next_tokens: list[NextTokens] = Field(
        [],
        description="Models that continue a prompt: at each step that generated a token of "
        "the continuation, and at the last position (the next token), the 10 likeliest "
        "tokens of the captured pass.",
    )
    masked: list[MaskedTokens] = Field(
        [],
        description="Masked-language models (BertForMaskedLM): at each [MASK] of the text, "
        "the 5 likeliest tokens; output is the likeliest at each, output_text the text with "
        "them filled in.",
    )
    summaries: list[HeadSummary]
    long: bool = Field(
        False,
        description="The input is long (over 512 tokens): no N x N matrix is kept; its heads "
        "are read by windows (/attention's rows, columns, pool) and its head summaries are "
        "computed in the background, a layer at a time: ask again for the rest.",
    )
    summaries_done: int = Field(0, description="Heads summarised so far (summaries' length).")
    summaries_total: int = Field(0, description="Heads to summarise in all.")


class ExportRequest(TextRequest):
    layers: list[Index] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="Only these layers' tensors (of every stack), with the embeddings and "
        "positions; default: every layer. An export over ATTNVIZ_MAX_RESPONSE_BYTES (float32, "
        "before compression) is a 422 that says so.",
    )


class AttentionRequest(TextRequest):
    types: list[AttentionType] | None = Field(None, min_length=1, description="Default: all.")
    layers: list[Index] | None = Field(None, min_length=1, description="Default: every layer.")
    heads: list[Index] | None = Field(None, min_length=1, description="Default: every head.")
    kinds: list[Kind] = Field(
        ["weights"],
        min_length=1,
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
    blocks: list[Block] = Field(description="One block per requested type, layer and kind.")
