"""The sample pictures the page offers a model of pictures (static/samples/), drawn here
with Pillow from shapes alone, so that they are the project's own (its licence) and the
same on every machine: `python -m harness.samples` writes them; a test checks that the
shipped files are what this draws."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

SAMPLES = Path(__file__).resolve().parents[1] / "static" / "samples"
SIZE = (448, 336)


def street() -> Image.Image:
    """A street: sky and sun, a house with a door and windows, a tree, a car on the road."""
    width, height = SIZE
    image = Image.new("RGB", SIZE)
    draw = ImageDraw.Draw(image)
    for y in range(height):  # the sky, lighter towards the horizon
        shade = int(120 + 100 * y / height)
        draw.line([(0, y), (width, y)], fill=(shade - 60, shade, 255))
    draw.ellipse([360, 24, 420, 84], fill=(255, 214, 64))  # the sun
    draw.rectangle([0, 250, width, height], fill=(84, 84, 92))  # the road
    for x in range(10, width, 70):  # its lane marks
        draw.rectangle([x, 290, x + 36, 296], fill=(240, 240, 240))
    draw.rectangle([0, 236, width, 250], fill=(96, 160, 72))  # the verge
    draw.rectangle([40, 130, 200, 240], fill=(196, 120, 80))  # the house
    draw.polygon([(28, 132), (120, 70), (212, 132)], fill=(150, 40, 40))  # its roof
    draw.rectangle([104, 180, 136, 240], fill=(90, 56, 30))  # its door
    for x in (60, 156):  # its windows
        draw.rectangle([x, 150, x + 28, 176], fill=(200, 230, 255), outline=(60, 60, 60))
    draw.rectangle([262, 160, 276, 240], fill=(110, 72, 40))  # the tree's trunk
    draw.ellipse([226, 96, 312, 182], fill=(40, 130, 50))  # its crown
    draw.rounded_rectangle([300, 262, 420, 300], radius=10, fill=(200, 30, 40))  # the car
    draw.polygon([(324, 262), (340, 240), (384, 240), (400, 262)], fill=(200, 30, 40))
    draw.polygon([(332, 260), (344, 244), (380, 244), (392, 260)], fill=(190, 220, 240))
    for x in (326, 394):  # its wheels
        draw.ellipse([x - 12, 290, x + 12, 314], fill=(20, 20, 20))
    return image


def shapes() -> Image.Image:
    """Three shapes on white: a red disc, a blue square and a green triangle."""
    image = Image.new("RGB", SIZE, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    draw.ellipse([30, 40, 150, 160], fill=(220, 40, 40))
    draw.rectangle([250, 50, 370, 170], fill=(40, 80, 220))
    draw.polygon([(120, 310), (200, 180), (280, 310)], fill=(40, 170, 70))
    return image


DRAWN = {"street.png": street, "shapes.png": shapes}


def png(image: Image.Image) -> bytes:
    import io

    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    SAMPLES.mkdir(parents=True, exist_ok=True)
    for name, drawn in DRAWN.items():
        (SAMPLES / name).write_bytes(png(drawn()))
        print(f"{SAMPLES / name} written")


if __name__ == "__main__":
    main()
