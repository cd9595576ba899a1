"""Who asked: the client and the request id of the request being served, and what pays
for its work, as context variables. The HTTP edge sets them (app/edge/clients.py,
app/edge/logs.py); the runs read them (a fair queue by client, progress by request id,
a run's price charged before it runs). A request's work on other threads copies the
context."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

# the client of the request being served (its address; `Clients.key`)
CLIENT: ContextVar[str] = ContextVar("attnviz_client", default="")
# the id the client gave the request being served, if any
CURRENT_REQUEST: ContextVar[str | None] = ContextVar("attnviz_request", default=None)

# what pays for the work of the request being served beyond its admission (a model run's,
# priced by its tokens and layers before it runs): its client's budget (`Clients.charge`,
# set by the edge); None outside a metered request (a test's, a background job's)
CHARGE: ContextVar[Callable[..., None] | None] = ContextVar("attnviz_charge", default=None)


def charge(units: float, what: str, how: str = "its tokens times its layers") -> None:
    """Charge the client of the request being served `units` of work for `what` (priced
    `how`), before the work is done: OverClientLimit (429 with Retry-After) where its
    budget cannot."""
    pay = CHARGE.get()
    if pay is not None and units > 0:
        pay(units, what, how)
