"""Image encoders read: a folder's (its model and its image processor, offline) or a
transformers model in memory with its processor, as an `ImageEncoder` (model/hf/vision.py)
and, served, an `ImageRunner`."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from ..checkpoints import CheckpointError
from ..placement import Placement
from .calls import reads_pixels
from .capture import register
from .loading import load_model, quiet_transformers, wrapped
from .memory import twin_of
from .vision import ImageEncoder, ImageRunner


def load_image_encoder(folder: str | Path, placement: Placement | None = None) -> ImageEncoder:
    """A folder's model (transformers' AutoModel: the encoder, without a task's head) and
    its image processor (its PIL backend: torchvision is not installed), read offline."""
    import transformers

    folder = Path(folder)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            processor = transformers.AutoImageProcessor.from_pretrained(
                folder, backend="pil", local_files_only=True, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"transformers cannot read its image processor: {exc}") from None
    model = load_model(folder, "encoder-only", placement)
    if not model.reads_pixels:
        raise CheckpointError("its model reads token ids, not pictures")
    return ImageEncoder(model, processor)


def load_image_runner(folder: str | Path, placement: Placement | None = None) -> ImageRunner:
    """A folder's image encoder, served."""
    return ImageRunner(load_image_encoder(folder, placement))


def image_encoder_of(hf: Any, processor: Any) -> ImageEncoder:
    """A transformers image model in memory and its image processor: run as a twin that
    shares its tensors (model/hf/memory.py); a classifier is read without its head (its
    base model: the encoder)."""
    import transformers

    register()
    quiet_transformers()
    if not isinstance(hf, transformers.PreTrainedModel):
        raise TypeError(f"a transformers model (a PreTrainedModel), not {type(hf).__name__}")
    if not callable(getattr(processor, "preprocess", None)):
        raise TypeError(
            "processor: the model's image processor (transformers' AutoImageProcessor), "
            f"not {type(processor).__name__}"
        )
    encoder = hf.base_model
    if not reads_pixels(encoder):
        raise CheckpointError(f"{type(hf).__name__} reads token ids, not pictures")
    return ImageEncoder(wrapped(twin_of(encoder), "encoder-only"), processor)
