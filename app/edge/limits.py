"""Bounds on one request's connection, enforced around the application: the body's size
before it is parsed, how long a send may wait for a client that does not read, and the
work of a client that goes away."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..request import CLIENT

LOG = logging.getLogger("attnviz")
# an answer is sent in pieces of this size, each within the send timeout: a client that
# stops reading holds at most one piece in the server's socket buffers, not the answer
CHUNK = 64 * 1024
# answers one client may have unread at once; past it, its next requests wait (429)
UNREAD_A_CLIENT = 128 * 2**20
NO_BODY = 1024  # the body a route that reads none may carry (a GET, a HEAD, ...)
SHORT_BODY = 4096  # a POST that holds no text (stopping a generation: its request id)


def receiving(body: bytes, gone: asyncio.Event) -> Receive:
    """An ASGI `receive` that gives a whole request body once, then waits until `gone` is
    set and says the client disconnected."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


class BodyLimit:
    """Answer 413 to a body over `max_bytes` (a POST's; `limits` by path; NO_BODY for the
    other methods), whether or not it declares its length; give
    each piece of the answer `send_timeout` seconds to leave; cancel the request's work
    when its client disconnects.

    A client that sends its whole body before it reads the answer (Python's urllib, curl
    without Expect) would find the connection reset if the server answered and closed
    while the body was still coming: so, as Go's net/http does, the rest of an over-limit
    body is read and thrown away, up to `drain_bytes` in all, before the 413 is sent. A body
    declared larger than that is refused at once and its connection closed.

    Once the body is read, the connection is watched: a disconnect cancels the application
    (a request waiting for a tensor thread never runs; one running is told to stop,
    `app.runs.cancelled`). A send that waits past `send_timeout` (the client stopped
    reading), or an answer read slower than `least_rate` bytes a second on average after
    that grace (a 50 MB answer read at 2.2 kB/s held its memory for six hours), ends
    the request the same way, and uvicorn closes its connection. An answer is sent a piece
    at a time, each a view of it (never a copy of the whole), and a client with
    UNREAD_A_CLIENT bytes of answers still being sent gets a 429 for its next request."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        drain_bytes: int = 10 * 2**20,
        limits: dict[str, int] | None = None,
        send_timeout: float = 30.0,
        least_rate: int = 64 * 1024,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.drain_bytes = drain_bytes
        self.limits = limits or {}  # paths whose bodies have a limit of their own
        self.send_timeout = send_timeout
        self.least_rate = least_rate
        self.unread: dict[str, int] = {}  # bytes of answers being sent, by client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = CLIENT.get()
        if self.unread.get(client, 0) > UNREAD_A_CLIENT:
            await _send_json(
                send,
                429,
                f"this client has {self.unread[client]:,} bytes of answers it has not read yet "
                f"(the most one client may: {UNREAD_A_CLIENT:,}): read them first",
                [(b"retry-after", b"5")],
            )
            return
        limit = (
            self.limits.get(scope["path"], self.max_bytes)
            if scope.get("method") in ("POST", "PUT", "PATCH")
            else NO_BODY  # (a GET's parameters are in its URL)
        )
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            whole = int(declared) <= self.drain_bytes and await self._drain(receive, 0)
            await self._refuse(send, limit, close=not whole)
            return
        body = bytearray()  # (bytes += bytes copies the whole body again for every piece)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                more = message.get("more_body", False)
                whole = not more or await self._drain(receive, len(body))
                await self._refuse(send, limit, close=not whole)
                return
            if not message.get("more_body", False):
                break
        await self._watched(scope, bytes(body), receive, send)

    async def _watched(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """The application on this body, cancelled if the client disconnects or stops
        reading."""
        gone = asyncio.Event()
        answered = False
        replay = receiving(body, gone)
        client = CLIENT.get()
        sent, waited, counted = 0, 0.0, 0

        def pieces(message: Message, data: bytes) -> Iterator[Message]:
            more = message.get("more_body", False)
            if len(data) <= CHUNK:
                yield message
                return
            view = memoryview(data)
            for at in range(0, len(data), CHUNK):
                yield {
                    "type": "http.response.body",
                    "body": bytes(view[at : at + CHUNK]),  # (one piece at a time)
                    "more_body": more or at + CHUNK < len(data),
                }

        async def timed_send(message: Message) -> None:
            nonlocal answered, sent, waited, counted
            body_part = message["type"] == "http.response.body"
            answered = body_part and not message.get("more_body", False)
            data = message.get("body", b"") if body_part else b""
            if message["type"] == "http.response.start":
                length = dict(message.get("headers", [])).get(b"content-length", b"0")
                counted = int(length) if length.isdigit() else 0
                self.unread[client] = self.unread.get(client, 0) + counted
            for piece in pieces(message, data):
                # each piece within the send timeout, and the time spent waiting for the
                # client to read (not for the answer to be made: a stream's steps) within
                # the grace and `least_rate`
                size = len(piece.get("body", b""))
                left = self.send_timeout + (sent + size) / self.least_rate - waited
                began = time.monotonic()
                try:
                    async with asyncio.timeout(max(min(self.send_timeout, left), 0.001)):
                        await send(piece)
                except TimeoutError:
                    raise _SendTimeout from None
                waited += time.monotonic() - began
                sent += size

        async def served() -> None:
            await self.app(scope, replay, timed_send)

        work = asyncio.create_task(served())

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not answered:  # (after the whole answer, a client may close at once)
                work.cancel()

        watcher = asyncio.create_task(watch())
        try:
            await work
        except asyncio.CancelledError:
            if not gone.is_set() or answered:
                raise  # the server's own cancellation (shutting down)
            LOG.info("%s %s: the client went away; its work was cancelled", *_what(scope))
        except _SendTimeout:
            LOG.info(
                "%s %s: the client read nothing for %g s, or under %d kB/s; dropped",
                *_what(scope),
                self.send_timeout,
                self.least_rate // 1024,
            )
        finally:
            watcher.cancel()
            if counted:
                left = self.unread[client] - counted
                if left:
                    self.unread[client] = left
                else:
                    del self.unread[client]

    async def _drain(self, receive: Receive, read: int) -> bool:
        """Read and discard the rest of the body while it stays within `drain_bytes` in
        all; True if it ended there."""
        while read <= self.drain_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return read <= self.drain_bytes
        return False

    async def _refuse(self, send: Send, limit: int, close: bool) -> None:
        detail = f"request body over {limit} bytes: send a shorter text"
        # the rest of the body was not read: this connection cannot go on
        await _send_json(send, 413, detail, [(b"connection", b"close")] if close else [])


async def _send_json(send: Send, status: int, detail: str, headers: list) -> None:
    payload = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(payload)),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class _SendTimeout(Exception):
    """A piece of the answer waited past the send timeout: the client does not read."""


def _what(scope: Scope) -> tuple[str, str]:
    return scope.get("method", ""), scope.get("path", "")
