"""Dependencies the routes share."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Response
from pydantic import BaseModel, TypeAdapter

from ...payloads.schemas import ErrorMessage
from ...payloads.wire import json_with_arrays
from ...runs.inference import Inference
from ...runs.stepping import finished

T = TypeVar("T")


def get_inference(request: Request) -> Inference:
    return request.app.state.inference


InferenceDep = Annotated[Inference, Depends(get_inference)]


def _answering(returns: Any) -> Callable[[Any], Response]:
    """How an endpoint's value becomes its answer, on a tensor thread: FastAPI would
    serialise an async endpoint's answer on the event loop, where a large one holds every
    other request."""
    plain = isinstance(returns, type) and issubclass(returns, Response)
    adapter = None if plain or returns is inspect.Signature.empty else TypeAdapter(returns)

    def answer(value: Any) -> Response:
        if isinstance(value, Response) or adapter is None:
            return value
        if isinstance(value, BaseModel):  # (its large float arrays written a few rows a call)
            return Response(json_with_arrays(value), media_type="application/json")
        return Response(adapter.dump_json(value, by_alias=True), media_type="application/json")

    return answer


def on_tensor_thread(endpoint: Callable[..., T]) -> Callable[..., Awaitable[Response]]:
    """A sync endpoint with an `inference` parameter, run on the tensor threads
    (`Inference.on_tensor_thread`) instead of the request thread pool, its answer
    serialised to JSON there too. FastAPI reads the same signature, with its annotations
    resolved (the return type documents the answer)."""
    return _on_tensor_thread(endpoint, between=False)


def between_layers(endpoint: Callable[..., T]) -> Callable[..., Awaitable[Response]]:
    """`on_tensor_thread` for an endpoint whose work is a run (`Inference.run`) and what
    is read of it: where the run is short it may run in a long pass's turn, between two of
    its layers (app/runs/turns.py)."""
    return _on_tensor_thread(endpoint, between=True)


def _on_tensor_thread(
    endpoint: Callable[..., T], between: bool
) -> Callable[..., Awaitable[Response]]:
    signature = inspect.signature(endpoint, eval_str=True)
    answer = _answering(signature.return_annotation)

    def answered(*args: Any, **kwargs: Any) -> Response:
        return answer(endpoint(*args, **kwargs))

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> Response:
        inference: Inference = kwargs["inference"]
        send = inference.between_layers if between else inference.on_tensor_thread
        return await send(answered, *args, **kwargs)

    run.__signature__ = signature  # type: ignore[attr-defined]
    return run


def in_steps(
    endpoint: Callable[..., Generator[Any, None, Any]],
) -> Callable[..., Awaitable[Response]]:
    """A sync endpoint with an `inference` parameter that returns its work as steps (a
    generator that yields between its model runs and returns the answer): its checks on a
    tensor thread, then each step a tensor thread task in a run slot of its own
    (app/runs/stepping.py), the answer serialised on a tensor thread. Its return
    annotation is the answer's type."""
    signature = inspect.signature(endpoint, eval_str=True)
    answer = _answering(signature.return_annotation)

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> Response:
        inference: Inference = kwargs["inference"]
        steps = await inference.on_tensor_thread(endpoint, *args, **kwargs)  # 4xx here
        inference.limiter.check()
        value = await finished(inference, steps)
        return await inference.on_tensor_thread(answer, value)

    run.__signature__ = signature  # type: ignore[attr-defined]
    return run


def _error(description: str) -> dict:
    return {"model": ErrorMessage, "description": description}


TOO_LARGE = _error("Request body too large (checked with or without Content-Length).")
UNKNOWN_MODEL = _error("Unknown model.")
NOT_STARTED = _error("No run of this request id has started (or it is long forgotten).")
TOO_MANY = _error(
    "This client's share is spent: as many requests in flight as one client may have "
    "(ATTNVIZ_CLIENT_REQUESTS), its cost of the minute (ATTNVIZ_CLIENT_COST_PER_MINUTE), or "
    "for a corpus run, as many runs waiting (ATTNVIZ_CORPUS_RUNS_PER_CLIENT); retry after "
    "Retry-After seconds."
)

# Any API route: the body limit and the client's share are enforced before routing.
BODY_ERRORS: dict[int | str, dict] = {413: TOO_LARGE, 429: TOO_MANY}
# POST /figure/pdf: a body of SVG
FIGURE_ERRORS: dict[int | str, dict] = {
    **BODY_ERRORS,
    422: _error(
        "The body is not an SVG document, or it holds what a figure may not (an image "
        "that is no PNG, too many pixels): the message says which."
    ),
}
# GET routes with a model and parameters.
QUERY_ERRORS: dict[int | str, dict] = {
    404: UNKNOWN_MODEL,
    413: TOO_LARGE,
    429: TOO_MANY,
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
    429: TOO_MANY,
    503: _error("Too many requests running; retry after Retry-After seconds."),
}
