"""Requests and answers of corpus runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, StrictInt, model_validator

from ..lab.schemas import HeadRef
from ..payloads.schemas import Strict, _integral
from ..payloads.text import Text
from .corpora import SHIPPED

# a count of sentences: a whole number however JSON writes it, 1 or more
Count = Annotated[StrictInt, Field(ge=1, le=1_000_000), BeforeValidator(_integral)]

Pattern = Literal["previous", "first", "same", "special", "induction", "alignment"]
Status = Literal["queued", "running", "done", "cancelled", "failed"]


class CorpusRunRequest(Strict):
    model: str | None = Field(None, description="Model id; the default model when left out.")
    corpus: Literal["hsk-zh", "hsk-en"] | None = Field(
        None, description="A corpus the project ships (GET /api/v1/corpora); or `sentences`."
    )
    sentences: list[Text] | None = Field(
        None, min_length=1, max_length=2000, description="Your sentences, one each."
    )
    limit: Count | None = Field(None, description="Read only the first `limit` sentences.")
    vectors: list[HeadRef] = Field(
        [],
        max_length=4,
        description="Heads whose queries and keys are kept, for their "
        "query-key space over the corpus (POST /api/v1/qk-space with corpus_run).",
    )


class Corpus(Strict):
    id: str
    title: str
    language: str
    sentences: int
    licence: str
    source: str
    title_zh: str = Field("", description="The title in Chinese, as the page shows it in Chinese.")
    source_zh: str = Field("", description="Where its sentences come from, in Chinese.")

    @model_validator(mode="before")
    @classmethod
    def _in_chinese(cls, data: object) -> object:
        # a shipped corpus's Chinese title and source are its entry's (corpora.py), where
        # the answer does not name them
        if isinstance(data, dict) and (c := SHIPPED.get(data.get("id", ""))) is not None:
            return {"title_zh": c.title_zh, "source_zh": c.origin_zh, **data}
        return data


class CorpusRun(Strict):
    id: str
    model: str
    source: str = Field(description="The shipped corpus's id, or `yours`.")
    status: Status
    done: int = Field(description="Sentences read so far.")
    total: int
    tokens: int = Field(
        description="The tokens it reads, as its model reads them: what it is charged for "
        "(its tokens times the model's layers), at most ATTNVIZ_CORPUS_MAX_TOKENS."
    )
    rate: float | None = Field(description="Sentences per second so far.")
    eta_s: float | None = Field(description="Seconds left at that rate.")
    elapsed_s: float
    error: str | None = None
    bytes: int = Field(description="What its results take, of ATTNVIZ_CORPUS_RESULTS_BYTES.")
    statistics: list[str] = Field(description="The statistics of every head, in order.")
    vectors: list[HeadRef] = Field(description="The heads whose vectors are kept.")


class CorpusRunStarted(CorpusRun):
    owner_token: str = Field(
        description="The run's owner token, answered here only: send it as X-Owner-Token to "
        "cancel the run, and with your next runs (they are then the same owner's, and may "
        "drop this one's results once it is finished; other clients' runs never do before "
        "ATTNVIZ_CORPUS_KEEP_S)."
    )


class HeadStatistics(Strict):
    type: str
    layer: int
    head: int
    means: dict[str, float | None] = Field(
        description="Each statistic's mean over the sentences it applies to (null: none)."
    )


class CorpusHeads(Strict):
    run: CorpusRun
    heads: list[HeadStatistics]


class TopSentence(Strict):
    sentence: int
    text: str
    score: float


class RankedHead(Strict):
    type: str
    layer: int
    head: int
    score: float = Field(description="The pattern's statistic, its mean over the corpus.")
    examples: list[TopSentence] = Field(description="The sentences where the head does it most.")


class HeadSearch(Strict):
    run: CorpusRun
    pattern: Pattern
    statistic: str
    heads: list[RankedHead]
