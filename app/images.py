"""Pictures a run reads beside its text: bounded before they are decoded, read as pixels
and nothing else.

A picture comes as a file's bytes (PNG, JPEG or WebP: base64 in JSON, or a multipart
part). Before a pixel is decoded, its bytes, its format (by its first bytes, not by what
the client says it is), its size in pixels (from its header) and its frames are checked:
a decompression bomb (a 30,000 x 30,000 PNG of a few kilobytes) is refused with the limit
it passes, never decoded. Then its pixels are decoded whole (a truncated file is refused,
not half-read), its EXIF orientation applied (a phone's portrait photo stands upright),
and it is made RGB (palette, grey, CMYK, 16-bit grey, and transparency laid on white, as
a viewer shows it). Nothing else of the file is trusted or kept: no colour profile, no
metadata, no second image of a polyglot file; only what was decoded is used.

A picture's `digest` is the SHA-256 of its size and RGB pixels: the same picture has the
same key however it was stored (a run's cache key, a link's `img=`), as a text's is its
characters."""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile

from .errors import AttnvizError, CannotServe, TooLarge

# What each accepted format's file starts with (the client's name for it is not read).
SIGNATURES = {"PNG": (b"\x89PNG\r\n\x1a\n",), "JPEG": (b"\xff\xd8\xff",)}
FORMATS = ("PNG", "JPEG", "WEBP")
# a truncated file is an error, not a picture with its last rows grey (Pillow's default)
ImageFile.LOAD_TRUNCATED_IMAGES = False


@dataclass(frozen=True)
class ImageLimits:
    """What one picture may be, checked before its pixels are decoded."""

    max_bytes: int = 20_000_000  # its file
    max_pixels: int = 50_000_000  # width x height (a 48-megapixel phone photo fits)
    max_side: int = 16_384  # its longer side


@dataclass(frozen=True, eq=False)
class Picture:
    """A picture as a run reads it: RGB, upright."""

    pixels: Image.Image  # mode RGB, EXIF orientation applied
    format: str  # PNG, JPEG or WEBP: what its bytes are ("pixels": handed as pixels)
    digest: str  # SHA-256 (hex) of its width, height and RGB pixels
    stored: tuple[int, int]  # width and height as stored, before its orientation

    @property
    def size(self) -> tuple[int, int]:
        """Width and height as seen (upright)."""
        return self.pixels.size


def read_image_file(path: Path, limits: ImageLimits = ImageLimits()) -> Picture:
    """`read_image` of a file, its size checked before it is read."""
    size = path.stat().st_size
    if size > limits.max_bytes:
        raise TooLarge(f"the image is {size:,} bytes; at most {limits.max_bytes:,}")
    return read_image(path.read_bytes(), limits)


def sniffed(data: bytes) -> str | None:
    """The accepted format the bytes start as, or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next(
        (name for name, starts in SIGNATURES.items() if data.startswith(starts)),
        None,
    )


def read_image(
    data: bytes,
    limits: ImageLimits = ImageLimits(),
    admit: Callable[[int], None] | None = None,
) -> Picture:
    """The picture of a file's bytes, or TooLarge (413) or CannotServe (422) saying which
    limit or fault, before anything over a limit is decoded; `admit(pixels)` is called
    once its size is known to pass, before its pixels are decoded (a client charged for
    them). Run it off the event loop: a picture at the limits takes up to a second."""
    if len(data) > limits.max_bytes:
        raise TooLarge(f"the image is {len(data):,} bytes; at most {limits.max_bytes:,}")
    kind = sniffed(data)
    if kind is None:
        raise CannotServe("the image is not a PNG, JPEG or WebP file (read by its bytes)")
    try:
        # its header only, by Pillow's reader of the format its bytes are (Image.open
        # would also refuse a bomb, at 179 megapixels, without its size: ours says it)
        image = opener(kind)(io.BytesIO(data))
        width, height = image.size
        pixels = width * height
        if max(width, height) > limits.max_side or pixels > limits.max_pixels:
            raise TooLarge(
                f"the image is {width:,} x {height:,} pixels ({pixels:,}); at most "
                f"{limits.max_pixels:,} pixels and {limits.max_side:,} a side"
            )
        # (a phone's JPEG may hold a second picture, an HDR gain map, as an MPO file: the
        # first is the photo)
        frames = getattr(image, "n_frames", 1)
        if frames > 1 and image.format != "MPO":
            raise CannotServe(
                f"the image is animated ({frames:,} frames): a run reads one picture an "
                "image; send the frame to read as a PNG, JPEG or WebP of its own"
            )
        if admit is not None:  # (its price, now that its size is known and allowed)
            admit(pixels)
        image.load()  # every pixel now: a truncated file fails here, not later
        rgb = as_rgb(upright(image))
    except (AttnvizError, MemoryError):  # (what `admit` raises too: a 429)
        raise
    except Image.DecompressionBombError as exc:  # (WebP's reader checks in its header)
        raise TooLarge(
            f"the image is larger than Pillow reads ({exc}); at most "
            f"{limits.max_pixels:,} pixels and {limits.max_side:,} a side"
        ) from None
    except Exception as exc:  # (a broken file makes Pillow's readers raise anything)
        raise CannotServe(f"the {kind} image cannot be read: {exc}") from None
    return Picture(rgb, kind, digest(rgb), (width, height))


# EXIF orientation -> the transpose that stands the picture upright (as Pillow's own
# ImageOps.exif_transpose maps them; that function also rewrites the EXIF, which fails on
# a malformed block: only the tag is read here)
UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def upright(image: Image.Image) -> Image.Image:
    """The picture turned as its EXIF orientation says (nothing else of the EXIF read)."""
    turn = UPRIGHT.get(image.getexif().get(0x0112))  # type: ignore[arg-type]
    return image.transpose(turn) if turn is not None else image


def opener(kind: str) -> Callable[..., ImageFile.ImageFile]:
    """Pillow's reader of a format: it reads the header when made, the pixels on `load`."""
    Image.init()
    return Image.OPEN[kind][0]


def as_rgb(image: Image.Image) -> Image.Image:
    """An image's pixels as RGB: transparency laid on white; 16- and 32-bit grey scaled to
    8 bits by its range (Pillow's own conversion clips it: a 16-bit PNG turned white)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") else max(float(values.max()), 1.0)
        grey = np.clip(np.rint(values / top * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(grey).convert("RGB")
    if "transparency" in image.info:  # (a palette's index, or a grey or RGB key colour)
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def digest(rgb: Image.Image) -> str:
    """SHA-256 of an RGB image's width, height and pixels."""
    width, height = rgb.size
    h = hashlib.sha256(f"{width}x{height}:".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def picture_of_pixels(image: Image.Image) -> Picture:
    """A picture handed as pixels (a notebook's PIL image or array, made RGB and upright
    by its caller): no file, so no format of one ("pixels")."""
    rgb = image.convert("RGB")
    return Picture(rgb, "pixels", digest(rgb), rgb.size)


def limits_of(max_bytes: int, max_pixels: int) -> ImageLimits:
    """The limits a server's settings give one picture."""
    return ImageLimits(max_bytes=max_bytes, max_pixels=max_pixels)


class Pictures:
    """Decoded pictures by digest, for runs to name (`image`), least recently used dropped
    first past `max_bytes` (their pixels as Pillow holds RGB, 4 bytes each, and their
    previews) or `most` pictures; each one's preview (`preview_png`) kept beside it once
    made."""

    def __init__(self, max_bytes: int, most: int = 1024) -> None:
        self.max_bytes, self.most = max_bytes, most
        self._held: OrderedDict[str, Picture] = OrderedDict()
        self._previews: dict[str, bytes] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def size_of(picture: Picture) -> int:
        width, height = picture.size
        return 4 * width * height

    def preview(self, picture: Picture) -> bytes:
        """Its preview PNG, made once (off the event loop: it resizes the picture)."""
        with self._lock:
            made = self._previews.get(picture.digest)
        if made is not None:
            return made
        made = preview_png(picture)
        with self._lock:
            if picture.digest in self._held and picture.digest not in self._previews:
                self._previews[picture.digest] = made
                self._bytes += len(made)
        return made

    def put(self, picture: Picture) -> bool:
        """Keep a picture; False where it alone is larger than the store (not kept)."""
        size = self.size_of(picture)
        if size > self.max_bytes:
            return False
        with self._lock:
            if picture.digest in self._held:
                self._held.move_to_end(picture.digest)
                return True
            self._held[picture.digest] = picture
            self._bytes += size
            while self._bytes > self.max_bytes or len(self._held) > self.most:
                _, old = self._held.popitem(last=False)
                self._bytes -= self.size_of(old) + len(self._previews.pop(old.digest, b""))
        return True

    def get(self, digest: str) -> Picture | None:
        with self._lock:
            found = self._held.get(digest)
            if found is not None:
                self._held.move_to_end(digest)
            return found


PREVIEW_SIDE = 1024  # the longer side of a picture as the page draws it


def preview_png(picture: Picture, side: int = PREVIEW_SIDE) -> bytes:
    """A picture as a PNG whose longer side is at most `side` (the page draws attention
    over it, by boxes in the picture's own pixels scaled to it)."""
    image = picture.pixels
    if max(image.size) > side:
        image = image.copy()
        image.thumbnail((side, side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=3)
    return out.getvalue()
