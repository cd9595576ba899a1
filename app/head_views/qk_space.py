"""The query-key space of a head (AttentionViz's view): the queries and keys of every
token of the text, and of more sentences where given, as one point cloud, made faithful
as model/methods/geometry.py says (keys translated and both scaled: no softmax changes), then
projected by PCA, UMAP or t-SNE. Each query lists the keys it attends most, for the
page's click. Under grouped-query attention a key belongs to its key/value head: the
cloud of one query head shows the keys every head of its group reads."""

from __future__ import annotations

import torch

import attnviz.app.head_views.schemas as s
from attnviz.model.attention import masked_softmax
from attnviz.model.methods.geometry import (
    ProjectionFailed,
    dot_distance_correlation,
    normalize,
    project,
    warm,
)

from ..corpus.jobs import CorpusRuns
from ..corpus.results import HeadKey
from ..errors import Busy, CannotServe
from ..lab.context import LabContext
from ..request import charge
from ..runs.inference import work_units
from ..runs.reading import read_text

WARMING = 20  # seconds a client is told to wait while a projection warms up
TEXTS_CHARS = 8  # the further sentences' characters, in all, in text lengths
NONLINEAR_POINTS = 6000  # UMAP and t-SNE: a minute or so here at most


def qk_space(ctx: LabContext, req: s.QKSpaceRequest) -> s.QKSpaceResponse:
    spec = ctx.spec(req.type)
    ctx.check_head(spec, req.layer, req.head)
    if not warm(req.projection):
        raise Busy(
            f"the {req.projection} projection is being prepared (its first run compiles "
            f"it): retry in about {WARMING} s",
            headers={"Retry-After": str(WARMING)},
        )
    group = spec.query_heads // spec.kv_heads
    kv_head = req.head // group
    pieces = [piece(ctx.result, spec, req.layer, req.head, kv_head)]
    pieces += extra(ctx, req, spec, kv_head)
    if req.corpus_run is not None:
        pieces += corpus_pieces(ctx, req, spec)
    queries: list[torch.Tensor] = []
    keys: list[torch.Tensor] = []
    blocks: list = []
    sentences: list = []
    q_cloud: dict[str, list] = {"tokens": [], "positions": [], "sentences": []}
    k_cloud: dict[str, list] = {"tokens": [], "positions": [], "sentences": []}
    tops, top_weights = [], []
    for index, (q, k, allowed, weights, rows, columns, text) in enumerate(pieces):
        offset = sum(len(x) for x in keys)
        best = weights.topk(min(req.top, k.size(0)), dim=-1)
        seen = best.values > 0  # keys the mask hides (weight 0) are not listed
        tops += [(i[s] + offset).tolist() for i, s in zip(best.indices, seen, strict=True)]
        top_weights += [v[s].tolist() for v, s in zip(best.values, seen, strict=True)]
        for cloud, tokens in ((q_cloud, rows), (k_cloud, columns)):
            cloud["tokens"] += tokens
            cloud["positions"] += list(range(len(tokens)))
            cloud["sentences"] += [index] * len(tokens)
        queries.append(q)
        keys.append(k)
        blocks.append((q, k, allowed))
        sentences.append(text)
    q_all, k_all = torch.cat(queries), torch.cat(keys)
    made = normalize(q_all, k_all)
    after, q_at, k_at = [], 0, 0  # each sentence's block of the normalized vectors
    for q, k, allowed in blocks:
        after.append((made.queries[q_at : q_at + len(q)], made.keys[k_at : k_at + len(k)], allowed))
        q_at, k_at = q_at + len(q), k_at + len(k)
    points = torch.cat([made.queries, made.keys])
    if req.projection != "pca" and len(points) > NONLINEAR_POINTS:
        raise CannotServe(
            f"{len(points)} points: {req.projection} projects at most {NONLINEAR_POINTS} "
            "in one request (PCA any number): use fewer sentences",
        )
    try:
        coords, said = project(points, req.projection, req.dims, req.seed)
    except ValueError as exc:
        raise CannotServe(str(exc)) from None
    except ProjectionFailed as exc:  # (killed for memory, most likely: the next starts anew)
        raise Busy(f"{exc}: retry shortly", headers={"Retry-After": "5"}) from None
    n_q = len(q_all)
    return s.QKSpaceResponse(
        model=ctx.entry.id,
        type=spec.type,
        layer=req.layer,
        head=req.head,
        kv_head=kv_head,
        shared_with=list(range(kv_head * group, (kv_head + 1) * group)),
        projection=req.projection,
        dims=req.dims,
        sentences=sentences,
        queries=s.Cloud(**q_cloud, coords=coords[:n_q].round(5).tolist()),
        keys=s.Cloud(**k_cloud, coords=coords[n_q:].round(5).tolist()),
        top_keys=tops,
        top_weights=[[round(w, 6) for w in row] for row in top_weights],
        scale=made.scale,
        shift_norm=float(made.shift.norm()),
        correlation_before=dot_distance_correlation(blocks),
        correlation_after=dot_distance_correlation(after),
        explained_variance=said.get("explained_variance", []),
    )


Piece = tuple  # (q (Tq, d), k (Tk, d), allowed (Tq, Tk) | None, weights, rows, columns, text)


def piece(result, spec, layer: int, head: int, kv_head: int) -> Piece:
    """One sentence's queries, keys, mask and weights of the head, from its capture."""
    capture = result.capture
    q = capture[spec.hook(layer, "hook_q")][0, head].float()
    k = capture[spec.hook(layer, "hook_k")][0, kv_head].float()
    weights = capture[spec.hook(layer, "hook_weights")][0, head].float()
    mask_name = spec.hook(layer, "hook_mask")
    allowed = capture[mask_name][0, 0].bool() if mask_name in capture else None
    return (
        q,
        k,
        allowed,
        weights,
        result.tokens(spec.rows),
        result.tokens(spec.columns),
        result.text,
    )


def extra(ctx: LabContext, req: s.QKSpaceRequest, spec, kv_head: int) -> list[Piece]:
    """The further sentences, each run with only this layer's attention captured (not
    kept in the run cache), in a run slot of its own."""
    limit = ctx.inference.settings.max_text_chars  # (sentences: a long text is refused)
    total = sum(len(t) for t in req.texts)
    if total > TEXTS_CHARS * limit:
        raise CannotServe(
            f"texts have {total} characters in all; the limit is {TEXTS_CHARS * limit} "
            f"({TEXTS_CHARS} x ATTNVIZ_MAX_TEXT_CHARS): for more, use a corpus run",
        )
    names = [spec.hook(req.layer, p) for p in ("hook_q", "hook_k", "hook_weights", "hook_mask")]
    out = []
    for i, text in enumerate(req.texts):
        text = read_text(text, limit, f"texts[{i}]")
        tokens = ctx.runner.tokens_read(text)
        charge(work_units(ctx.config, tokens), f"texts[{i}]'s run ({tokens:,} tokens)")
        with ctx.inference.limiter.slot():
            try:
                result = ctx.runner.run(text, capture=True, names_filter=names)
            except ValueError as exc:
                raise CannotServe(f"texts[{i}] cannot be read: {exc}") from None
        out.append(piece(result, spec, req.layer, req.head, kv_head))
    return out


def corpus_pieces(ctx: LabContext, req: s.QKSpaceRequest, spec) -> list[Piece]:
    """A corpus run's kept vectors of this head, sentence by sentence, their weights
    recomputed from them (the softmax of q k / sqrt(d), causal where the head is)."""
    if req.corpus_run is None:
        return []
    job = CorpusRuns.of(ctx.inference).get(req.corpus_run)
    if job.entry.id != ctx.entry.id:
        raise CannotServe(f"corpus run {job.id} read {job.entry.id}, not {ctx.entry.id}")
    kept = job.vectors.get(HeadKey(spec.type, req.layer, req.head))
    if kept is None:
        said = ", ".join(f"{h.type} L{h.layer} H{h.head}" for h in job.keep) or "none"
        raise CannotServe(
            f"corpus run {job.id} kept no vectors of {spec.type} L{req.layer} "
            f"H{req.head} (it kept: {said}): name the head in its `vectors`",
        )
    scale = ctx.score_scale(spec)
    out = []
    for q, k, rows, columns, index in zip(
        kept.queries, kept.keys, kept.rows, kept.columns, kept.sentence, strict=False
    ):
        allowed = None
        if spec.type == "decoder.self":
            allowed = torch.ones(len(q), len(k), dtype=torch.bool).tril(len(k) - len(q))
        weights = masked_softmax(q @ k.T * scale, allowed)
        out.append((q, k, allowed, weights, rows, columns, job.sentences[index]))
    return out
