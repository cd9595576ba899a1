"""Pictures: sent once (POST /api/v1/images: the file's bytes, base64 in JSON, or a
multipart form), read within bounds off the event loop (app/images.py), held by digest for
runs to name (`image`), and drawn back by the page (GET /api/v1/images/{digest})."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from ...errors import Busy, CannotServe, TooLarge
from ...images import Picture, limits_of, read_image
from ...payloads.schemas import ErrorMessage, ImageStored
from ...request import charge
from ...settings import Settings
from .deps import BODY_ERRORS, InferenceDep, _error

router = APIRouter(prefix="/api/v1", tags=["images"])

IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "application/octet-stream")
# pictures decoded at once, and waiting to be: past them, a 503 (each takes up to a second
# and a 50-megapixel picture's 150 MB of pixels)
DECODING, WAITING = 2, 8
PIXELS_A_UNIT = 1_000_000  # a picture's price: a unit of work a megapixel decoded


def body_limit(settings: Settings) -> int:
    """The bytes POST /api/v1/images may carry: a picture at its limit, in base64 (4 bytes
    for 3) within JSON or a multipart form."""
    return settings.image_max_bytes * 4 // 3 + 64 * 1024


class Gate:
    """At most DECODING pictures decoded at once and WAITING waiting: the rest a 503."""

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(DECODING)
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self):  # type: ignore[no-untyped-def]
        if self.slots.locked() and self.waiting >= WAITING:
            raise Busy(
                f"{self.waiting} pictures are waiting to be read already: retry in a moment",
                headers={"Retry-After": "2"},
            )
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self.slots.release()


def gate_of(request: Request) -> Gate:
    state = request.app.state
    if getattr(state, "image_gate", None) is None:
        state.image_gate = Gate()
    return state.image_gate


def from_json(body: bytes, max_bytes: int) -> bytes:
    """The picture of a JSON body {"data": base64} (a data: URL's too)."""
    try:
        sent = json.loads(body)
    except (ValueError, RecursionError):
        raise CannotServe('the body is not JSON: send {"data": "<the file in base64>"}') from None
    if not isinstance(sent, dict) or set(sent) != {"data"} or not isinstance(sent["data"], str):
        raise CannotServe('send {"data": "<the file in base64>"}, and nothing else')
    data = sent["data"]
    if data.startswith("data:"):  # (a data: URL, as a browser's FileReader makes it)
        head, _, data = data.partition(",")
        if not head.endswith(";base64"):
            raise CannotServe("a data: URL of the picture must be base64 (;base64,)")
    if len(data) > max_bytes * 4 // 3 + 4:
        raise TooLarge(f"the image is over {max_bytes:,} bytes; at most {max_bytes:,}")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CannotServe(f"data is not base64: {exc}") from None


def from_form(body: bytes, content_type: str) -> bytes:
    """The picture of a multipart form's one field, the file `image` (parsed off the event
    loop, from the body already read: Starlette's parser writes a file's parts to a
    temporary file on the loop, 50 ms for 20 MB)."""
    from python_multipart import MultipartParser
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import parse_options_header

    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise CannotServe("the multipart form names no boundary")
    parts: list[dict] = []
    header: list[bytes] = [b"", b""]

    def begin() -> None:
        parts.append({"headers": {}, "data": []})

    def field(data: bytes, start: int, end: int) -> None:
        header[0] += data[start:end]

    def value(data: bytes, start: int, end: int) -> None:
        header[1] += data[start:end]

    def header_end() -> None:
        parts[-1]["headers"][header[0].lower()] = header[1]
        header[0] = header[1] = b""

    def data(chunk: bytes, start: int, end: int) -> None:
        parts[-1]["data"].append(chunk[start:end])

    callbacks = {
        "on_part_begin": begin,
        "on_header_field": field,
        "on_header_value": value,
        "on_header_end": header_end,
        "on_part_data": data,
    }
    try:
        parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
        parser.write(body)
        parser.finalize()
    except (MultipartParseError, ValueError, IndexError, KeyError) as exc:
        # (a part's data or headers before any part began: IndexError)
        raise CannotServe(f"the multipart form cannot be read: {exc}") from None
    named = []
    for part in parts:
        _, said = parse_options_header(part["headers"].get(b"content-disposition", b""))
        named.append((said.get(b"name"), b"filename" in said, part))
    if len(named) != 1 or named[0][0] != b"image" or not named[0][1]:
        raise CannotServe('send the picture as the form\'s one field, the file "image"')
    return b"".join(named[0][2]["data"])


def kind_of(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


@router.post(
    "/images",
    responses={
        **BODY_ERRORS,
        413: _error("The body, the file or its pixels are over their limits: the message says."),
        415: _error("Sent as none of: the file's bytes, JSON, or a multipart form."),
        422: _error("It is no PNG, JPEG or WebP picture, is broken, or is animated."),
        503: _error("Too many pictures are being read: retry after Retry-After seconds."),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "image/png": {"schema": {"type": "string", "format": "binary"}},
                "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
                "image/webp": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {"data": {"type": "string", "contentEncoding": "base64"}},
                        "required": ["data"],
                        "additionalProperties": False,
                    }
                },
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"image": {"type": "string", "format": "binary"}},
                        "required": ["image"],
                        "additionalProperties": False,
                    }
                },
            },
            "description": "A PNG, JPEG or WebP file (at most ATTNVIZ_IMAGE_MAX_BYTES bytes "
            "and ATTNVIZ_IMAGE_MAX_PIXELS pixels): its bytes, base64 in JSON, or a "
            "multipart form's file field `image`.",
        }
    },
)
async def upload(request: Request, inference: InferenceDep) -> ImageStored:
    """Read a picture and hold it: a run names it by the digest answered (`image`). Its
    bytes and size in pixels are checked before anything is decoded (a 413 naming the
    limit), its EXIF orientation applied, and nothing else of the file kept."""
    settings = inference.settings
    limits = limits_of(settings.image_max_bytes, settings.image_max_pixels)
    kind = kind_of(request)
    if kind not in (*IMAGE_TYPES, "application/json", "multipart/form-data"):
        raise HTTPException(
            415,
            "send the picture as its file's bytes (Content-Type: image/png, image/jpeg or "
            'image/webp), as JSON {"data": base64}, or as a multipart form\'s file "image"',
        )
    body = await request.body()
    content_type = request.headers.get("content-type", "")

    def read() -> Picture:
        sent = body
        if kind == "application/json":
            sent = from_json(body, limits.max_bytes)
        elif kind == "multipart/form-data":
            sent = from_form(body, content_type)
        return read_image(sent, limits, admit=paid)

    def paid(pixels: int) -> None:
        charge(pixels / PIXELS_A_UNIT, f"a picture of {pixels:,} pixels", "a unit a megapixel")

    async with gate_of(request).slot():
        picture = await run_in_threadpool(read)
    if not inference.pictures.put(picture):
        raise TooLarge(
            f"the picture's {picture.size[0]:,} x {picture.size[1]:,} pixels take "
            f"{inference.pictures.size_of(picture):,} bytes decoded, more than this server "
            f"keeps for pictures ({inference.pictures.max_bytes:,}: ATTNVIZ_IMAGES_BYTES)"
        )
    width, height = picture.size
    return ImageStored(
        digest=picture.digest,
        width=width,
        height=height,
        format=picture.format,  # type: ignore[arg-type]
    )


Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="Its digest.")]


@router.get(
    "/images/{digest}",
    responses={
        **BODY_ERRORS,
        200: {"content": {"image/png": {}}},
        404: {"model": ErrorMessage, "description": "Not held: send it again."},
    },
    response_class=Response,
)
async def preview(digest: Digest, request: Request, inference: InferenceDep) -> Response:
    """A held picture as a PNG whose longer side is at most 1,024 pixels (upright), for
    the page to draw attention over; its patch boxes are in the picture's own pixels.
    Made once a picture, as many at once as pictures are read."""
    picture = inference.picture(digest)
    assert picture is not None
    async with gate_of(request).slot():
        png = await run_in_threadpool(inference.pictures.preview, picture)
    return Response(
        png,
        media_type="image/png",
        headers={
            "Cache-Control": "private, max-age=86400, immutable",
            "X-Image-Size": f"{picture.size[0]}x{picture.size[1]}",
        },
    )
