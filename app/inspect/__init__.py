"""Views that look inside a head, each a route of its own (/api/v1/<id>): the neuron view
and the query-key space. They share the lab's context (app/lab/context.py) and its
Experiment, which says what each needs of a model and whether it runs the model again."""

from __future__ import annotations

from ..lab import Experiment
from . import schemas as s
from .neuron import neuron
from .qk_space import qk_space

INSPECTIONS: dict[str, Experiment] = {
    e.id: e
    for e in (
        Experiment(
            "neuron", neuron, s.NeuronRequest, s.NeuronResponse, runs_model=True, reads_long=True
        ),
        Experiment("qk-space", qk_space, s.QKSpaceRequest, s.QKSpaceResponse),
    )
}
