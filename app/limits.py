"""Request body limit, enforced before the body is parsed."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Answer 413 to a body over `max_bytes`, whether or not it declares its length.

    A client that sends its whole body before it reads the answer (Python's urllib, curl
    without Expect) would find the connection reset if the server answered and closed
    while the body was still coming: so, as Go's net/http does, the rest of an over-limit
    body is read and thrown away, up to `drain_bytes` in all, before the 413 is sent. A body
    declared larger than that is refused at once and its connection closed."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        drain_bytes: int = 10 * 2**20,
        larger: dict[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.drain_bytes = drain_bytes
        self.larger = larger or {}  # paths whose bodies have a limit of their own

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope["path"], self.max_bytes)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            whole = int(declared) <= self.drain_bytes and await self._drain(receive, 0)
            await self._refuse(send, limit, close=not whole)
            return
        body = b""
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
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

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
        payload = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(payload)),
        ]
        if close:  # the rest of the body was not read: this connection cannot go on
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
