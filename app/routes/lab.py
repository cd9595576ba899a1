"""The attention lab's routes, one per experiment of the registry (app/lab)."""

from fastapi import APIRouter

from ..inspect import INSPECTIONS
from ..lab import EXPERIMENTS, Experiment
from .deps import ERRORS, InferenceDep, on_tensor_thread

router = APIRouter(prefix="/api/v1/lab", tags=["lab"], responses=ERRORS)
# the views inside a head (app/inspect), served as the lab's experiments are
inspect_router = APIRouter(prefix="/api/v1", tags=["inside a head"], responses=ERRORS)


def _route(experiment: Experiment, router: APIRouter = router) -> None:
    def endpoint(req, inference):
        return experiment(inference, req)

    # the request and response models are the experiment's own, for validation and OpenAPI
    endpoint.__annotations__ = {
        "req": experiment.request,
        "inference": InferenceDep,
        "return": experiment.response,
    }
    endpoint.__name__ = experiment.id.replace("-", "_")
    endpoint.__doc__ = experiment.summary
    router.post(f"/{experiment.id}")(on_tensor_thread(endpoint))


for _experiment in EXPERIMENTS.values():
    _route(_experiment)
for _inspection in INSPECTIONS.values():
    _route(_inspection, inspect_router)
