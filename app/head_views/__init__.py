"""Views that look inside a head, each a route of its own (/api/v1/<id>): the neuron view
and the query-key space. They share the lab's context (app/lab/context.py) and are
LabRoutes as its experiments are: what each needs of a model, whether it runs the model
again."""

from __future__ import annotations

import attnviz.app.head_views.schemas as s

from ..lab import LabRoute
from .neuron import neuron
from .qk_space import qk_space

HEAD_VIEWS: dict[str, LabRoute] = {
    v.id: v
    for v in (
        LabRoute("neuron", neuron, s.NeuronRequest, s.NeuronResponse, runs_model=True,
                 reads_long=True, what="view"),
        LabRoute("qk-space", qk_space, s.QKSpaceRequest, s.QKSpaceResponse, what="view"),
    )
}  # fmt: skip
