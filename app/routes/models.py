"""The models and their positional encodings."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..schemas import ModelInfo, PositionalResponse
from ..service import positional_table
from ..zoo import ModelEntry
from .deps import BODY_ERRORS, QUERY_ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/models", tags=["models"])


def model_info(entry: ModelEntry, default: bool) -> ModelInfo:
    cfg = entry.config
    return ModelInfo(
        id=entry.id,
        title=entry.title,
        description=entry.description,
        architecture=cfg.architecture,
        encoder_layers=cfg.n_layers if cfg.has_encoder else 0,
        decoder_layers=cfg.decoder_layers if cfg.has_decoder else 0,
        heads=cfg.n_heads,
        d_model=cfg.d_model,
        positional=cfg.positional,
        languages=entry.languages,
        max_tokens=entry.runner.max_source_tokens,
        tokens=entry.tokens,
        output=entry.output,
        attention_types=entry.attention_types(),
        default=default,
    )


@router.get("", responses=BODY_ERRORS)
def list_models(inference: InferenceDep) -> list[ModelInfo]:
    """Every loaded model, with the shapes of its attention."""
    zoo = inference.zoo
    return [model_info(e, e.id == zoo.default) for e in zoo.models.values()]


@router.get("/{model_id}/positional-encoding", responses=QUERY_ERRORS)
def positional_encoding(
    model_id: str,
    inference: InferenceDep,
    positions: Annotated[int, Query(ge=1, le=4096, description="Positions 0..n-1.")] = 64,
    dims: Annotated[int, Query(ge=1, le=4096, description="First dims of the table.")] = 64,
) -> PositionalResponse:
    """The positional table the model adds (sinusoidal: the formula; learned: its weights;
    rotary: its angles), and the cosine similarity of every pair of positions."""
    entry = inference.entry(model_id)
    return PositionalResponse(model=entry.id, **positional_table(entry, positions, dims))
