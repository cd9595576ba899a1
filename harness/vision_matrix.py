"""The vision half of the architecture matrix: every image encoder the installed
transformers has (from its own auto mappings: image classification, image feature
extraction and the stand-alone vision towers, not a hand list), as a tiny seeded random
model saved with an image processor and read back as attnviz reads it
(model/hf/vision.py's `ImageEncoder`), against the same weights run by transformers' eager
attention with `output_attentions`. Each row is equal, or says why it is not served.

The towers of vision-language models (which read a picture as flattened patches at its own
resolution, or tiles) are left to the vision-language half."""

from __future__ import annotations

import contextlib
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from harness.checkpoints import spread
from harness.matrix_table import between, cell

SIZES = {  # a tiny image encoder, by transformers' common attribute names
    "image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 64, "num_channels": 3,
    "num_register_tokens": 2, "num_patches": 16,  # (SigLIP 2's NaFlex: at most 16 patches)
}  # fmt: skip
SQUARE = {"height": 32, "width": 32}
MOST_PARAMETERS = 5_000_000


def image_architectures() -> list[str]:
    """The model types of image encoders (model/hf/calls.py's `image_model_types`)."""
    from attnviz.model.hf.calls import image_model_types

    return sorted(image_model_types())


@dataclass
class Row:
    model_type: str
    served: bool = False
    weights: float = float("inf")  # the largest difference of any head's weights
    positions: int = 0
    reason: str = ""

    @property
    def equal(self) -> bool:
        return self.served and self.weights <= 1e-5


def tiny(model_type: str):
    """The architecture's config made tiny (the sizes SIZES names that it has, and its
    text and vision towers' where it has them), no dropout."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    sizes = sized(default)
    for tower in ("text_config", "vision_config"):
        stated = getattr(default, tower, None)
        if stated is not None and hasattr(stated, "to_dict"):
            sizes[tower] = {**stated.to_dict(), **sized(stated)}
    return AutoConfig.for_model(model_type, **sizes)


def sized(default) -> dict:
    """The sizes SIZES names that a config has, and its dropouts at 0."""
    sizes = {k: v for k, v in SIZES.items() if hasattr(default, k)}
    for name, value in list(sizes.items()):  # (sizes stated per stage, or per side)
        stated = getattr(default, name)
        if isinstance(stated, list | tuple):
            if name == "image_size":
                sizes[name] = [value] * len(stated)
            else:
                del sizes[name]  # (a hierarchical model's stages keep their own)
    for name, value in vars(default).items():
        if "dropout" in name and isinstance(value, float):
            sizes[name] = 0.0
    return sizes


def processor_for(model_type: str):
    """The architecture's image processor (its PIL backend; a vision tower's, its family's)
    resizing to 32 x 32 without a crop (NaFlex's: to at most 16 patches of 8), or ViT's
    where transformers names none."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    named = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or IMAGE_PROCESSOR_MAPPING_NAMES.get(
        model_type.removesuffix("_vision_model")  # (a tower's: its family's)
    )
    names = list(named.values()) if isinstance(named, dict) else list(named or ())
    for name in [n for n in names if n] + ["ViTImageProcessor"]:
        cls = getattr(transformers, f"{name.removesuffix('Fast')}Pil", None)
        if cls is None:
            cls = getattr(transformers, name.removesuffix("Fast"), None)
        if cls is None:
            continue
        try:
            made = cls(size=SQUARE, do_center_crop=False)
        except (TypeError, ValueError, KeyError, ImportError):  # (torchvision's only)
            continue
        if getattr(made, "max_num_patches", None):  # (NaFlex: the tiny config's patches)
            made.patch_size, made.max_num_patches = SIZES["patch_size"], SIZES["num_patches"]
        return made
    return transformers.ViTImageProcessorPil(size=SQUARE)


def noise() -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8))


def compare(model_type: str) -> Row:
    """One architecture's row."""
    import transformers

    from attnviz.model.hf.calls import reads_pixels
    from attnviz.model.hf.loading import quiet_transformers
    from attnviz.model.hf.pictures import load_image_encoder, vision_tower
    from attnviz.model.pretrained.backends import uses_attention_interface

    quiet_transformers()
    row = Row(model_type)
    if not uses_attention_interface(model_type):
        row.reason = "no attention through transformers' attention interface (its own, or none)"
        return row
    try:
        config = tiny(model_type)
        with torch.device("meta"), contextlib.redirect_stderr(io.StringIO()):
            skeleton = transformers.AutoModel.from_config(config)
        size = sum(p.numel() for p in skeleton.parameters())
        if not reads_pixels(skeleton) and vision_tower(model_type) is None:
            row.reason = (
                "its model reads token ids beside pictures, and no class of its vision tower alone"
            )
            return row
        if size > MOST_PARAMETERS:  # (sizes SIZES does not reach: not a tiny model)
            row.reason = f"its smallest config here has {size / 1e6:.0f} M parameters"
            return row
        torch.manual_seed(0)
        with contextlib.redirect_stderr(io.StringIO()):
            model = transformers.AutoModel.from_config(config, attn_implementation="eager")
        spread(model)
    except Exception as exc:  # (its own code refuses a tiny config)
        row.reason = f"no tiny model of it: {type(exc).__name__}: {str(exc)[:120]}"
        return row
    with tempfile.TemporaryDirectory() as folder:
        model.eval().save_pretrained(folder)
        processor_for(model_type).save_pretrained(folder)
        try:
            encoder = load_image_encoder(Path(folder))
            reading = encoder.read(noise())
        except Exception as exc:
            row.reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            return row
        row.served, row.positions = True, len(reading.positions)
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            reference = vision_tower(model_type) or transformers.AutoModel
            eager = reference.from_pretrained(folder, attn_implementation="eager")
            out = eager.eval()(
                pixel_values=reading.pixel_values[None], output_attentions=True, **reading.inputs
            )
    attentions = getattr(out, "attentions", None)
    if not attentions:
        row.reason = "transformers returns no attention weights for it"
        row.served = False
        return row
    diffs = []
    for layer, expected in enumerate(attentions):
        got = reading.capture.get(f"encoder.{layer}.self_attn.hook_weights")
        if got is None or got.shape != expected.shape:
            row.reason = f"layer {layer}'s weights are not what transformers returns"
            return row
        diffs.append(float((got - expected).abs().max()))
    row.weights = max(diffs)
    if not row.equal:
        row.reason = f"its weights differ from transformers' by {row.weights:.1e}"
    elif not placed_where_named(encoder, reading):
        row.weights = float("inf")  # (equal weights, over positions it names wrongly)
        row.reason = "a patch's pixels change another position than the one it names"
    return row


def placed_where_named(encoder, reading) -> bool:
    """Whether changing the pixels of one patch (row 1, column 2, or the first the model
    reads where it drops that one) changes, of the first layer's queries (each made from its
    own position's input alone), those of the one position the map names for it and no
    other."""
    ph, pw = encoder.patch
    patches = [(p.row, p.column) for p in reading.positions if p.kind == "patch"]
    row, column = (1, 2) if (1, 2) in patches else patches[0]
    named = [i for i, p in enumerate(reading.positions) if (p.row, p.column) == (row, column)]
    pixels = reading.pixel_values[None].clone()
    if pixels.dim() == 3:  # (NaFlex: a sequence of flattened patches, row by row)
        columns = int(reading.inputs["spatial_shapes"][0, 1])
        pixels[0, row * columns + column] += 1.0
    else:
        pixels[..., row * ph : (row + 1) * ph, column * pw : (column + 1) * pw] += 1.0
    hook = "encoder.0.self_attn.hook_q"
    _, changed = encoder.model.run_with_capture(
        pixels, names_filter=lambda n: n == hook, **reading.inputs
    )
    moved = (changed[hook] - reading.capture[hook]).abs().amax(dim=(0, 1, 3)) > 1e-6
    return moved.nonzero().flatten().tolist() == named


def vision_matrix(only=None) -> list[Row]:
    return [compare(t) for t in image_architectures() if only is None or only(t)]


START = "<!-- vision matrix: generated by python -m harness.vision_matrix --table -->"
END = "<!-- end of the vision matrix -->"


def table(rows: list[Row]) -> str:
    """docs/architectures.md's table of the vision half."""
    lines = [
        "| architecture | positions of a 32 x 32 picture in 8 x 8 patches | served and equal "
        "to transformers |",
        "| --- | ---: | --- |",
    ]
    for r in rows:
        said = "yes" if r.equal else f"no: {cell(r.reason)}"
        lines.append(f"| `{r.model_type}` | {r.positions or '—'} | {said} |")
    return "\n".join(lines)


def section(page: str) -> str:
    """The vision matrix's table as the page has it."""
    return between(page, START, END)


if __name__ == "__main__":
    import sys

    if "--table" in sys.argv:
        print(table(vision_matrix()))
    else:
        for t in image_architectures():
            r = compare(t)
            print(f"{t:28} {'equal' if r.equal else '     '} {r.positions:4} {r.reason}")
