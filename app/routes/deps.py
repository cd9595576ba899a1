"""Dependencies the routes share."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from ..runs import Inference
from ..schemas import ErrorMessage

T = TypeVar("T")


def get_inference(request: Request) -> Inference:
    return request.app.state.inference


InferenceDep = Annotated[Inference, Depends(get_inference)]


def on_tensor_thread(endpoint: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """A sync endpoint with an `inference` parameter, run on the tensor threads
    (`Inference.on_tensor_thread`) instead of the request thread pool: FastAPI reads the
    same signature, with its annotations resolved."""

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> T:
        return await kwargs["inference"].on_tensor_thread(endpoint, *args, **kwargs)

    run.__signature__ = inspect.signature(endpoint, eval_str=True)  # type: ignore[attr-defined]
    return run


def _error(description: str) -> dict:
    return {"model": ErrorMessage, "description": description}


TOO_LARGE = _error("Request body too large (checked with or without Content-Length).")
UNKNOWN_MODEL = _error("Unknown model.")

# Any route: the body limit is enforced before routing, whatever the method.
BODY_ERRORS: dict[int | str, dict] = {413: TOO_LARGE}
# GET routes with a model and parameters.
QUERY_ERRORS: dict[int | str, dict] = {
    404: UNKNOWN_MODEL,
    413: TOO_LARGE,
    422: _error(
        "Invalid parameter (wrong type, out of range for the model): the message says "
        "what to change."
    ),
}
# POST routes with a JSON body that run a model.
ERRORS: dict[int | str, dict] = {
    400: _error("The body cannot be read: not UTF-8 (or -16, -32) text, or nested too deeply."),
    404: UNKNOWN_MODEL,
    413: TOO_LARGE,
    415: _error("The body is not sent as JSON (Content-Type: application/json)."),
    422: _error(
        "Invalid input (not JSON, a wrong field, a value out of range for the model): "
        "the message says what to change."
    ),
    503: _error("Too many requests running; retry after Retry-After seconds."),
}
