"""Running a model on a text: overview, matrices, export."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, HTTPException, Response

from attnviz.model.long import LongCapture
from attnviz.model.methods.analysis import cosine
from attnviz.model.runner import RunResult, generating, masking

from ...catalog.zoo import ModelEntry
from ...payloads.blocks import AttentionRequest, AttentionResponse
from ...payloads.schemas import (
    Alternative,
    AnalyzeRequest,
    AnalyzeResponse,
    ExportRequest,
    ImagePositionInfo,
    MaskedTokens,
    NextTokens,
    PictureInfo,
    Piece,
    RunProgressInfo,
)
from ...payloads.wire import attention_json
from ...runs.answers import attention_blocks, export_npz, raw_piece, summaries
from ...runs.long_metrics import long_summaries
from ...runs.reading import read_text, text_limit
from ...runs.scheduling import NotNow, lent
from .deps import (
    BODY_ERRORS,
    ERRORS,
    NOT_STARTED,
    InferenceDep,
    between_layers,
    on_tensor_thread,
)

router = APIRouter(prefix="/api/v1", tags=["attention"])


@router.get("/progress/{request_id}", responses={**BODY_ERRORS, 404: NOT_STARTED})
def progress(request_id: str, inference: InferenceDep) -> RunProgressInfo:
    """How far the model run of the request sent with this `X-Request-ID` has read: its
    layers done of all, and the time it is likely to take still. A run stops at its next
    layer when its request is cancelled (the client closes the connection)."""
    found = inference.progress.get(request_id)
    if found is None:
        raise HTTPException(404, f"no run of request {request_id!r} has started (yet)")
    return RunProgressInfo(**found.answer())


@router.post("/analyze", responses=ERRORS)
@between_layers
def analyze(req: AnalyzeRequest, inference: InferenceDep) -> AnalyzeResponse:
    """Tokens, the model's output, and a summary of every head: what an overview needs."""
    if req.compare is not None and lent():  # (two runs: vetted as one, in a turn of its own)
        raise NotNow
    entry = inference.entry(req.model)
    picture = inference.picture(req.image)
    result = inference.run(entry, req.text, req.chat, req.continuation, picture)
    similarity = None
    if req.compare is not None:
        if not entry.runner.capabilities.similarity:
            raise HTTPException(422, f"{entry.id} makes no sentence embedding to compare")
        read_text(req.compare, text_limit(inference.settings, entry.runner), "compare")
        other = inference.run(entry, req.compare).embedding
        if result.embedding is None or other is None:
            raise HTTPException(422, f"{entry.id} made no sentence embedding to compare")
        similarity = cosine(result.embedding, other)
    long = isinstance(result.capture, LongCapture)
    if long:  # computed in the background: those done so far
        summarised, total = long_summaries(inference, entry, result)
    else:
        summarised = summaries(entry, result)
        total = len(summarised)
    return AnalyzeResponse(
        model=entry.id,
        image=picture_info(result),
        text=result.text,
        source_tokens=result.source_tokens,
        source_raw=result.raw("source"),
        target_tokens=result.target_tokens,
        target_raw=result.raw("target"),
        predicted_tokens=result.predicted_tokens,
        pieces=pieces_of(result),
        output=result.output_tokens,
        output_text=(
            " ".join(result.output_tokens) if result.output_text is None else result.output_text
        ),
        embedding=result.embedding,
        similarity=similarity,
        truncated=result.truncated,
        source_length=result.source_length,
        unknown_tokens=result.source_tokens.count(entry.runner.unknown_token),
        next_tokens=next_tokens(entry, result),
        masked=masked_tokens(entry, result),
        summaries=summarised,
        long=long,
        summaries_done=len(summarised),
        summaries_total=total,
    )


def picture_info(result: RunResult) -> PictureInfo | None:
    """A picture's run: the picture and what each position is, as the wire says it."""
    if result.image is None:
        return None
    width, height = result.image.size
    return PictureInfo(
        digest=result.image.digest,
        width=width,
        height=height,
        grid=result.image.grid,
        positions=[ImagePositionInfo(**dataclasses.asdict(p)) for p in result.image.positions],
    )


def pieces_of(result: RunResult) -> list[Piece]:
    """The pieces a step-by-step decoder decoded the text in, as positions of its tokens."""
    made, source, target = [], 0, 0
    for piece in result.pieces:
        s, t = piece.source.size(1), len(piece.target_ids)
        made.append(
            Piece(source=(source, source + s), target=(target, target + t), ended=piece.ended)
        )
        source, target = source + s, target + t
    return made


def masked_tokens(entry: ModelEntry, result: RunResult) -> list[MaskedTokens]:
    """Each mask token's likeliest fillers, as people read them and as spelled."""
    if not result.masked:
        return []
    token = masking(entry.runner).token
    raw = raw_piece(entry.runner, token)
    return [
        MaskedTokens(
            position=position,
            top=[Alternative(id=i, token=token(i), probability=p, raw=raw(i)) for i, p in top],
        )
        for position, top in sorted(result.masked.items())
    ]


def next_tokens(entry: ModelEntry, result: RunResult) -> list[NextTokens]:
    vocab = generating(entry.runner).target_vocabulary() if result.alternatives else []
    raw = raw_piece(entry.runner, vocab.__getitem__)
    return [
        NextTokens(
            position=position,
            top=[Alternative(id=i, token=vocab[i], probability=p, raw=raw(i)) for i, p in top],
        )
        for position, top in sorted(result.alternatives.items())
    ]


def precision_of(entry: ModelEntry, result: RunResult) -> dict[str, str]:
    """What the values of an attention answer were computed in, and what that means."""
    dtype = entry.origin.dtype if entry.origin else "float32"
    if isinstance(result.capture, LongCapture):
        said = "recomputed in float32, in row blocks, from the q and k the model's pass made"
        if dtype != "float32":
            said += (
                f" in {dtype} (the model's own eager attention would round its scores and "
                f"weights to {dtype}: these are the exact softmax of its {dtype} q and k)"
            )
        return {"computed_in": "float32", "precision": said + "."}
    if dtype == "float32":
        return {"computed_in": dtype, "precision": "float32, as the model computes them."}
    return {
        "computed_in": dtype,
        "precision": f"{dtype}, as the model's own eager attention computes them (its "
        f"softmax in float32 where its code does so, then rounded to {dtype}); f4 sends "
        "every value exactly.",
    }


@router.post("/attention", responses=ERRORS, response_model=AttentionResponse)
@between_layers
def attention(req: AttentionRequest, inference: InferenceDep) -> Response:
    """The requested matrices: per type, layer, head and kind, with the tokens of each axis."""
    entry = inference.entry(req.model)
    picture = inference.picture(req.image)
    result = inference.run(entry, req.text, req.chat, req.continuation, picture)
    blocks = attention_blocks(entry, result, req, inference.settings.max_response_bytes)
    body = AttentionResponse(
        model=entry.id,
        source_tokens=result.source_tokens,
        source_raw=result.raw("source"),
        target_tokens=result.target_tokens,
        target_raw=result.raw("target"),
        predicted_tokens=result.predicted_tokens,
        truncated=result.truncated,
        encoding=req.encoding,
        **precision_of(entry, result),
        blocks=blocks,
    )
    # serialised here, in the thread pool: a large answer must not hold the event loop
    return Response(attention_json(body), media_type="application/json")


@router.post(
    "/export",
    responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}},
    response_class=Response,
)
@on_tensor_thread
def export(req: ExportRequest, inference: InferenceDep) -> Response:
    """Every captured tensor of one input (float32; of `layers` only, where given) and its
    tokens, as an .npz download (numpy.load reads it)."""
    entry = inference.entry(req.model)
    picture = inference.picture(req.image)
    result = inference.run(entry, req.text, req.chat, req.continuation, picture)
    max_bytes = inference.settings.max_response_bytes
    named = "\0".join(filter(None, [req.text, req.image]))
    data, filename = export_npz(entry, named, result, req.layers, max_bytes)
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
