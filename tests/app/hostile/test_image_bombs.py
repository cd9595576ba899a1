"""Bad pictures over HTTP (POST /api/v1/images): a 30,000 x 30,000 PNG bomb, a truncated
file, animated WebP and GIF, a polyglot, a body past the limit: each a 4xx naming the
limit or the fault within a second; CMYK and 16-bit pictures read as RGB; a 24-megapixel
photo decoded off the event loop, /healthz answered all the while."""

from __future__ import annotations

import io
import struct
import time
import zlib

import numpy as np
from PIL import Image

from .conftest import client

UPLOAD = "/api/v1/images"


def saved(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb() -> bytes:
    """30,000 x 30,000 one-bit grey pixels in ~110 kB: 2.7 GB once decoded as RGB."""
    row = b"\x00" * (1 + 30_000 // 8)
    packer = zlib.compressobj(9)
    rows = b"".join(packer.compress(row * 1000) for _ in range(30)) + packer.flush()
    header = struct.pack(">IIBBBBB", 30_000, 30_000, 1, 0, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def test_bad_pictures_are_refused_within_a_second_each(base, healthz):
    small = Image.fromarray(np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3))
    frames = [small, small.rotate(180)]
    whole = saved(small, "JPEG", quality=90)
    cases = {
        "bomb": (bomb(), "image/png", 413, "30,000 x 30,000 pixels"),
        "truncated": (whole[: len(whole) // 2], "image/jpeg", 422, "cannot be read"),
        "animated webp": (
            saved(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=50),
            "image/webp", 422, "animated (2 frames)",
        ),
        "gif": (
            saved(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50),
            "image/png", 422, "not a PNG, JPEG or WebP",
        ),
        "page with a png": (b"<html>" + saved(small, "PNG"), "image/png", 422, "not a PNG"),
        "past the limit": (b"\xff\xd8\xff" + b"\x00" * 21_000_000, "image/jpeg", 413,
                           "at most 20,000,000"),
    }  # fmt: skip
    with client(base, "127.0.0.71") as c:
        for name, (data, kind, status, said) in cases.items():
            began = time.perf_counter()
            answer = c.post(UPLOAD, content=data, headers={"content-type": kind})
            took = time.perf_counter() - began
            assert answer.status_code == status, (name, answer.text)
            assert said in answer.json()["detail"], (name, answer.text)
            assert took < 1.0, f"{name}: {took:.2f} s"


def test_cmyk_16_bit_and_polyglot_pictures_are_read_as_their_pixels(base, healthz):
    grey = np.linspace(0, 65535, 40 * 30).reshape(30, 40).astype(np.uint16)
    sixteen = saved(Image.fromarray(grey), "PNG")
    cmyk = saved(Image.new("CMYK", (40, 30), (0, 255, 255, 0)), "JPEG", quality=95)
    clean = saved(Image.new("RGB", (40, 30), (10, 200, 30)), "PNG")
    polyglot = clean + b"<html><script>alert(1)</script></html>PK\x03\x04" + b"\x00" * 64
    with client(base, "127.0.0.72") as c:
        for data in (sixteen, cmyk):
            answer = c.post(UPLOAD, content=data, headers={"content-type": "image/png"})
            assert answer.status_code == 200, answer.text
            assert (answer.json()["width"], answer.json()["height"]) == (40, 30)
        red = c.get(f"{UPLOAD}/{answer.json()['digest']}")  # (the CMYK one: red)
        pixel = Image.open(io.BytesIO(red.content)).convert("RGB").getpixel((20, 15))
        assert pixel[0] > 200 and pixel[1] < 60 and pixel[2] < 60, pixel
        digests = [
            c.post(UPLOAD, content=d, headers={"content-type": "image/png"}).json()["digest"]
            for d in (clean, polyglot)
        ]
        assert digests[0] == digests[1]  # (only the picture's pixels are read)


def test_a_24_megapixel_photo_is_decoded_off_the_event_loop(base, healthz):
    x = np.linspace(0, 255, 6000, dtype=np.float32)
    y = np.linspace(0, 255, 4000, dtype=np.float32)[:, None]
    rgb = np.stack([x + 0 * y, y + 0 * x, (x + y) / 2], axis=-1).astype(np.uint8)
    photo = saved(Image.fromarray(rgb), "JPEG", quality=85)
    with client(base, "127.0.0.73", timeout=60) as c:
        for _ in range(3):
            answer = c.post(UPLOAD, content=photo, headers={"content-type": "image/jpeg"})
            assert answer.status_code == 200, answer.text
            assert (answer.json()["width"], answer.json()["height"]) == (6000, 4000)
        drawn = c.get(f"{UPLOAD}/{answer.json()['digest']}")
        assert drawn.status_code == 200
        assert Image.open(io.BytesIO(drawn.content)).size == (1024, 683)
