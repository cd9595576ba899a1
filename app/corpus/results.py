"""A corpus run and its results as they grow: every sentence's statistics with their
running sums (the means a GET reads without copying them), and the kept heads' query and
key vectors. The runs' queue and worker are app/corpus/jobs.py."""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field

import torch

from ..catalog.zoo import ModelEntry


@dataclass(frozen=True)
class HeadKey:
    """A head as a hashable key (the wire's `HeadRef`, app/lab/schemas.py, names one)."""

    type: str
    layer: int
    head: int


@dataclass
class Vectors:
    """One head's queries and keys over the corpus, sentence by sentence."""

    queries: list[torch.Tensor] = field(default_factory=list)  # (Tq, d) per sentence
    keys: list[torch.Tensor] = field(default_factory=list)  # (Tk, d) per sentence
    rows: list[list[str]] = field(default_factory=list)  # query tokens per sentence
    columns: list[list[str]] = field(default_factory=list)
    sentence: list[int] = field(default_factory=list)  # the sentence of each entry


@dataclass
class Job:
    id: str
    entry: ModelEntry
    sentences: list[str]
    origin: str  # the shipped corpus's id, or "yours"
    keep: list[HeadKey]  # the heads whose vectors are kept
    heads: list[HeadKey]  # the statistics' columns
    owner: str = ""  # the owner's token: cancels the run; its newer runs may drop it
    client: str = ""  # the address it came from (runs waiting per client are bounded)
    status: str = "queued"  # queued, running, done, cancelled, failed
    done: int = 0
    tokens: int = 0  # its sentences' tokens, as its model reads them
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    statistics: torch.Tensor | None = None  # (N, S, H) float32, NaN where n/a
    # which sentences have been read (batches run by token length, not in order)
    read: torch.Tensor | None = None  # (N,) bool
    vectors: dict[HeadKey, Vectors] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # each statistic's sum and count over the sentences read (S, H): the means a GET reads
    # without copying the statistics (a copy a request was 173 MB for SmolLM2 at 20,000)
    sums: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    _summed: threading.Lock = field(default_factory=threading.Lock)

    def start(self, statistics: int, heads: int) -> None:
        """Its results, empty, made when it starts (`read` last: readers wait for it)."""
        self.statistics = torch.full((self.total, statistics, heads), float("nan"))
        self.sums = torch.zeros(statistics, heads, dtype=torch.float64)
        self.counts = torch.zeros(statistics, heads, dtype=torch.int64)
        self.read = torch.zeros(self.total, dtype=torch.bool)

    def add(self, index: torch.Tensor | int, stats: torch.Tensor) -> None:
        """The statistics of one sentence (S, H), or of several ((n, S, H), `index` theirs)."""
        assert self.statistics is not None and self.read is not None
        assert self.sums is not None and self.counts is not None
        many = stats if stats.dim() == 3 else stats[None]
        self.statistics[index] = stats
        with self._summed:
            self.sums += many.double().nan_to_num(nan=0.0).sum(0)
            self.counts += (~many.isnan()).sum(0)
        self.read[index] = True

    def means(self) -> torch.Tensor:
        """Each statistic's mean over the sentences read where it applies (S, H); NaN where
        it applied to none."""
        assert self.sums is not None and self.counts is not None
        with self._summed:
            return (self.sums / self.counts).float()  # (0 / 0: NaN)

    @property
    def total(self) -> int:
        return len(self.sentences)

    @property
    def bytes(self) -> int:
        """Its results' bytes: the statistics, the kept vectors and the sentences."""
        n = 0 if self.statistics is None else self.statistics.numel() * 4
        n += self.text_bytes
        for v in list(self.vectors.values()):
            count = len(v.sentence)  # (the worker appends to the lists one after another)
            n += sum(t.numel() * 4 for t in v.queries[:count] + v.keys[:count])
        return n

    @functools.cached_property
    def text_bytes(self) -> int:
        return sum(len(t.encode()) for t in self.sentences)

    def rate(self) -> float | None:
        if self.started is None or self.done == 0:
            return None
        return self.done / max(1e-9, (self.finished or time.time()) - self.started)


def heads_of(entry: ModelEntry) -> list[HeadKey]:
    return [
        HeadKey(spec.type, layer, head)
        for spec in entry.specs.values()
        for layer in range(spec.layers)
        for head in range(spec.query_heads)
    ]
