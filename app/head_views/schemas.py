"""Requests and responses of the views that look inside a head: its neuron view and its
query-key space."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..lab.schemas import HeadRequest
from ..payloads.schemas import Index, Strict, Whole
from ..payloads.text import Text


class NeuronRequest(HeadRequest):
    query: Index | None = Field(
        None,
        description="The query token's position (a row of the head). Default: the row whose "
        "weights are the most spread (highest entropy; the first of equals); a long input's "
        "last row (it sees every key).",
    )
    keys: list[Index] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[start, stop): the key positions shown (default: every key). A long "
        "input (over 512 tokens) reads a window of at most 512 keys, and must name it.",
    )


class VectorSide(Strict):
    query: list[float] = Field(description="The query vector of the row (d_head).")
    keys: list[list[float]] = Field(description="Each key's vector, keys x d_head.")
    products: list[list[float]] = Field(
        description="keys x d_head: query[i] * key[i] / sqrt(d_head), each dimension's share "
        "of the score."
    )
    scores: list[float] = Field(description="Per key, the sum of its products.")


class NeuronResponse(Strict):
    model: str
    type: str
    layer: int
    head: int
    kv_head: int = Field(description="The key/value head whose keys this query head reads.")
    query: int
    query_token: str
    predicted: str | None = Field(
        None, description="Where rows are decoder steps: the token the query's step predicts."
    )
    keys: list[str] = Field(
        description="The key tokens shown (the columns of the head, or the window asked for)."
    )
    first_key: int = Field(
        0,
        description="The position of keys[0]: the keys, their vectors, visible and weights "
        "are of positions first_key onwards.",
    )
    d_head: int
    scale: float = Field(description="1 / sqrt(d_head): the products include it.")
    rotary: bool = Field(description="The model rotates q and k by position (RoPE).")
    after: VectorSide = Field(
        description="The vectors the score is computed from (after RoPE where the model has "
        "it): the scores equal hook_scores' row."
    )
    before: VectorSide | None = Field(
        None,
        description="RoPE models: the same before rotation (what q . k would be without "
        "positions); null for the others.",
    )
    visible: list[bool] = Field(description="Per key, whether the mask lets the query see it.")
    weights: list[float] = Field(description="The softmax of the row (hook_weights).")


class QKSpaceRequest(HeadRequest):
    texts: list[Text] = Field(
        [],
        max_length=50,
        description="More sentences whose queries and keys join the text's (each a sentence "
        "of the cloud); at most 8 x ATTNVIZ_MAX_TEXT_CHARS characters in all.",
    )
    corpus_run: str | None = Field(
        None,
        max_length=64,
        description="A corpus run that kept this head's vectors (its `vectors`): its "
        "sentences join the cloud.",
    )
    projection: Literal["pca", "umap", "tsne"] = "pca"
    dims: Literal[2, 3] = 2
    seed: Whole = Field(0, ge=0, le=2**31 - 1, description="Seeds UMAP and t-SNE.")
    top: Index = Field(5, le=50, description="Keys listed per query: its most attended.")


class Cloud(Strict):
    tokens: list[str]
    positions: list[int]
    sentences: list[int] = Field(description="Per point, the sentence it comes from (0: text).")
    coords: list[list[float]] = Field(description="Per point, its 2 or 3 coordinates.")


class QKSpaceResponse(Strict):
    model: str
    type: str
    layer: int
    head: int
    kv_head: int
    shared_with: list[int] = Field(
        description="The query heads reading the same key/value head (grouped-query "
        "attention): the keys shown are theirs too."
    )
    projection: str
    dims: int
    sentences: list[str]
    queries: Cloud
    keys: Cloud
    top_keys: list[list[int]] = Field(
        description="Per query, the keys (indices into keys) it attends most, most first."
    )
    top_weights: list[list[float]]
    scale: float = Field(description="c: queries are scaled by c and keys by 1/c.")
    shift_norm: float = Field(description="|t|: the keys were translated by t.")
    correlation_before: float | None = Field(
        description="Pearson correlation of q . k with |q - k| within each query's row (both "
        "taken from their row's mean) over the keys it may attend, of the raw vectors (-1: "
        "the nearer a key, the more the query attends it); null where neither varies."
    )
    correlation_after: float | None = Field(
        description="The same after the translation and scaling: what the picture shows."
    )
    explained_variance: list[float] = Field(
        [], description="PCA: the share of the variance each plotted axis explains."
    )
