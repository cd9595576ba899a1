"""The attention lab: the seed tutorial's claims as experiments on the served models, by
interventions at the hook points (model/methods/analysis.py), never a second copy of the model.

Each experiment is one module, a function of (context, request), served as a `LabRoute`
that says what it needs of a model (app/lab/needs.py) and whether it runs the model
again: then the route takes one run slot for the whole experiment, or, for one that runs
it many times (`stepped`), a slot a step, so that other clients run between its steps.
Adding an experiment
is its module and one line: in `EXPERIMENTS` here, or `register(LabRoute(...))` from a
plugin module (`ATTNVIZ_PLUGINS`); its route, its place in the models' capabilities and
the docs' table follow. The views inside a head (app/head_views) are LabRoutes too."""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

import attnviz.app.lab.schemas as s

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe
from ..payloads.schemas import TextRequest
from ..request import charge
from ..runs.inference import Inference, work_units
from .ablation import AblationRequest, AblationResponse, ablation
from .alti import AltiRequest, AltiResponse, alti
from .compare import CompareRequest, CompareResponse, compare
from .context import LabContext
from .contribution import ContributionResponse, contribution
from .distance import DistanceRequest, DistanceResponse, distance
from .dla import DlaRequest, DlaResponse, dla
from .flow import FlowRequest, FlowResponse, flow
from .graph import GraphRequest, GraphResponse, graph
from .induction import InductionRequest, InductionResponse, induction
from .kv_cache import KVCacheRequest, KVCacheResponse, kv_cache
from .lens import LensRequest, LensResponse, lens
from .masks import MasksRequest, MasksResponse, masks
from .metrics import MetricsResponse, metrics
from .needle import DEFAULT_LENGTH, NeedleRequest, NeedleResponse, needle
from .needs import NEEDS, lacking, lacking_said
from .positions import PositionsRequest, PositionsResponse, positions
from .rollout import RolloutRequest, RolloutResponse, rollout
from .scaling import ScalingResponse, scaling


@dataclass(frozen=True)
class LabRoute:
    """A function of (LabContext, request) served at its route: a lab experiment, or a view
    inside a head (`what` names which, for the 422 of a model that lacks a need)."""

    id: str  # its route's last segment: /api/v1/lab/<id> (a head view's: /api/v1/<id>)
    # (its request: `request`), answering `response`, or with `stepped`, a generator
    # of steps that returns it
    run: Callable[[LabContext, Any], Any]
    request: type[BaseModel]
    response: type[BaseModel]
    needs: frozenset[str] = frozenset()  # what the model must have (app/lab/needs.py)
    runs_model: bool = False  # runs the model beyond the cached run: one run slot for all
    # runs the model many times, `run` a generator that yields between its model runs: a
    # run slot a step (app/runs/stepping.py), so that other clients run between its steps
    stepped: bool = False
    reads_long: bool = False  # reads a long input's run (its queries and keys) by windows
    # what it runs beyond the cached run, in tokens read through every layer, from its
    # request and the text's tokens: its price, charged before it runs (default, where it
    # runs the model: two passes over the text)
    work: Callable[[Any, int], float] | None = None
    what: str = "experiment"  # what it is to a person: an experiment, or a view
    # reads a picture's run too (its request an InputRequest: `image` beside `text`)
    pictures: bool = False

    @property
    def summary(self) -> str:
        """What it shows: its module's docstring."""
        return sys.modules[self.run.__module__].__doc__ or ""

    def __post_init__(self) -> None:
        unknown = sorted(self.needs - NEEDS.keys())
        if unknown:
            raise ValueError(f"{self.id} needs what app/lab/needs.py does not name: {unknown}")

    def missing(self, entry: ModelEntry) -> list[str]:
        # (an experiment of texts alone needs a model that reads text)
        return lacking(entry, self.needs if self.pictures else self.needs | {"text"})

    def prepared(self, inference: Inference, req: TextRequest) -> LabContext:
        """Its context (the model's cached run), a 422 if the model lacks what it needs
        (before anything is run), and its price charged where it runs the model."""
        entry = inference.entry(req.model)
        missing = self.missing(entry)
        if missing:
            reasons = lacking_said(entry, missing)
            raise CannotServe(f"the {self.id} {self.what} cannot run on {entry.id}: it {reasons}")
        ctx = LabContext(
            inference,
            req.model,
            req.text,
            req.chat,
            req.continuation,
            long_ok=self.reads_long,
            picture=inference.picture(getattr(req, "image", None)),
        )
        if self.runs_model or self.stepped:
            read = len(ctx.result.source_ids) + len(ctx.result.target_ids)
            tokens = self.work(req, read) if self.work is not None else 2 * read
            charge(work_units(ctx.entry.config, tokens), f"the {self.id} {self.what}")
        return ctx

    def __call__(self, inference: Inference, req: TextRequest) -> BaseModel:
        """Run it for one request, its model runs in one run slot."""
        ctx = self.prepared(inference, req)
        with ctx.session() if self.runs_model else nullcontext():
            return self.run(ctx, req)

    def steps(self, inference: Inference, req: TextRequest) -> Generator[None, None, BaseModel]:
        """A `stepped` experiment's work for one request, checked and charged: its steps,
        each to be run in a run slot of its own (app/runs/stepping.py)."""
        return self.run(self.prepared(inference, req), req)


EXPERIMENTS: dict[str, LabRoute] = {
    e.id: e
    for e in (
        LabRoute("scaling", scaling, s.HeadRequest, ScalingResponse, runs_model=True),
        LabRoute("positions", positions, PositionsRequest, PositionsResponse,
                   frozenset({"encoder", "positions"}), runs_model=True),
        LabRoute("masks", masks, MasksRequest, MasksResponse, frozenset({"encoder"}),
                   runs_model=True),
        LabRoute("kv-cache", kv_cache, KVCacheRequest, KVCacheResponse,
                   frozenset({"cached_decoding"}), runs_model=True),
        LabRoute("metrics", metrics, TextRequest, MetricsResponse),
        LabRoute("rollout", rollout, RolloutRequest, RolloutResponse, pictures=True),
        LabRoute("flow", flow, FlowRequest, FlowResponse, pictures=True),
        LabRoute("distance", distance, DistanceRequest, DistanceResponse,
                 frozenset({"pictures"}), pictures=True),
        LabRoute("alti", alti, AltiRequest, AltiResponse, frozenset({"alti"}), runs_model=True),
        LabRoute("contribution", contribution, s.HeadRequest, ContributionResponse,
                 frozenset({"value_norms"})),
        LabRoute("lens", lens, LensRequest, LensResponse,
                 frozenset({"generation", "residual_stream"}), runs_model=True),
        LabRoute("dla", dla, DlaRequest, DlaResponse,
                 frozenset({"generation", "residual_stream", "value_norms"}), runs_model=True),
        LabRoute("graph", graph, GraphRequest, GraphResponse,
                 frozenset({"generation", "serial_blocks", "value_norms"}), runs_model=True),
        LabRoute("ablation", ablation, AblationRequest, AblationResponse, runs_model=True),
        LabRoute("compare", compare, CompareRequest, CompareResponse),
        LabRoute("induction", induction, InductionRequest, InductionResponse,
                   frozenset({"generation"}), stepped=True,
                   work=lambda req, _: 3 * 2 * req.length),  # (its sequence, twice, 3 passes)
        LabRoute("needle", needle, NeedleRequest, NeedleResponse,
                   frozenset({"generation"}), stepped=True,
                   work=lambda req, _: 3 * (req.length or DEFAULT_LENGTH)),  # (3 answers)
    )
}  # fmt: skip


def register(experiment: LabRoute) -> LabRoute:
    """Add an experiment to the lab (a plugin module's one line). Apps made after it serve
    its route, and list it in the capabilities of the models that have what it needs."""
    if experiment.id in EXPERIMENTS:
        raise ValueError(f"the lab already has an experiment {experiment.id!r}")
    EXPERIMENTS[experiment.id] = experiment
    return experiment


def available(entry: ModelEntry) -> list[str]:
    """The experiments a model can run, in the registry's order."""
    return [e.id for e in EXPERIMENTS.values() if not e.missing(entry)]


__all__ = ["EXPERIMENTS", "LabContext", "LabRoute", "available", "register"]
