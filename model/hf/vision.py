"""Image encoders on transformers' own code (ViT, DeiT, BEiT, DINOv2 with and without
registers, SigLIP's and CLIP's vision towers, ...): a folder of one, with its image
processor, read offline; a picture preprocessed by that processor and read with every
attention call captured, as a text model's are (model/hf/capture.py).

Every position of the run says what it is (`ImagePosition`): the class, distillation or
register tokens the model puts first, then the patches row by row (then YOLOS's detection
tokens), each with its row, its column and its box in the picture's own pixels: the
processor's resizing and centre crop (`Geometry`) undone. SigLIP 2's NaFlex processor
resizes a picture in its own proportions to at most `max_num_patches` patches, by its own
rule, and pads the sequence of them: the padding is named "░ k" (masked: no part of the
picture). A masked autoencoder (ViT-MAE) reads the patches its noise keeps, in its order:
seeded here, so that every picture of a grid's size is read with the same patches, each
placed as the others are; the dropped ones are not in the sequence. The views draw
attention over the picture by these boxes."""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..attention_types import AttentionSpec
from ..checkpoints import CheckpointError
from ..hooks import Capture, NamesFilter
from ..outputs import OutputKind
from ..patches import PADDING, PATCH, Geometry, ImageMap, ImagePosition
from ..runner import Capabilities, RunnerBase, RunResult, TokenUnit
from .calls import BackendError


def shape_only(*shape: int) -> np.ndarray:
    """An array of this shape that holds no memory, for transformers' functions that read
    only a picture's shape (its resizing rules)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1), shape, (0,) * len(shape))


def geometry(processor: Any, width: int, height: int) -> Geometry:
    """The geometry of a processor that resizes (to a height and width, or its shortest
    edge to a length) and may crop the centre, as transformers' resize and center_crop
    compute it, or to at most a number of patches by its own rule (NaFlex); a
    CheckpointError for any other (tiling, other dynamic resolutions: not mapped)."""
    from transformers.image_transforms import get_resize_output_image_size

    if getattr(processor, "max_num_patches", None):  # (SigLIP 2's NaFlex: its own rule)
        rule = getattr(
            sys.modules[type(processor).__module__], "get_image_size_for_max_num_patches", None
        )
        if rule is None:
            raise CheckpointError(
                f"its image processor ({type(processor).__name__}) reads a picture at its own "
                "resolution by a rule attnviz does not know: its patches cannot be placed"
            )
        h, w = rule(height, width, processor.patch_size, processor.max_num_patches)
        return Geometry((width, height), (int(w), int(h)), (0, 0), (int(w), int(h)))
    size = dict(getattr(processor, "size", None) or {})
    resized = (width, height)
    if getattr(processor, "do_resize", False):
        if "height" in size and "width" in size:
            resized = (int(size["width"]), int(size["height"]))
        elif "shortest_edge" in size and set(size) <= {"shortest_edge", "longest_edge"}:
            h, w = get_resize_output_image_size(
                shape_only(height, width, 3),
                size=int(size["shortest_edge"]),
                default_to_square=False,
                max_size=size.get("longest_edge"),
                input_data_format="channels_last",
            )
            resized = (int(w), int(h))
        else:
            raise CheckpointError(
                f"its image processor ({type(processor).__name__}) resizes by {sorted(size)}: "
                "its patches cannot be placed on the picture yet"
            )
    window, offset = resized, (0, 0)
    if getattr(processor, "do_center_crop", False):
        crop = dict(getattr(processor, "crop_size", None) or {})
        if not {"height", "width"} <= set(crop):
            raise CheckpointError(f"its image processor crops to {crop}: not understood")
        window = (int(crop["width"]), int(crop["height"]))
        offset = ((resized[0] - window[0]) // 2, (resized[1] - window[1]) // 2)
    return Geometry((width, height), resized, offset, window)


def special_positions(hf: Any, extra: int) -> tuple[list[ImagePosition], list[ImagePosition]]:
    """The positions an encoder puts before its patches (a class token, DeiT's
    distillation token, DINOv2's registers, in that order) and after them (YOLOS's
    detection tokens), named by what its embeddings hold; where they do not account for
    every position besides the patches, all are put first, named by their place."""
    embeddings = getattr(hf, "embeddings", None)
    before: list[ImagePosition] = []
    if any(getattr(embeddings, n, None) is not None for n in ("cls_token", "class_embedding")):
        before.append(ImagePosition("cls", "[CLS]"))
    if getattr(embeddings, "distillation_token", None) is not None:
        before.append(ImagePosition("distillation", "[DIST]"))
    registers = getattr(embeddings, "register_tokens", None)
    if registers is not None:
        before += [ImagePosition("register", f"[REG {i}]") for i in range(registers.shape[1])]
    after: list[ImagePosition] = []
    detection = getattr(embeddings, "detection_tokens", None)  # (YOLOS: cls, patches, these)
    if detection is not None:
        after = [ImagePosition("detection", f"[DET {i}]") for i in range(detection.shape[1])]
    if extra >= 0 and len(before) + len(after) != extra:
        return [ImagePosition("extra", f"[{i}]") for i in range(extra)], []
    return before, after


@dataclass
class ImageReading:
    """One picture read: what the model computed, and what each position is."""

    capture: Capture
    positions: list[ImagePosition]
    states: Tensor  # (T, d) its last hidden states
    pixel_values: Tensor  # (C, H, W) as the processor made them (NaFlex: (patches, p p C))
    geometry: Geometry
    patch: tuple[int, int]  # (height, width) of a patch in the processor's pixels
    inputs: dict[str, Tensor] = field(default_factory=dict)  # (what else the model read)

    @property
    def captured(self) -> Capture:
        return self.capture

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, columns) of the processor's picture in patches, read or not."""
        (width, height), patch = self.geometry.size, self.patch
        return height // patch[0], width // patch[1]


class ImageEncoder:
    """An image encoder of transformers' with its folder's image processor."""

    def __init__(self, model: Any, processor: Any) -> None:
        self.model = model  # an HFTransformer that reads pixels
        self.processor = processor
        hf = model.hf
        vision = getattr(hf.config, "vision_config", None) or hf.config
        patch = getattr(vision, "patch_size", None)
        self.patch = (patch, patch) if isinstance(patch, int) else tuple(patch or ())
        if len(self.patch) != 2:
            raise CheckpointError("its config states no patch size: its patches cannot be placed")

    @property
    def attention(self) -> list[AttentionSpec]:
        return self.model.specs

    def read(self, picture: Any, names_filter: NamesFilter = None) -> ImageReading:
        """A picture (an RGB PIL image: app/images.py's) read, every attention captured."""
        width, height = picture.size
        place = geometry(self.processor, width, height)
        made = self.processor(images=picture, return_tensors="pt")
        pixels = made["pixel_values"]
        rows, columns = place.size[1] // self.patch[0], place.size[0] // self.patch[1]
        padding = 0
        if "spatial_shapes" in made:  # (a padded sequence of flattened patches: NaFlex)
            if made["spatial_shapes"][0].tolist() != [rows, columns]:
                raise BackendError(
                    f"its processor made {made['spatial_shapes'][0].tolist()} patches where "
                    f"its rule says {[rows, columns]}: its patches cannot be placed"
                )
            padding = pixels.shape[1] - rows * columns
            inputs = {
                k: made[k].to(self.model.input_device)
                for k in ("pixel_attention_mask", "spatial_shapes")
            }
        elif tuple(pixels.shape[-2:]) != (place.size[1], place.size[0]):
            raise BackendError(
                f"its processor made {tuple(pixels.shape[-2:])} pixels where its settings say "
                f"{place.size[::-1]}: its patches cannot be placed"
            )
        else:
            inputs = self.masking(rows * columns)
        with torch.no_grad():
            states, capture = self.model.run_with_capture(
                pixels, names_filter=names_filter, **inputs
            )
        read = list(range(rows * columns))  # (the patches in the sequence, in its order)
        if "noise" in inputs:  # (a masked autoencoder's: those of least noise, in that order)
            read = torch.argsort(inputs["noise"][0].cpu()).tolist()[: self.kept(len(read))]
        extra = states.shape[1] - len(read) - padding
        if extra < 0:
            raise BackendError(
                f"it reads {states.shape[1]} positions of a grid of {rows} x {columns} patches "
                "(it drops patches, and not by a masked autoencoder's noise): they cannot be "
                "placed on the picture"
            )
        positions, after = special_positions(self.model.hf, extra)
        ph, pw = self.patch
        for r, c in (divmod(i, columns) for i in read):
            box = place.box(c * pw, r * ph, (c + 1) * pw, (r + 1) * ph)
            positions.append(ImagePosition("patch", f"{PATCH} {r},{c}", 0, r, c, box))
        positions += after
        # (the processor's padding of the sequence: masked, no part of the picture)
        positions += [ImagePosition("extra", f"{PADDING} {k}") for k in range(padding)]
        inputs = {k: v.cpu() for k, v in inputs.items()}  # (as the pixels and states are)
        return ImageReading(capture, positions, states[0], pixels[0], place, self.patch, inputs)

    @functools.cached_property
    def masks(self) -> float:
        """The share of its patches a masked autoencoder (ViT-MAE) drops; 0 for any other."""
        hf = self.model.hf
        if "noise" not in inspect.signature(hf.forward).parameters:
            return 0.0
        return float(getattr(hf.config, "mask_ratio", 0) or 0)

    def kept(self, patches: int) -> int:
        """How many of a grid's patches it reads (a masked autoencoder's formula)."""
        return int(patches * (1 - self.masks))

    def masking(self, patches: int) -> dict[str, Tensor]:
        """A masked autoencoder's noise, which chooses the patches it keeps (those of least
        noise; its mask ratio says how many): seeded, so that every picture of a grid's size
        is read with the same patches; nothing for a model that reads every patch."""
        if not self.masks:
            return {}
        seeded = torch.Generator().manual_seed(0)
        return {"noise": torch.rand(1, patches, generator=seeded).to(self.model.input_device)}


def specials_named(hf: Any) -> list[ImagePosition]:
    """The positions an encoder's embeddings add besides its patches (`special_positions`
    without the count to check them against: its price before a run)."""
    before, after = special_positions(hf, -1)
    return before + after


class ImageRunner(RunnerBase):
    """An image encoder served: a run reads one picture (no text), each of its positions a
    class, register or detection token or a patch (`RunResult.image`), its output its last
    hidden states."""

    token_unit: TokenUnit = "patches"
    output_kind: OutputKind = "features"
    capabilities = Capabilities(text=False, pictures=True)
    unknown_token = ""  # (a picture has no token its reader cannot read)
    special_tokens = frozenset({"[CLS]", "[DIST]"})  # (before it is read: the usual ones)
    max_tokens = 1_000_000  # (its positions are its processor's, not a limit of its own)

    def __init__(self, encoder: ImageEncoder) -> None:
        self.encoder = encoder
        self.model = encoder.model
        self._specials = specials_named(encoder.model.hf)
        self.special_tokens = frozenset(p.label for p in self._specials)

    def with_model(self, model: Any) -> ImageRunner:
        return ImageRunner(ImageEncoder(model, self.encoder.processor))

    def target_vocabulary(self) -> None:
        return None

    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        raise TypeError("an image encoder reads a picture (read_picture), not text")

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        raise TypeError("an image encoder reads a picture, not text")

    def positions_read(self, width: int, height: int) -> int:
        padded = getattr(self.encoder.processor, "max_num_patches", None)
        if padded:  # (NaFlex: every picture a sequence of that many, padded)
            return int(padded) + len(self._specials)
        place = geometry(self.encoder.processor, width, height)
        ph, pw = self.encoder.patch
        return self.encoder.kept((place.size[1] // ph) * (place.size[0] // pw)) + len(
            self._specials
        )

    def read_picture(
        self,
        picture: Any,
        digest: str,
        text: str | None = None,
        names_filter: NamesFilter = None,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        if text or continuation:
            raise ValueError("an image encoder reads a picture alone: it reads no text")
        reading = self.encoder.read(picture, names_filter)
        labels = [p.label for p in reading.positions]
        return RunResult(
            text="",
            source_tokens=labels,
            target_tokens=[],
            output_tokens=[],
            truncated=False,
            source_length=len(labels),
            capture=reading.capture,
            image=ImageMap(
                digest,
                picture.size,
                reading.positions,
                self.encoder.patch,
                reading.grid if self.encoder.masks else None,
            ),
        )
