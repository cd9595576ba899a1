"""Structured logs: one line per request on stdout, and uvicorn's own lines alike."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..request import CURRENT_REQUEST

ACCESS = logging.getLogger("attnviz.access")
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# the requests being answered (their ASGI scopes, by id): what a held event loop names
# (loop_watch.py), so that an operator sees which requests were in flight meanwhile
IN_FLIGHT: dict[int, Scope] = {}


def in_flight(most: int = 8) -> list[str]:
    """The routes of the requests being answered, the commonest first, with their counts
    ("POST /api/v1/lab/graph x3"), `most` of them."""
    routes = Counter(_route(scope) for scope in list(IN_FLIGHT.values()))
    return [f"{route} x{n}" if n > 1 else route for route, n in routes.most_common(most)]


def _route(scope: Scope) -> str:
    """A request's method and route template (its path, cut, before it is routed)."""
    route = scope.get("route")
    return f"{scope['method']} {getattr(route, 'path', None) or scope['path'][:100]}"


_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# what str.splitlines and some log shippers end a line at beyond the control characters
# (which JSON escapes already): written as JSON escapes, so that one record stays one line
_LINE_ENDS = {c: f"\\u{c:04x}" for c in (0x85, 0x2028, 0x2029)}


class JsonFormatter(logging.Formatter):
    """A JSON object per line: time, level, logger, message and the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS})
        line.pop("color_message", None)  # uvicorn's coloured copy of the message
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        # (characters that other readers take for a line's end, escaped: a request path
        # holding U+2028 split its access line in two for Python's splitlines)
        return json.dumps(line, ensure_ascii=False, default=str).translate(_LINE_ENDS)


def log_config(fmt: str, level: str) -> dict[str, Any]:
    """logging.dictConfig for uvicorn.run(log_config=...): every line to stdout."""
    formatter = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stdout"}
    logger = {"handlers": ["stdout"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"stdout": handler},
        "loggers": {
            "uvicorn": logger,
            "uvicorn.error": {"level": level.upper()},
            "attnviz": logger,
        },
    }


class AccessLog:
    """Log each HTTP request once it is answered: request id, method, route, status, duration.

    The request id is the client's `X-Request-ID` when it is a short plain token, else a new
    one; either way it is sent back in the response's `X-Request-ID` header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        start = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        # (a run's progress is kept for a client that names its request: it can ask for it)
        token = CURRENT_REQUEST.set(given if request_id == given else None)
        IN_FLIGHT[id(scope)] = scope
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            IN_FLIGHT.pop(id(scope), None)
            CURRENT_REQUEST.reset(token)
            route = scope.get("route")
            ACCESS.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "route": getattr(route, "path", None) or scope["path"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                },
            )
