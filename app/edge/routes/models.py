"""The models and their positional encodings."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from typing import Annotated

import numpy as np
import torch
from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from attnviz.model.outputs import output_of
from attnviz.model.placement import module_bytes
from attnviz.model.runner import masking

from ...catalog.info import (
    AttentionInfo,
    CapabilitiesInfo,
    Citation,
    MemoryInfo,
    ModelInfo,
    PositionalResponse,
    RefusedModel,
)
from ...catalog.yours import OwnRunner
from ...catalog.zoo import REGISTRY, ModelEntry
from ...lab import available
from ...payloads.wire import BYTES_PER_ENTRY, json_with_arrays
from ...runs.inference import Inference
from ...runs.positional import positional_table
from ...runs.reading import text_limit
from ...version import VERSION
from .deps import BODY_ERRORS, QUERY_ERRORS, InferenceDep, on_tensor_thread

router = APIRouter(prefix="/api/v1/models", tags=["models"])
JSON_FLOAT_BYTES = BYTES_PER_ENTRY["json"]  # a float of the table (rounded: wire.encode)


def model_info(
    entry: ModelEntry, default: bool, max_text_chars: int, max_new_tokens: int
) -> ModelInfo:
    """What the page and API clients need to know of a model, as its runner states it."""
    cfg, runner = entry.config, entry.runner
    attention = [
        AttentionInfo.model_validate(spec, from_attributes=True) for spec in entry.specs.values()
    ]
    return ModelInfo(
        id=entry.id,
        title=entry.title,
        titles=entry.titles,
        description=entry.description,
        source=entry.origin.shown if entry.origin else "shipped",
        family=entry.origin.model_type if entry.origin else None,
        stored_as=entry.origin.stored if entry.origin else None,
        parameters=runner.parameter_count  # a model of yours: counted unread
        if isinstance(runner, OwnRunner)
        else sum(p.numel() for p in runner.model.parameters()),  # (tied: listed once)
        dtype=entry.origin.dtype if entry.origin else "float32",
        device=entry.origin.device if entry.origin else "cpu",
        quantized=entry.origin.quantized if entry.origin else None,
        weight_bytes=runner.bytes if isinstance(runner, OwnRunner) else module_bytes(runner.model),
        memory=memory_of(runner),
        architecture=cfg.architecture,
        encoder_layers=cfg.n_layers if cfg.has_encoder else 0,
        decoder_layers=cfg.decoder_layers if cfg.has_decoder else 0,
        d_model=cfg.d_model,
        positional=cfg.positional,
        languages=entry.languages,
        max_tokens=runner.max_tokens,
        max_text_chars=max_text_chars,
        max_new_tokens=max_new_tokens if runner.capabilities.generation else None,
        token_unit=runner.token_unit,
        special_tokens=sorted(runner.special_tokens),
        unknown_token=runner.unknown_token,
        output=runner.output_kind,
        mask_token=masking(runner).mask_token if output_of(runner).fills_masks else None,
        attention_types=entry.attention_types(),
        attention=attention,
        capabilities=CapabilitiesInfo(
            **dataclasses.asdict(runner.capabilities),
            value_norms=entry.value_norms,
            experiments=available(entry),
        ),
        start_head=entry.start,
        examples=list(entry.examples),
        default=default,
    )


def memory_of(runner) -> MemoryInfo | None:
    """A model of yours: its device's pool of models of yours (a shipped one has none)."""
    if not isinstance(runner, OwnRunner):
        return None
    pool = runner.pool
    return MemoryInfo(
        device=pool.device, budget_bytes=pool.max_bytes, source=pool.source,
        loaded=runner.is_loaded,
    )  # fmt: skip


def model_infos(inference: Inference) -> list[ModelInfo]:
    zoo, settings = inference.zoo, inference.settings
    return [
        model_info(e, e.id == zoo.default, text_limit(settings, e.runner), settings.max_new_tokens)
        for e in zoo.models.values()
    ]


def refused_infos(inference: Inference) -> list[RefusedModel]:
    return [RefusedModel(id=i, reason=why) for i, why in inference.zoo.refused.items()]


@router.get("", responses=BODY_ERRORS)
def list_models(inference: InferenceDep) -> list[ModelInfo | RefusedModel]:
    """Every loaded model, with the shapes of its attention; then each model named to the
    server that it cannot serve (`status: "refused"`), with the reason."""
    return [*model_infos(inference), *refused_infos(inference)]


@router.get(
    "/{model_id}/positional-encoding", responses=QUERY_ERRORS, response_model=PositionalResponse
)
@on_tensor_thread
def positional_encoding(
    model_id: str,
    inference: InferenceDep,
    positions: Annotated[int, Query(ge=1, le=4096, description="Positions 0..n-1.")] = 64,
    dims: Annotated[int, Query(ge=1, le=4096, description="First dims of the table.")] = 64,
) -> Response:
    """The positional table the model adds (sinusoidal: the formula; learned: its weights;
    rotary: its angles), and the cosine similarity of every pair of positions."""
    entry = inference.entry(model_id)
    size = (positions * positions + positions * dims) * JSON_FLOAT_BYTES
    limit = inference.settings.max_response_bytes
    if size > limit:
        most = int((-dims + math.sqrt(dims * dims + 4 * limit / JSON_FLOAT_BYTES)) / 2)
        raise HTTPException(
            422,
            f"{positions} positions make a table of about {size / 1e6:.0f} MB (their "
            f"similarity is positions x positions), over the {limit / 1e6:.0f} MB an answer "
            f"may have (ATTNVIZ_MAX_RESPONSE_BYTES): ask for at most {most} positions",
        )
    table = positional_table(entry, positions, dims)
    arrays = {name: table.pop(name) for name in ("table", "similarity")}
    body = PositionalResponse(model=entry.id, **table, table=[], similarity=[])
    slots: list[tuple[BaseModel, str, np.ndarray]] = [
        (body, name, array) for name, array in arrays.items()
    ]
    return Response(json_with_arrays(body, slots), media_type="application/json")


@router.get("/{model_id}/citation", responses=QUERY_ERRORS, response_model=Citation)
@on_tensor_thread
def citation(model_id: str, inference: InferenceDep) -> Citation:
    """What a citation of a view names of its model: the attnviz version, where the weights
    come from, and a hash of the weights as computed (made once a process, on first ask)."""
    entry = inference.entry(model_id)
    return Citation(
        attnviz=VERSION,
        model=entry.id,
        title=entry.title,
        source=source_of(entry),
        weights_sha256=weights_hash(entry),
    )


def source_of(entry: ModelEntry) -> str:
    """Where a model's weights come from, as a reader can fetch them again."""
    if entry.origin is not None:  # (its name, never a path of the server's disk)
        origin = entry.origin
        revision = re.search(r"/snapshots/([0-9a-f]{7,64})", origin.path)
        at = f" at revision {revision.group(1)}" if revision else ""
        return f"{origin.shown}{at} ({origin.model_type}, {origin.stored})"
    family = REGISTRY.get(entry.id.removesuffix("-untrained"))
    if entry.id.endswith("-untrained"):
        return f"untrained twin of {family.id if family else entry.id}: seeded random weights"
    return family.source if family is not None and family.source else "shipped with attnviz"


def weights_hash(entry: ModelEntry) -> str:
    """SHA-256 of the model's state as it is held, each tensor's bytes in its dtype
    (Citation.weights_sha256: a float32 model's, its float32 bytes), made once an entry."""
    known = HASHES.get(entry.id)
    if known is None or known[0] is not entry.runner:
        state = entry.loaded_runner().model.state_dict()
        digest = hashlib.sha256()
        for name in sorted(state):
            tensor = state[name].detach().to("cpu").contiguous()
            digest.update(name.encode())
            raw = tensor.reshape(-1).view(torch.uint8) if tensor.numel() else None
            digest.update(raw.numpy().tobytes() if raw is not None else b"")
        known = HASHES[entry.id] = (entry.runner, digest.hexdigest())
    return known[1]


HASHES: dict[str, tuple[object, str]] = {}
