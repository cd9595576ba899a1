"""Requests and responses of the attention lab (/api/v1/lab/...)."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictFloat

from ..payloads.schemas import AttentionType, Deferred, Index, Strict, TextRequest
from ..payloads.text import Text

Matrix = list[list[float]]


class HeadRequest(TextRequest):
    type: AttentionType | None = Field(None, description="Default: the model's first type.")
    layer: Index = 0
    head: Index = 0


class HeadPair(BaseModel):
    rows: list[str]
    predicted: list[str] | None = Field(
        None,
        description="Where rows are decoder steps: the token each predicts (the step fed "
        "rows[i] predicts predicted[i]); the page labels cross-attention rows by it.",
    )
    columns: list[str]
    first: Matrix
    second: Matrix


class ScalingHead(BaseModel):
    layer: int
    head: int
    entropy_scaled: float = Field(description="Mean row entropy (bits) with q kᵀ / √d_k.")
    entropy_unscaled: float = Field(description="The same with the scaling removed.")
    max_weight_scaled: float
    max_weight_unscaled: float


class ScalingResponse(BaseModel):
    model: str
    type: AttentionType
    head_dim: int
    matrices: HeadPair = Field(description="first: scaled (the model); second: unscaled.")
    head_stats: list[ScalingHead] = Field(description="Every layer x head of the type.")
    mean_entropy_scaled: float
    mean_entropy_unscaled: float


class PositionsRequest(HeadRequest):
    order: list[Index] | None = Field(
        None,
        description="A permutation of the source positions; default: reversed (between "
        "[CLS] and [SEP] for WordPiece models). 猫追狗 reversed is 狗追猫.",
    )


class PositionsCase(BaseModel):
    max_abs_diff: float = Field(
        description="max |W(permuted input) - P W(input) Pᵀ| over every encoder layer and head."
    )
    original: Matrix
    permuted: Matrix


class PositionsResponse(BaseModel):
    model: str
    tokens: list[str]
    permuted_tokens: list[str]
    order: list[int]
    with_positions: PositionsCase
    without_positions: PositionsCase


class MasksRequest(HeadRequest):
    second: Text | None = Field(
        None, description="The other sentence of the padded batch; default: the text's first half."
    )


class FutureHead(BaseModel):
    layer: int
    head: int
    weight: float = Field(description="Its rows' mean weight on later tokens, mask off.")


class CausalCase(BaseModel):
    rows: list[str]
    predicted: list[str] | None = Field(
        None,
        description="Where rows are decoder steps: the token each predicts (the step fed "
        "rows[i] predicts predicted[i]); the page labels cross-attention rows by it.",
    )
    with_mask: Matrix
    without_mask: Matrix
    future_weight_with: float = Field(description="Mean weight a row puts on later tokens.")
    future_weight_without: float
    most_future: FutureHead = Field(
        description="The decoder self-attention head that puts the most weight on later "
        "tokens once the mask is off (its mean future weight): where the mask matters most."
    )


class PaddingCase(BaseModel):
    tokens: list[list[str]] = Field(description="The two sentences' tokens, unpadded.")
    length: int = Field(description="The padded batch's length.")
    mask: list[list[bool]] = Field(description="Per sentence: may each key be attended to.")
    shorter: int = Field(description="Index of the shorter sentence.")
    weights: Matrix = Field(description="The shorter sentence's weights in the batch.")
    pad_weight: float = Field(description="Total weight on padded keys (0 when masked).")
    max_abs_diff_alone: float = Field(
        description="Its weights in the batch against a run on its own, on real tokens."
    )


class MasksResponse(BaseModel):
    model: str
    layer: int
    head: int
    causal: CausalCase | None = Field(description="Decoder self-attention; null without one.")
    padding: PaddingCase


class KVCacheRequest(TextRequest):
    layer: Index | None = Field(
        None, description="Only this decoder layer's rows (default: every layer's)."
    )


class KVCacheStep(Deferred):
    step: int
    token: str = Field(
        description="The token fed at this step (a prompt read in one pass: its last, whose "
        "row is shown)."
    )
    fed_tokens: int = Field(
        1, description="Tokens this step put into the cache: 1, or a prompt's length at step 0."
    )
    predicted: str = Field(description="The most likely next token.")
    keys: list[str] = Field(description="The cached keys the new query attends over.")
    rows: list[Matrix] = Field(
        description="Per layer of `layers`: each query head's new row (H x keys)."
    )
    cache_bytes: list[int] = Field(
        description="Per decoder layer: bytes of cached keys and values (one per key/value "
        "head: grouped-query attention caches fewer than it has query heads)."
    )
    max_abs_diff: float = Field(description="Cached against uncached logits at this step.")


class KVCacheResponse(BaseModel):
    model: str
    piece: str = Field(
        description="The text decoded: the first piece of a long text, or a decoder-only "
        "model's prompt."
    )
    output: list[str] = Field(
        description="What the decoder made of it (after <bos>), or the continuation fed: the "
        "one sent, else greedy decoding's."
    )
    output_text: str | None = Field(None, description="A continuation's tokens as text.")
    prompt_tokens: int | None = Field(
        None, description="A decoder-only model: the prompt's tokens, read in step 0's pass."
    )
    pieces: int = Field(description="How many pieces the text is decoded in (40 characters).")
    ended: bool = Field(
        description="The output ended with <eos> (a stop token) within the length limit."
    )
    layers: list[int] = Field(description="The decoder layers whose rows the steps carry.")
    query_heads: int
    kv_heads: int = Field(description="Key/value heads cached per layer.")
    steps: list[KVCacheStep]
    truncated: bool = Field(description="More steps than the limit: the first ones are shown.")


class MetricsRow(BaseModel):
    type: AttentionType
    layer: int
    head: int
    entropy: float
    max_weight: float
    distance: float | None
    previous: float | None
    first: float
    special: float
    alignment: float | None


class MetricsResponse(BaseModel):
    model: str
    rows: list[MetricsRow]
    explain: dict[str, str]


class RolloutRequest(TextRequest):
    type: AttentionType | None = Field(None, description="A self-attention type.")
    residual: StrictFloat = Field(
        0.5, ge=0, le=1, allow_inf_nan=False, description="Weight of the identity (residual)."
    )


class RolloutResponse(BaseModel):
    model: str
    type: AttentionType
    tokens: list[str]
    matrix: Matrix
    residual: float
    assumes: str


class HeadRef(Strict):
    type: AttentionType
    layer: Index
    head: Index


class AblationRequest(TextRequest):
    ablate: list[HeadRef] = Field(
        max_length=1000,
        description="Heads to switch off.",
    )


class AblationResponse(BaseModel):
    model: str
    ablated: list[HeadRef] = Field(description="The heads switched off.")
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


class CompareRequest(HeadRequest):
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
    first: Matrix
    second_rows: list[str]
    second_predicted: list[str] | None = Field(
        None, description="The second run's own predictions, per step."
    )
    second_columns: list[str]
    second: Matrix
    aligned_rows: list[str] = Field(description="Tokens matched in both inputs, in order.")
    aligned_predicted: list[str] | None = Field(
        None, description="The first run's predictions at the aligned rows."
    )
    aligned_columns: list[str]
    difference: Matrix = Field(description="first - second on the aligned tokens.")


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
    ablated: list[HeadRef] = Field(description="The top induction heads, switched off.")
    loss_second_ablated: float = Field(description="The second copy's loss with them off.")
    control: list[HeadRef] = Field(
        description="As many other heads, drawn at random (seeded): the control."
    )
    loss_second_control: float = Field(description="The second copy's loss with those off.")
    copying_is_theirs: bool = Field(
        description="The claim, as measured: switching the top heads off raises the second "
        "copy's loss by more than 1 nat and more than twice what the random heads' raise it."
    )
    patterns: list[Matrix] = Field(
        description="The weights (2·length x 2·length) of the first ablated heads (up to 5)."
    )


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
    head: HeadRef
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
    ablated: list[HeadRef] = Field(description="The top retrieval heads, switched off.")
    answer_ablated: NeedleAnswer = Field(description="The answer with them off.")
    control: list[HeadRef] = Field(
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
