"""What the lab's experiments share on the wire: a request naming one head, a head named in
a list, and a matrix. (Each experiment's own request and response sit in its module.)"""

from __future__ import annotations

from pydantic import Field

from ..payloads.schemas import AttentionType, Index, Strict, TextRequest

Matrix = list[list[float]]


class HeadRequest(TextRequest):
    type: AttentionType | None = Field(None, description="Default: the model's first type.")
    layer: Index = 0
    head: Index = 0


class HeadRef(Strict):
    type: AttentionType
    layer: Index
    head: Index
