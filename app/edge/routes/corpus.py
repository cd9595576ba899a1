"""Corpus runs: every head's statistics over many sentences, as a background job (submit,
follow, cancel), its results as a table, a head search and downloads."""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterator
from typing import Annotated

import numpy as np
import torch
from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from attnviz.model.methods.corpus_stats import STATISTICS

from ...corpus import npz
from ...corpus import schemas as s
from ...corpus.corpora import SHIPPED, read_lines, shipped_sentences
from ...corpus.jobs import CorpusRuns
from ...corpus.results import HeadKey, Job
from ...lab.schemas import HeadRef
from ...payloads.schemas import ErrorMessage
from ...request import CLIENT
from ...runs.reading import read_text
from .deps import ERRORS, QUERY_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1", tags=["corpus"])
# the statistic each search pattern ranks heads by
PATTERNS = {
    "previous": "previous",
    "first": "first",
    "same": "same",
    "special": "special",
    "induction": "induction",
    "alignment": "alignment",
}
OWNER_HEADER = "X-Owner-Token"
RUN_ERRORS = {
    **QUERY_ERRORS,
    404: {"model": ErrorMessage, "description": "No such corpus run (or it was dropped)."},
    409: {"model": ErrorMessage, "description": "The run has read no sentence yet."},
}


def runs_of(request: Request) -> CorpusRuns:
    return request.app.state.corpus_runs


def described(job: Job) -> s.CorpusRun:
    rate = job.rate()
    left = job.total - job.done
    running = job.status == "running"
    return s.CorpusRun(
        id=job.id,
        model=job.entry.id,
        source=job.origin,
        status=job.status,
        done=job.done,
        total=job.total,
        tokens=job.tokens,
        rate=round(rate, 3) if rate else None,
        eta_s=round(left / rate, 1) if rate and running else (0.0 if not left else None),
        elapsed_s=(
            0.0 if job.started is None else round((job.finished or time.time()) - job.started, 3)
        ),
        error=job.error,
        bytes=job.bytes,
        statistics=list(STATISTICS),
        vectors=[HeadRef(type=h.type, layer=h.layer, head=h.head) for h in job.keep],
    )


@router.get("/corpora", responses=QUERY_ERRORS)
def corpora() -> list[s.Corpus]:
    """The corpora the project ships, with their licences."""
    return [
        s.Corpus(
            id=c.id,
            title=c.title,
            language=c.language,
            licence=c.licence,
            source=c.origin,
            sentences=len(shipped_sentences(c.id)),
        )
        for c in SHIPPED.values()
    ]


def kept_heads(inference, entry, vectors: list[HeadRef]) -> list[HeadKey]:
    heads = []
    for ref in vectors:
        spec = entry.specs.get(ref.type)
        if spec is None:
            raise HTTPException(422, f"{entry.id} has no {ref.type} attention")
        if ref.layer >= spec.layers or ref.head >= spec.query_heads:
            raise HTTPException(
                422,
                f"vectors: {ref.type} L{ref.layer} H{ref.head} out of range: "
                f"{spec.layers} layers of {spec.query_heads} heads",
            )
        heads.append(HeadKey(ref.type, ref.layer, ref.head))
    return list(dict.fromkeys(heads))


def start(
    request: Request, inference, model, sentences, origin, limit, vectors
) -> s.CorpusRunStarted:
    entry = inference.entry(model)
    if not entry.runner.capabilities.text:
        raise HTTPException(
            422,
            f"{entry.id} reads pictures, and a corpus run reads sentences: choose a model "
            "that reads text",
        )
    settings = inference.settings
    if limit is not None:
        sentences = sentences[:limit]
    if len(sentences) > settings.corpus_max_sentences:
        raise HTTPException(
            422,
            f"{len(sentences)} sentences; a run may read "
            f"{settings.corpus_max_sentences} (ATTNVIZ_CORPUS_MAX_SENTENCES)",
        )
    job = runs_of(request).submit(
        entry,
        sentences,
        origin,
        kept_heads(inference, entry, vectors),
        owner=request.headers.get(OWNER_HEADER, "")[:100] or None,
        client=CLIENT.get(),
    )
    return s.CorpusRunStarted(**described(job).model_dump(), owner_token=job.owner)


@router.post("/corpus-runs", responses=ERRORS, status_code=202)
def submit(
    req: s.CorpusRunRequest, request: Request, inference: InferenceDep
) -> s.CorpusRunStarted:
    """Start a corpus run over a shipped corpus or your sentences: answered at once with
    its id; follow it with GET /api/v1/corpus-runs/{id}."""
    if (req.corpus is None) == (req.sentences is None):
        raise HTTPException(422, "name a shipped corpus or send sentences: one of the two")
    limit = inference.settings.max_text_chars
    sentences = (
        list(shipped_sentences(req.corpus))
        if req.corpus
        else [read_text(t, limit, f"sentences[{i}]") for i, t in enumerate(req.sentences or [])]
    )
    return start(
        request, inference, req.model, sentences, req.corpus or "yours", req.limit, req.vectors
    )


@router.post(
    "/corpus-runs/upload",
    responses=ERRORS,
    status_code=202,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "UTF-8 text, one sentence a line (at most ATTNVIZ_CORPUS_MAX_BYTES).",
        }
    },
)
async def upload(
    request: Request,
    inference: InferenceDep,
    model: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> s.CorpusRunStarted:
    """Start a corpus run over a text file of yours (the body, one sentence a line): a
    line that is not UTF-8 or is too long is a 422 naming it."""
    body = await request.body()
    settings = inference.settings

    def started() -> s.CorpusRunStarted:  # (normalising 4 MB of text takes seconds)
        sentences = read_lines(body, settings.corpus_max_sentences, settings.max_text_chars)
        return start(request, inference, model, sentences, "yours", limit, [])

    return await run_in_threadpool(started)


@router.get("/corpus-runs/{run_id}", responses=RUN_ERRORS)
def progress(run_id: str, request: Request) -> s.CorpusRun:
    """Where a run stands: sentences done, their rate, the time left."""
    return described(runs_of(request).get(run_id))


@router.post(
    "/corpus-runs/{run_id}/cancel",
    responses={**RUN_ERRORS, 403: {"model": ErrorMessage, "description": "Not its owner."}},
)
def cancel(
    run_id: str,
    request: Request,
    owner: Annotated[str | None, Header(alias=OWNER_HEADER, max_length=100)] = None,
) -> s.CorpusRun:
    """Stop a run (it ends after its current sentence; what it read so far is kept): its
    owner's only, by the token its creation answered."""
    return described(runs_of(request).cancel(run_id, owner))


def finite(v: float) -> float | None:
    return None if math.isnan(v) else round(float(v), 6)


def read_so_far(job: Job) -> tuple[torch.Tensor, torch.Tensor]:
    """The statistics of every sentence (N, S, H: the job's own, not a copy) and which
    sentences are read so far (batches run by token length, not in order)."""
    if job.read is None or job.statistics is None or not bool(job.read.any()):
        if job.status in ("queued", "running"):
            raise HTTPException(409, f"corpus run {job.id} has read no sentence yet")
        raise HTTPException(
            409, f"corpus run {job.id} ended ({job.status}) before it read a sentence"
        )
    return job.statistics, job.read.nonzero().flatten()


@router.get("/corpus-runs/{run_id}/heads", responses=RUN_ERRORS)
def heads(run_id: str, request: Request) -> s.CorpusHeads:
    """Every head's statistics, each its mean over the sentences read so far."""
    job = runs_of(request).get(run_id)
    read_so_far(job)  # (409 before any)
    means = job.means()  # (S, H), from running sums
    return s.CorpusHeads(
        run=described(job),
        heads=[
            s.HeadStatistics(
                type=h.type,
                layer=h.layer,
                head=h.head,
                means={n: finite(float(means[i, j])) for i, n in enumerate(STATISTICS)},
            )
            for j, h in enumerate(job.heads)
        ],
    )


@router.get("/corpus-runs/{run_id}/search", responses=RUN_ERRORS)
def search(
    run_id: str,
    request: Request,
    pattern: s.Pattern,
    top: Annotated[int, Query(ge=1, le=100)] = 10,
    examples: Annotated[int, Query(ge=1, le=20)] = 3,
) -> s.HeadSearch:
    """The heads that do a pattern most over the corpus, each with the sentences where it
    does it most: previous (the token before), first (the first token), same (the same
    token elsewhere), special ([CLS], [SEP], <bos>), induction, alignment."""
    job = runs_of(request).get(run_id)
    stats, read = read_so_far(job)
    statistic = STATISTICS.index(PATTERNS[pattern])
    means = job.means()[statistic]  # (H,)
    ranked = [j for j in means.argsort(descending=True).tolist() if not math.isnan(means[j])]
    indices = read.tolist()
    out = []
    for j in ranked[:top]:
        column = stats[read, statistic, j].nan_to_num(nan=-math.inf)  # (n,): this head's
        best = column.argsort(descending=True)[:examples].tolist()
        h = job.heads[j]
        out.append(
            s.RankedHead(
                type=h.type,
                layer=h.layer,
                head=h.head,
                score=round(float(means[j]), 6),
                examples=[
                    s.TopSentence(
                        sentence=indices[i],
                        text=job.sentences[indices[i]],
                        score=round(float(column[i]), 6),
                    )
                    for i in best
                    if math.isfinite(column[i])
                ],
            )
        )
    return s.HeadSearch(run=described(job), pattern=pattern, statistic=PATTERNS[pattern], heads=out)


def download(body: Iterator[bytes], name: str, media: str) -> StreamingResponse:
    """An answer streamed as it is made (pieces of a few hundred kB, each made on the
    thread pool, never the whole file in memory)."""
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    return StreamingResponse(body, media_type=media, headers=headers)


# rows a piece of the table (about 75 kB): each piece is handed to the event loop to send,
# and its handling there grows with it (4,096 rows a piece held the loop 63-73 ms a piece,
# and /healthz failed its bound one run in three; 1,024: under 30 ms, measured)
ROWS_A_PIECE = 1024


@router.get(
    "/corpus-runs/{run_id}/statistics.csv",
    responses={**RUN_ERRORS, 200: {"content": {"text/csv": {}}, "description": "The table."}},
    response_class=StreamingResponse,
)
def statistics_csv(run_id: str, request: Request) -> StreamingResponse:
    """Per sentence and head, every statistic: one row each (sentence, type, layer, head)."""
    job = runs_of(request).get(run_id)
    stats, read = read_so_far(job)
    indices = read.tolist()

    def rows() -> Iterator[bytes]:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["sentence", "type", "layer", "head", *STATISTICS])
        count = 0
        for i in indices:
            per = stats[i].numpy()  # (S, H): one sentence's, a view
            for j, h in enumerate(job.heads):
                values = ("" if np.isnan(v) else f"{v:.6g}" for v in per[:, j])
                writer.writerow([i, h.type, h.layer, h.head, *values])
                count += 1
                if count % ROWS_A_PIECE == 0:
                    yield out.getvalue().encode()
                    out.seek(0)
                    out.truncate()
        yield out.getvalue().encode()

    return download(rows(), f"attnviz-corpus-{job.id}.csv", "text/csv")


@router.get(
    "/corpus-runs/{run_id}/vectors.npz",
    responses={
        **RUN_ERRORS,
        200: {"content": {"application/zip": {}}, "description": "NumPy's .npz (a zip)."},
    },
    response_class=StreamingResponse,
)
def vectors_npz(run_id: str, request: Request) -> StreamingResponse:
    """The kept heads' query and key vectors, with each vector's sentence and token (an
    .npz that numpy.load reads), streamed sentence by sentence."""
    job = runs_of(request).get(run_id)
    members: list[npz.Member] = []
    for h, v in list(job.vectors.items()):
        name = f"{h.type}.L{h.layer}.H{h.head}"
        n = len(v.sentence)  # what is whole: the worker appends the lists one by one
        if not n:
            continue
        rows, columns, sentence = v.rows[:n], v.columns[:n], v.sentence[:n]
        queries, keys = v.queries[:n], v.keys[:n]
        members += [
            npz.floats(f"{name}.queries", queries),
            npz.floats(f"{name}.keys", keys),
            npz.repeated(f"{name}.query_sentence", sentence, [len(r) for r in rows]),
            npz.repeated(f"{name}.key_sentence", sentence, [len(c) for c in columns]),
            npz.strings(f"{name}.query_tokens", rows),
            npz.strings(f"{name}.key_tokens", columns),
        ]
    return download(npz.stream(members), f"attnviz-corpus-{job.id}-vectors.npz", "application/zip")
