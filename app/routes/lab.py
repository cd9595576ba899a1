"""The attention lab: experiments on the served models (see app/lab.py)."""

from __future__ import annotations

from fastapi import APIRouter

from .. import lab_schemas as s
from ..lab import Lab, compare
from ..schemas import TextRequest
from .deps import ERRORS, InferenceDep

router = APIRouter(prefix="/api/v1/lab", tags=["lab"], responses=ERRORS)


@router.post("/scaling")
def scaling(req: s.HeadRequest, inference: InferenceDep) -> s.ScalingResponse:
    """Why divide by √d_k: the same input with and without the scaling of q kᵀ — one head's
    weights both ways, and every head's entropy and largest weight both ways."""
    lab = Lab(inference, req.model, req.text)
    with lab.session():  # one run slot for the experiment's model runs
        return lab.scaling(req)


@router.post("/positions")
def positions(req: s.PositionsRequest, inference: InferenceDep) -> s.PositionsResponse:
    """Order needs positional encodings: the encoder on the input and on a permutation of
    it (default reversed: 猫追狗 → 狗追猫), with its positional encoding and without. Without
    it the permuted input's weights are the permuted weights (max abs diff ~1e-6)."""
    lab = Lab(inference, req.model, req.text)
    with lab.session():  # one run slot for the experiment's model runs
        return lab.positions(req)


@router.post("/masks")
def masks(req: s.MasksRequest, inference: InferenceDep) -> s.MasksResponse:
    """Masks at work: decoder self-attention with the causal mask and without it (the
    future it would see), and a padded batch of two sentences with its padding mask."""
    lab = Lab(inference, req.model, req.text)
    with lab.session():  # one run slot for the experiment's model runs
        return lab.masks(req)


@router.post("/kv-cache")
def kv_cache(req: TextRequest, inference: InferenceDep) -> s.CacheResponse:
    """The KV cache step by step: each decoding step's new query row over the cached keys,
    the cache's size per layer, and cached against uncached logits."""
    return Lab(inference, req.model, req.text).kv_cache()


@router.post("/metrics")
def metrics(req: TextRequest, inference: InferenceDep) -> s.MetricsResponse:
    """Per layer x head of every attention type: entropy, max weight, mean distance,
    previous-token, first-token and special-token weight, cross-attention alignment."""
    return Lab(inference, req.model, req.text).metrics()


@router.post("/rollout")
def rollout(req: s.RolloutRequest, inference: InferenceDep) -> s.RolloutResponse:
    """Attention rollout (Abnar & Zuidema 2020) through a self-attention stack."""
    return Lab(inference, req.model, req.text).rollout(req)


@router.post("/ablation")
def ablation(req: s.AblationRequest, inference: InferenceDep) -> s.AblationResponse:
    """Switch off heads and see the output change: the transcription and its tokens'
    probabilities, or the sentence embedding's cosine to the original."""
    return Lab(inference, req.model, req.text).ablation(req)


@router.post("/compare")
def compare_heads(req: s.CompareRequest, inference: InferenceDep) -> s.CompareResponse:
    """One head for two inputs, or two models, with the difference where tokens match."""
    return compare(inference, req)
