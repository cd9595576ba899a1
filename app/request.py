"""Who asked: the client and the request id of the request being served, as context
variables. The HTTP edge sets them (app/edge/clients.py, app/edge/logs.py); the runs read
them (a fair queue by client, progress by request id). A request's work on other threads
copies the context."""

from __future__ import annotations

from contextvars import ContextVar

# the client of the request being served (its address; `Clients.key`)
CLIENT: ContextVar[str] = ContextVar("attnviz_client", default="")
# the id the client gave the request being served, if any
CURRENT_REQUEST: ContextVar[str | None] = ContextVar("attnviz_request", default=None)
