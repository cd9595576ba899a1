"""The public JSON contract: request and response models of every route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from attnviz.model.patches import PositionKind

from .text import Text

AttentionType = Literal["encoder.self", "decoder.self", "decoder.cross"]
Kind = Literal["weights", "scores", "mask", "q", "k", "v", "norms"]
Encoding = Literal["json", "u1", "f2", "f4"]


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
# the most items a list of layers or heads may have (the largest models have 126 layers
# and 128 heads); every list a request may hold is bounded, so that its validation is
# bounded too (an unbounded list of 40,000 wrong items was 40,000 errors, 3.6 MB)
MOST_LISTED = 1024
NewTokens = Annotated[StrictInt, Field(ge=1, le=4096), BeforeValidator(_integral)]


class Strict(BaseModel):
    """A request body: its fields and no others. A body with fields it does not have is
    one error naming the first (pydantic's extra="forbid" made an error a field: 20,000
    in a 250 KB body, 0.3 s of the event loop and a 1.8 MB answer)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [key for key in data if key not in cls.model_fields]
            if unknown:
                more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
                raise ValueError(
                    f"unknown field {str(unknown[0])[:60]!r}{more}; the fields are "
                    + ", ".join(cls.model_fields)
                )
        return data


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


TEXT_SAID = (
    "The sentence to analyse: not blank, no control characters, at most maxLength "
    "characters (the server's ATTNVIZ_MAX_TEXT_CHARS). Invisible characters (zero-width, "
    "direction marks, BOM) are left out, and it is read in Unicode NFC."
)
# a picture the server holds, by its digest (POST /api/v1/images answers it)
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", min_length=64, max_length=64)]


def model_field() -> Any:
    return Field(
        None, description="Model id; the default model when left out.", examples=["pronounce"]
    )


def chat_field() -> Any:
    return Field(
        False,
        description="Models that continue a prompt: read the text as one user turn of the "
        "model's chat template (its system line, then the turn, then the assistant's cue) "
        "instead of as the raw prompt.",
    )


def continuation_field() -> Any:
    return Field(
        [],
        max_length=4096,
        description="Models that continue a prompt: the token ids generated after it, as "
        "/generate answered (`continuation`); the run then covers the prompt and them in "
        "one pass. At most the server's ATTNVIZ_MAX_NEW_TOKENS.",
    )


class TextRequest(Strict):
    """A run of a text (the lab's experiments, generation: models that read text)."""

    model: str | None = model_field()
    text: Text = Field(description=TEXT_SAID, examples=["行走在银行"])
    chat: StrictBool = chat_field()
    continuation: list[TokenId] = continuation_field()


class InputRequest(Strict):
    """A run of a text, a picture, or both, as the model reads them (its capabilities
    `text` and `pictures`)."""

    model_config = ConfigDict(
        extra="forbid",
        # (one of the two, and not null: JSON Schema's `required` holds for a null too)
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"type": "string"}}}
                for name in ("text", "image")
            ]
        },
    )

    model: str | None = model_field()
    text: Text | None = Field(
        None,
        description=TEXT_SAID + " Required, unless the model reads a picture alone (an image "
        "encoder: its capabilities say text false, pictures true).",
        examples=["行走在银行"],
    )
    image: Digest | None = Field(
        None,
        description="A picture for a model that reads pictures: the digest POST /api/v1/images "
        "answered for it. A 404 where the server no longer holds it: send it again.",
    )
    chat: StrictBool = chat_field()
    continuation: list[TokenId] = continuation_field()

    @model_validator(mode="after")
    def _something_to_read(self) -> InputRequest:
        if self.text is None and self.image is None:
            raise ValueError("give text (a sentence), or image (a picture's digest), to read")
        return self


class AnalyzeRequest(InputRequest):
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


class ImagePositionInfo(BaseModel):
    """What one position of a picture's run is."""

    kind: PositionKind = Field(
        description="What it is: a class, distillation, register or detection token, a patch "
        "(a tiled picture's: a token of one tile), a token of the whole picture's thumbnail "
        "read beside its tiles, a learned query of a resampler that reads the whole picture "
        "(it has no box), another position of the encoder's or of the picture's (a row's "
        "newline), or (a vision-language model's run) a text token."
    )
    label: str = Field(
        description='As the views name it: "[CLS]", "[REG 2]", "▦ 3,5", a thumbnail\'s '
        '"▣ 1,0", a query\'s "◌ 3", a newline\'s "↵ 3", a letterbox\'s padding "░ 0,3", a '
        "text token as shown."
    )
    image: int = Field(0, description="Which picture of the run (0: the first).")
    row: int | None = Field(None, description="A patch's row in its picture's patch grid.")
    column: int | None = Field(None, description="A patch's column in that grid.")
    box: tuple[float, float, float, float] | None = Field(
        None,
        description="A patch's box in the picture's own pixels (left, top, right, bottom; "
        "the processor's resizing and cropping undone), clipped to the picture.",
    )


class PictureInfo(BaseModel):
    """The picture a run read and what each of its positions is."""

    digest: str = Field(description="The picture's key (GET /api/v1/images/{digest}).")
    width: int = Field(description="Its width in pixels, upright (EXIF orientation applied).")
    height: int
    grid: tuple[int, int] = Field(description="Rows and columns of its patch grid.")
    positions: list[ImagePositionInfo] = Field(
        description="One per source position, in order (source_tokens are their labels)."
    )


class ImageStored(BaseModel):
    """A picture read and held: runs name it by its digest."""

    digest: str = Field(description="SHA-256 of its size and RGB pixels: a run's `image`.")
    width: int = Field(description="Its width in pixels, upright (EXIF orientation applied).")
    height: int
    format: Literal["PNG", "JPEG", "WEBP"] = Field(description="What its bytes are.")


class AnalyzeResponse(BaseModel):
    model: str
    image: PictureInfo | None = Field(
        None, description="A picture's run: the picture and what each position is."
    )
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


class ExportRequest(InputRequest):
    layers: list[Index] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="Only these layers' tensors (of every stack), with the embeddings and "
        "positions; default: every layer. An export over ATTNVIZ_MAX_RESPONSE_BYTES (float32, "
        "before compression) is a 422 that says so.",
    )
