"""What /api/v1/models says of each model: its attention, capabilities, the head the
page opens it on, and its positional encoding."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from attnviz.model.attention_types import Side
from attnviz.model.outputs import OutputKind
from attnviz.model.runner import TokenUnit

from ..payloads.schemas import AttentionType, HeadRole


class AttentionInfo(BaseModel):
    type: AttentionType
    layers: int
    query_heads: int
    kv_heads: int = Field(description="Key/value heads; fewer than query_heads when shared.")
    head_dim: int
    rows: Side = Field(description="Whose tokens the queries are: source_tokens or target_tokens.")
    columns: Side = Field(description="Whose tokens the keys are.")


class CapabilitiesInfo(BaseModel):
    kv_cache: bool = Field(description="Decodes step by step through a KV cache.")
    similarity: bool = Field(
        description="Makes a sentence embedding: analyze with `compare` gives the cosine "
        "similarity."
    )
    word_view: bool = Field(description="Tokens merge into words: granularity=word applies.")
    generation: bool = Field(
        False,
        description="Continues a prompt: /generate, and chat and continuation on every route.",
    )
    text: bool = Field(True, description="Reads text (`text` in a run's request).")
    pictures: bool = Field(
        False,
        description="Reads pictures (`image` in a run's request: a digest POST /api/v1/images "
        "answers); with `text` false, a picture alone (an image encoder).",
    )
    value_norms: bool = Field(
        False,
        description="Value-weighted norms (attention kind `norms`) are served (inputs of at "
        "most 512 tokens): every layer's output projection reads its heads' outputs unchanged.",
    )
    experiments: list[str] = Field(description="The lab experiments this model can run.")


class StartHead(BaseModel):
    """The head the page opens a model on: the most telling one, and why."""

    type: AttentionType
    layer: int
    head: int
    role: HeadRole | None = Field(description="What it does (see HeadSummary.role).")
    source: Literal["model card", "metrics", "trained model", "first head"] = Field(
        description="model card: the head the checkpoint's evaluation names; metrics: the "
        "strongest head of its role on the model's first example; trained model: an "
        "untrained twin opens on its trained model's head, for comparison; first head: a "
        "model of yours, not run when listed (choosing a head would read its weights)."
    )


class RefusedModel(BaseModel):
    """A model named to the server (ATTNVIZ_MODELS, --model) that it cannot serve."""

    id: str
    status: Literal["refused"] = "refused"
    reason: str = Field(description="Why, checked before any weight was read (no paths).")


class MemoryInfo(BaseModel):
    device: str
    budget_bytes: int = Field(description="The weights of models of yours held there at once.")
    source: str = Field(description="Where the bound comes from.")
    loaded: bool = Field(description="Whether this model's weights are read now.")


class ModelInfo(BaseModel):
    id: str
    status: Literal["served"] = "served"
    title: str
    titles: dict[str, str] = Field(
        {}, description="The title in other languages, by ISO 639-1 code (the page's zh)."
    )
    description: str
    source: str = Field(
        "shipped",
        description="Where it comes from: shipped with the server; or, for a model of yours "
        "(ATTNVIZ_MODELS), the repo id as given or its folder's or file's name (no path of the "
        "server's disk).",
    )
    family: str | None = Field(
        None, description="A model of yours: its family (config.json's model_type, or GGUF)."
    )
    stored_as: str | None = Field(
        None, description="A model of yours: the dtypes of its stored weights."
    )
    parameters: int = Field(description="Its parameters (a tied matrix counted once).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="The dtype it computes in (its weights, q, k, v; softmax in float32 "
        "where its eager attention computes it so, as transformers' does, then rounded to "
        "this dtype). What is sent is in the encoding asked for (f4 holds every value of "
        "these dtypes exactly), whatever it was computed in.",
    )
    device: str = Field(
        "cpu", description="Where it runs: cpu, mps, cuda:N, or cuda (spread over every GPU)."
    )
    quantized: Literal["4bit", "8bit"] | None = Field(
        None,
        description="A model of yours whose matrices bitsandbytes stores in 4 or 8 bits "
        "(computed in dtype); views that read weight matrices are not served for it.",
    )
    weight_bytes: int = Field(
        description="The bytes its weights take where it runs, in its dtype (a model of "
        "yours: counted unread)."
    )
    memory: MemoryInfo | None = Field(
        None,
        description="A model of yours: the bound of the models of yours kept loaded on its "
        "device, and where that bound comes from.",
    )
    architecture: Literal["encoder-decoder", "encoder-only", "decoder-only"]
    encoder_layers: int = Field(description="0 for a decoder-only model.")
    decoder_layers: int = Field(description="0 for an encoder-only model.")
    d_model: int
    positional: Literal["sinusoidal", "learned", "rotary", "relative", "none"]
    languages: list[str] = Field(description="ISO 639-1 codes of the text it reads.")
    max_tokens: int = Field(
        description="Source tokens read: a longer input is cut to them, or, for a language "
        "model that reads its whole context (SmolLM2, a decoder of yours whose long pass is "
        "served: on model/, or on transformers' code where its check passed when read), "
        "refused with a 422 naming them."
    )
    max_text_chars: int = Field(description="Characters per text this server accepts.")
    max_new_tokens: int | None = Field(
        None,
        description="A model that generates: tokens one generation may add on this server "
        "(ATTNVIZ_MAX_NEW_TOKENS); null for the others.",
    )
    token_unit: TokenUnit = Field(
        description="What a source token is: a character, a WordPiece piece (the word view "
        "merges them), a byte-level BPE piece, a SentencePiece piece, or a picture's patch "
        "(and its class or register tokens)."
    )
    special_tokens: list[str] = Field(description="Tokens the tokenizer adds, such as [CLS].")
    unknown_token: str = Field(description="The token of what the tokenizer cannot read.")
    output: OutputKind = Field(
        description="What the model gives: a transcription, a sentence embedding (which "
        "analyze can compare with a second sentence), a continuation of the prompt, or "
        "(masked) the likeliest tokens at each mask token ([MASK]) of the text."
    )
    mask_token: str | None = Field(
        None,
        description="A masked-language model: the token to write where a word is missing "
        "([MASK], RoBERTa's <mask>, ...); null for the others.",
    )
    attention_types: list[AttentionType]
    attention: list[AttentionInfo] = Field(description="Layers and heads of each type.")
    capabilities: CapabilitiesInfo
    start_head: StartHead
    examples: list[str] = Field(description="Sentences in the languages it reads.")
    default: bool


class PositionalResponse(BaseModel):
    model: str
    kind: Literal["sinusoidal", "learned", "rotary", "relative", "none"]
    formula: str
    positions: int
    dims: int
    table: list[list[float]] = Field(
        description="positions x dims: the vector added to each position (rotary: the angles)."
    )
    similarity: list[list[float]] = Field(
        description="positions x positions: cosine similarity of the positions' vectors."
    )


class Citation(BaseModel):
    """What a "cite this view" line names of a model: enough to get the same weights back."""

    attnviz: str = Field(description="The attnviz version that served it.")
    model: str = Field(description="The model's id.")
    title: str
    source: str = Field(
        description="Where its weights come from: a shipped model's package and version, or "
        "the name of your model's folder or file (a repo id and its revision, from the "
        "Hugging Face cache), never a path of the server's disk."
    )
    weights_sha256: str = Field(
        description="SHA-256 of the weights this server computes with: each tensor of the "
        "model's state (float32 after any dequantization; integer buffers as they are), by "
        "its name in the code that runs it, in name order, its name then its bytes. The same "
        "weights read by the same code give the same hash; another backend names them "
        "otherwise."
    )
