"""The lab's routes, one per experiment registered when the app is made (plugins
included: app/lab), and the views inside a head (app/head_views)."""

from fastapi import APIRouter

from ...head_views import HEAD_VIEWS
from ...lab import EXPERIMENTS, LabRoute
from .deps import ERRORS, InferenceDep, in_steps, on_tensor_thread


def _route(served: LabRoute, router: APIRouter) -> None:
    def endpoint(req, inference):
        return served.steps(inference, req) if served.stepped else served(inference, req)

    # the request and response models are its own, for validation and OpenAPI
    endpoint.__annotations__ = {
        "req": served.request,
        "inference": InferenceDep,
        "return": served.response,
    }
    endpoint.__name__ = served.id.replace("-", "_")
    endpoint.__doc__ = served.summary
    router.post(f"/{served.id}")((in_steps if served.stepped else on_tensor_thread)(endpoint))


def routers() -> list[APIRouter]:
    """The lab's router and the head views' router, as the registries hold them now."""
    lab = APIRouter(prefix="/api/v1/lab", tags=["lab"], responses=ERRORS)
    for experiment in EXPERIMENTS.values():
        _route(experiment, lab)
    inside = APIRouter(prefix="/api/v1", tags=["inside a head"], responses=ERRORS)
    for view in HEAD_VIEWS.values():
        _route(view, inside)
    return [lab, inside]
