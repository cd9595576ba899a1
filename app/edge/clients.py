"""Fair shares of the server: each client (by address) may have a bounded number of API
requests in flight, spend a bounded cost of requests a minute, and, apart, cause a bounded
work of model runs a minute; past any, a 429 with Retry-After. A browser on the page never
comes near them (it keeps at most six connections to a server and asks one view at a
time); a client that sends more only waits for itself, not for everyone else."""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import logging
import math
import threading
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import OverClientLimit
from ..request import CHARGE, CLIENT
from ..settings import ApiKey

# A request's cost against the per-minute budget: what it makes the server do, roughly in
# model runs. A plain GET (a run's progress, the model list) costs 1.
COSTS = {
    "/api/v1/corpus-runs": 20,
    "/api/v1/corpus-runs/upload": 20,
    "/api/v1/export": 10,
    "/api/v1/figure/pdf": 10,
    "/api/v1/qk-space": 10,
    "/api/v1/generate": 5,
    "/api/v1/generate/stream": 5,
    "/api/v1/generate/stop": 1,  # (a flag set)
}
POST_COST = 2  # a model run answered from its captured tensors
LAB_COST = 5  # an experiment: the model run again, changed, several times
LOG = logging.getLogger("attnviz")
TRACKED_AT_MOST = 50_000  # clients remembered; past it, those with a full budget forgotten


def cost_of(method: str, path: str) -> int:
    if path in COSTS and method == "POST":
        return COSTS[path]
    if path.startswith("/api/v1/lab/") and method == "POST":
        return LAB_COST
    return POST_COST if method == "POST" else 1


@dataclass
class _Budget:
    """A client's two buckets of a minute: its requests' costs (`tokens`) and, apart, its
    model runs' work (`work`), so that a client that owes work (a corpus run, an 8k-token
    prompt) can still follow it: ask its progress, read its results."""

    tokens: float
    work: float
    at: float
    per_minute: int  # (this client's: a key's may differ)
    at_once: int
    active: int = 0

    def refill(self, now: float) -> None:
        more = (now - self.at) * self.per_minute / 60
        self.tokens = min(self.per_minute, self.tokens + more)
        self.work = min(self.per_minute, self.work + more)
        self.at = now

    def full(self, now: float) -> bool:
        more = (now - self.at) * self.per_minute / 60
        return min(self.tokens, self.work) + more >= self.per_minute


class UnknownKey(Exception):
    """A request carries an API key this server does not have."""


class Clients:
    """Every client's requests in flight and its budget of cost a minute (a token bucket
    of a minute's worth, refilled continuously). A client is an address, or with an API
    key (ATTNVIZ_API_KEYS) the key's name, with the key's own share where it has one."""

    def __init__(
        self,
        at_once: int,
        per_minute: int,
        trusted_proxies: list[str],
        keys: dict[str, ApiKey] | None = None,
    ) -> None:
        self.at_once = at_once
        self.per_minute = per_minute
        self.trusted = [ipaddress.ip_network(p, strict=False) for p in trusted_proxies]
        self.keys = keys or {}
        self._named = {key.sha256: name for name, key in self.keys.items()}
        self._budgets: dict[str, _Budget] = {}
        self._lock = threading.Lock()
        self._warned = False

    def identify(self, scope: Scope) -> str:
        """The client of a request: its API key's `key:NAME` where it sends one (only its
        hash is compared and kept; UnknownKey where no key of this server has it), else
        its address (`key`)."""
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key", b"")
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        if not given and scheme.lower() == b"bearer":
            given = token.strip()
        if not given:
            return self.key(scope)
        name = self._named.get(hashlib.sha256(given).hexdigest())
        if name is None:
            raise UnknownKey
        return f"key:{name}"

    def limits(self, client: str) -> tuple[int, int]:
        """(requests in flight, cost a minute) of a client: a key's own, or a client's."""
        key = self.keys.get(client[4:]) if client.startswith("key:") else None
        if key is None:
            return self.at_once, self.per_minute
        at_once = self.at_once if key.requests is None else key.requests
        per_minute = self.per_minute if key.cost_per_minute is None else key.cost_per_minute
        return at_once, per_minute

    def _budget(self, client: str, now: float) -> _Budget:
        """The client's budget, refilled to now (made full where it is new; called holding
        the lock)."""
        budget = self._budgets.get(client)
        if budget is None:
            if len(self._budgets) >= TRACKED_AT_MOST:
                self._forget(now)
            at_once, per_minute = self.limits(client)
            budget = self._budgets[client] = _Budget(
                float(per_minute), float(per_minute), now, per_minute, at_once
            )
        budget.refill(now)
        return budget

    def key(self, scope: Scope) -> str:
        """The client's address: the peer's, or behind a trusted proxy the last address of
        X-Forwarded-For that is not a trusted proxy (the one the proxies were told by a
        client; the earlier ones are the client's own claims)."""
        peer = (scope.get("client") or ("unknown", 0))[0]
        if not self._trusted(peer):
            if not self._warned and any(n == b"x-forwarded-for" for n, _ in scope["headers"]):
                self._warned = True  # (once: a client may send the header to be believed)
                LOG.warning(
                    "a request from %s carries X-Forwarded-For, and %s is no trusted proxy: "
                    "its clients are keyed by that peer's address. Behind a proxy or "
                    "ingress, set ATTNVIZ_TRUSTED_PROXIES to its addresses, or every user "
                    "shares one client's share",
                    peer,
                    peer,
                )
            return _address(peer)
        forwarded = [
            value.decode("latin-1")
            for name, value in scope["headers"]
            if name == b"x-forwarded-for"
        ]
        hops = [h.strip() for h in ",".join(forwarded).split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._trusted(hop):
                return _address(hop)
        return _address(peer)

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)

    def enter(self, client: str, cost: int) -> tuple[str, float] | None:
        """Count a request of `client` in; None, or why not and the seconds after which
        to retry."""
        with self._lock:
            budget = self._budget(client, time.monotonic())
            if budget.at_once and budget.active >= budget.at_once:
                return "at once", 1.0
            if budget.per_minute and budget.tokens < cost:
                return "per minute", (cost - budget.tokens) * 60 / budget.per_minute
            if budget.per_minute:
                budget.tokens -= cost
            budget.active += 1
        return None

    def spend(self, client: str, cost: float) -> float | None:
        """Spend `cost` of `client`'s budget of the minute, not counted in flight; None, or
        the seconds after which to retry."""
        with self._lock:
            budget = self._budget(client, time.monotonic())
            if not budget.per_minute:
                return None
            if budget.tokens < cost:
                return (cost - budget.tokens) * 60 / budget.per_minute
            budget.tokens -= cost
        return None

    def charge(
        self, client: str, units: float, what: str, how: str = "its tokens times its layers"
    ) -> None:
        """Charge `client` the price of work about to be done (a model run: its tokens
        times its layers, `work_units`): paid from its work of the minute (apart from its
        requests' costs); work dearer than half a minute's budget is admitted once the
        budget holds half of it, and leaves the budget owing the rest (refilled before its
        next work). Past that an OverClientLimit, with the seconds until it could pay."""
        with self._lock:
            budget = self._budget(client, time.monotonic())
            per_minute = budget.per_minute
            if not per_minute:
                return
            needed = min(units, per_minute / 2)
            if budget.work >= needed:
                budget.work -= units
                return
            left = max(budget.work, 0)
            wait = max(1, math.ceil((needed - budget.work) * 60 / per_minute))
        raise OverClientLimit(
            f"{what} costs {units:,.0f} units of work ({how}); this "
            f"client has {left:,.0f} of its {per_minute:,} a minute "
            f"(ATTNVIZ_CLIENT_COST_PER_MINUTE) left: retry after {wait} s",
            headers={"Retry-After": str(wait)},
        )

    def leave(self, client: str) -> None:
        with self._lock:
            budget = self._budgets.get(client)
            if budget is not None:
                budget.active -= 1

    def _forget(self, now: float) -> None:
        """Drop the clients with nothing in flight whose budget has refilled."""
        for client, budget in list(self._budgets.items()):
            if not budget.active and budget.full(now):
                del self._budgets[client]


def _address(hop: str) -> str:
    """A client's key from its address (the peer's, or an X-Forwarded-For entry): without
    a port (`1.2.3.4:5678`, `[::1]:80`), so that one client is one key; an IPv6 address
    by its /64, the network one host is given (its other 2^64 addresses are the same
    client); what does not read as an address, cut short."""
    for text in (hop, hop.rsplit(":", 1)[0].strip("[]"), hop.strip("[]")):
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if isinstance(address, ipaddress.IPv6Address):
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
        return str(address)
    return hop[:64]


UNMETERED = ("/healthz", "/readyz")  # (the probes': never refused)
PAGE_COST = 1  # a page, a static file, the schema, the docs: counted per minute only


class ClientBudget:
    """The middleware: each /api/ request counted against its client's share (429 past
    it), its client known to the code below as `CLIENT`; every other route but /healthz
    costs PAGE_COST of the minute's budget (a browser's assets are not counted among the
    requests in flight: it opens six connections at most)."""

    def __init__(self, app: ASGIApp, clients: Clients) -> None:
        self.app = app
        self.clients = clients

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNMETERED:
            await self.app(scope, receive, send)
            return
        try:
            client = self.clients.identify(scope)
        except UnknownKey:
            await _unknown_key(send)
            return
        if not scope["path"].startswith("/api/"):
            wait = self.clients.spend(client, PAGE_COST)
            if wait is not None:
                await _too_many(send, "per minute", wait, self.clients.limits(client))
                return
            token = CLIENT.set(client)
            try:
                await self.app(scope, receive, send)
            finally:
                CLIENT.reset(token)
            return
        refused = self.clients.enter(client, cost_of(scope["method"], scope["path"]))
        if refused is not None:
            await _too_many(send, *refused, self.clients.limits(client))
            return
        token = CLIENT.set(client)
        paying = CHARGE.set(functools.partial(self.clients.charge, client))
        try:
            await self.app(scope, receive, send)
        finally:
            CHARGE.reset(paying)
            CLIENT.reset(token)
            self.clients.leave(client)


async def _unknown_key(send: Send) -> None:
    payload = json.dumps(
        {"detail": "this API key is not one of this server's (ATTNVIZ_API_KEYS)"}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(payload)),
        (b"www-authenticate", b'Bearer realm="attnviz"'),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _too_many(send: Send, why: str, wait: float, limits: tuple[int, int]) -> None:
    at_once, per_minute = limits
    detail = (
        f"this client has {at_once} requests in flight, the most one client may "
        "(ATTNVIZ_CLIENT_REQUESTS): wait for their answers"
        if why == "at once"
        else f"this client has spent its {per_minute} request units of the minute "
        "(ATTNVIZ_CLIENT_COST_PER_MINUTE)"
    )
    retry = max(1, math.ceil(wait))
    payload = json.dumps({"detail": f"{detail}; retry after {retry} s"}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(payload)),
        (b"retry-after", b"%d" % retry),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
