"""Dependencies the routes share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..schemas import ErrorMessage
from ..service import Inference


def get_inference(request: Request) -> Inference:
    return request.app.state.inference


InferenceDep = Annotated[Inference, Depends(get_inference)]

ERRORS: dict[int | str, dict] = {
    400: {"model": ErrorMessage, "description": "The body is not JSON (or not UTF-8)."},
    404: {"model": ErrorMessage, "description": "Unknown model."},
    413: {"model": ErrorMessage, "description": "Request body too large."},
    422: {"model": ErrorMessage, "description": "Invalid input: the message says what to change."},
    503: {
        "model": ErrorMessage,
        "description": "Too many requests running; retry after Retry-After seconds.",
    },
}
