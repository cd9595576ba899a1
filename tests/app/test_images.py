"""A picture's bytes read as app/images.py reads them: files made here by Pillow (and by
hand where Pillow will not write them: a decompression bomb, a polyglot), each read as
pixels, or refused with the limit or fault named, within a second."""

from __future__ import annotations

import contextlib
import io
import struct
import time
import zlib

import numpy as np
import pytest
from PIL import Image

from attnviz.app.errors import CannotServe, TooLarge
from attnviz.app.images import ImageLimits, digest, read_image


def saved(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def quadrants(width: int = 40, height: int = 20) -> Image.Image:
    """Red top-left, green top-right, blue bottom-left, white bottom-right."""
    a = np.zeros((height, width, 3), dtype=np.uint8)
    h, w = height // 2, width // 2
    a[:h, :w] = (255, 0, 0)
    a[:h, w:] = (0, 255, 0)
    a[h:, :w] = (0, 0, 255)
    a[h:, w:] = (255, 255, 255)
    return Image.fromarray(a)


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_by_hand(width: int, height: int, rows: bytes, bit_depth: int = 1) -> bytes:
    """A grey PNG of `width` x `height` whose compressed data is `rows` (zlib)."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def refused(
    data: bytes, error: type[Exception], match: str, limits: ImageLimits | None = None
) -> str:
    start = time.monotonic()
    with pytest.raises(error, match=match) as caught:
        read_image(data, limits or ImageLimits())
    assert time.monotonic() - start < 1.0, "not refused within a second"
    return str(caught.value)


def test_a_png_is_read_as_its_rgb_pixels_and_keyed_by_them():
    picture = read_image(saved(quadrants(), "PNG"))
    assert picture.format == "PNG" and picture.size == (40, 20) and picture.pixels.mode == "RGB"
    assert np.array_equal(np.asarray(picture.pixels), np.asarray(quadrants()))
    # the key is the picture's, not the file's: a lossless WebP of it has the same one
    webp = read_image(saved(quadrants(), "WEBP", lossless=True))
    assert webp.format == "WEBP" and webp.digest == picture.digest == digest(quadrants())
    assert read_image(saved(quadrants(41, 20), "PNG")).digest != picture.digest


def test_a_photos_exif_orientation_stands_it_upright():
    """Orientation 6: the stored pixels turned 90° counter-clockwise; shown, they turn
    back 90° clockwise: the stored top-left (red) ends at the top right."""
    exif = Image.Exif()
    exif[0x0112] = 6
    picture = read_image(saved(quadrants(), "PNG", exif=exif.tobytes()))
    assert picture.stored == (40, 20) and picture.size == (20, 40)
    pixels = np.asarray(picture.pixels)
    assert tuple(pixels[0, -1]) == (255, 0, 0) and tuple(pixels[-1, 0]) == (255, 255, 255)
    assert tuple(pixels[0, 0]) == (0, 0, 255) and tuple(pixels[-1, -1]) == (0, 255, 0)


def test_grey_palette_cmyk_16_bit_and_transparent_pictures_become_rgb():
    grey = Image.new("L", (8, 8), 200)
    assert np.asarray(read_image(saved(grey, "PNG")).pixels)[0, 0].tolist() == [200] * 3
    cmyk = Image.new("CMYK", (16, 16), (0, 255, 255, 0))  # red in ink
    red = np.asarray(read_image(saved(cmyk, "JPEG", quality=95)).pixels)[8, 8]
    assert red[0] > 240 and red[1] < 15 and red[2] < 15, red
    # 16-bit grey: scaled by its range, not clipped (Pillow's own conversion turns it white)
    deep = Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.uint16))
    assert deep.mode.startswith("I;16")
    row = np.asarray(read_image(saved(deep, "PNG")).pixels)[0, :, 0]
    assert row.tolist() == [0, 128, 255]
    # transparency on white, as a viewer shows it: RGBA and a palette's transparent index
    clear = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    assert np.asarray(read_image(saved(clear, "PNG")).pixels)[0, 0].tolist() == [255] * 3
    half = Image.new("RGBA", (4, 4), (0, 0, 0, 128))
    assert np.asarray(read_image(saved(half, "PNG")).pixels)[0, 0].tolist() == [127] * 3
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    assert (
        np.asarray(read_image(saved(palette, "PNG", transparency=1)).pixels)[0, 0].tolist()
        == [255] * 3
    )


def test_a_decompression_bomb_is_refused_by_its_header_before_a_pixel_is_decoded():
    """30,000 x 30,000 one-bit pixels: 112 MB of rows in 110 kB of PNG (900 megapixels
    once decoded as RGB: 2.7 GB)."""
    row = b"\x00" + b"\x00" * (30_000 // 8)
    packer = zlib.compressobj(9)
    rows = b"".join(packer.compress(row * 1000) for _ in range(30)) + packer.flush()
    bomb = png_by_hand(30_000, 30_000, rows)
    assert len(bomb) < 200_000
    said = refused(bomb, TooLarge, "30,000 x 30,000 pixels")
    assert "at most 50,000,000 pixels and 16,384 a side" in said
    # a side past the limit alone, and a file past its bytes
    refused(saved(Image.new("L", (20_000, 1)), "PNG"), TooLarge, "16,384 a side")
    small = ImageLimits(max_bytes=1_000)
    big = saved(quadrants(400, 400), "PNG", compress_level=0)
    refused(big, TooLarge, rf"^the image is {len(big):,} bytes; at most 1,000$", small)


def test_truncated_files_are_refused_not_half_read():
    for fmt in ("PNG", "JPEG", "WEBP"):
        whole = saved(quadrants(200, 200), fmt)
        refused(whole[: len(whole) // 2], CannotServe, f"the {fmt} image cannot be read")
    refused(b"\x89PNG\r\n\x1a\n", CannotServe, "the PNG image cannot be read")


def test_animated_pictures_are_refused_with_their_frames():
    frames = [quadrants(), quadrants().rotate(180)]
    webp = saved(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100)
    refused(webp, CannotServe, r"animated \(2 frames\)")
    apng = saved(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=100)
    refused(apng, CannotServe, r"animated \(2 frames\)")
    gif = saved(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    refused(gif, CannotServe, "not a PNG, JPEG or WebP file")


def test_only_the_pixels_of_a_polyglot_file_are_read():
    """A PNG with a page and a zip after its end, and a page with a PNG inside: the first
    is its picture and nothing else; the second is no picture."""
    clean = saved(quadrants(), "PNG")
    tail = b"<html><script>alert(1)</script></html>PK\x03\x04" + b"\x00" * 64
    assert read_image(clean + tail).digest == read_image(clean).digest
    refused(b"<html>" + clean, CannotServe, "not a PNG, JPEG or WebP file")
    refused(b"GIF89a/*" + clean, CannotServe, "not a PNG, JPEG or WebP file")
    refused(b"hello", CannotServe, "not a PNG, JPEG or WebP file")


def test_a_text_chunk_bomb_is_bounded():
    """A zTXt chunk of 100 MB of zeros: Pillow reads at most a megabyte of a text chunk."""
    head = saved(quadrants(), "PNG")
    end = head.rindex(b"IEND") - 4
    text = b"Comment\x00\x00" + zlib.compress(b"\x00" * 100_000_000, 9)
    bomb = head[:end] + chunk(b"zTXt", text) + head[end:]
    start = time.monotonic()
    try:
        picture = read_image(bomb)
    except CannotServe:
        pass
    else:
        assert picture.digest == read_image(head).digest
    assert time.monotonic() - start < 1.0


def test_a_webp_whose_header_claims_a_bomb_is_a_413():
    """A 1 x 1 WebP whose extended header (VP8X) is made to say 15,000 x 15,000: Pillow's
    reader refuses it in its header, and that is said as the limit it passes."""
    exif = Image.Exif()
    exif[0x0112] = 1
    small = bytearray(saved(Image.new("RGB", (1, 1)), "WEBP", lossless=True, exif=exif.tobytes()))
    at = small.index(b"VP8X") + 8 + 4  # (its flags, then width - 1 and height - 1: 3 bytes each)
    small[at : at + 6] = (14_999).to_bytes(3, "little") * 2
    said = refused(bytes(small), TooLarge, "at most 50,000,000 pixels")
    assert len(small) < 200 and "image" in said


def test_a_phones_jpeg_with_a_second_picture_is_read_as_its_first():
    """An MPO file (a JPEG holding a second picture, e.g. an HDR gain map) is one photo,
    not an animation: its first picture is read."""
    photo, gain = quadrants(), Image.new("RGB", (20, 10), (9, 9, 9))
    mpo = saved(photo, "MPO", save_all=True, append_images=[gain], quality=95)
    picture = read_image(mpo)
    assert picture.format == "JPEG" and picture.size == (40, 20)
    assert np.abs(np.asarray(picture.pixels, dtype=int) - np.asarray(photo)).mean() < 8


@pytest.mark.filterwarnings("ignore::UserWarning")  # (Pillow's, of the tags it skips)
def test_a_broken_exif_block_or_a_key_colour_is_read_not_a_500():
    """Bytes of a photo's EXIF block changed at random (seeded): each file is read, or
    refused with a 4xx error, within a second, never another exception. An orientation
    out of 1-8 leaves the picture as stored. A PNG whose key colour is transparent (tRNS):
    that colour laid on white."""
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x011A] = (72, 1)  # (XResolution, a rational: Pillow rewrote these, and failed)
    exif[0x010F] = "camera"
    rng = np.random.default_rng(0)
    for fmt in ("JPEG", "WEBP", "PNG"):
        whole = saved(quadrants(), fmt, exif=exif.tobytes())
        start = whole.index(b"MM\x00*") if b"MM\x00*" in whole else whole.index(b"II*\x00")
        for _ in range(1500):  # (the old exif_transpose raised AttributeError at the 502nd)
            broken = bytearray(whole)
            for at in rng.integers(start, start + 60, size=3):
                broken[at] = int(rng.integers(0, 256))
            began = time.monotonic()
            with contextlib.suppress(CannotServe, TooLarge):
                read_image(bytes(broken))
            assert time.monotonic() - began < 1.0
    odd = Image.Exif()
    odd[0x0112] = 9
    assert read_image(saved(quadrants(), "PNG", exif=odd.tobytes())).size == (40, 20)
    keyed = quadrants()  # (its blue quarter made transparent by a tRNS key colour)
    pixels = np.asarray(read_image(saved(keyed, "PNG", transparency=(0, 0, 255))).pixels)
    assert pixels[-1, 0].tolist() == [255, 255, 255] and pixels[0, 0].tolist() == [255, 0, 0]
