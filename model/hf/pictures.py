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
from .loading import hf_config, load_model, quiet_transformers, wrapped
from .memory import twin_of
from .vision import ImageEncoder, ImageRunner


def vision_tower(model_type: str) -> Any:
    """The class of transformers' that reads a model type's pictures alone: its AutoModel's
    where that reads pixels alone (ViT's), else its vision tower's (a dual encoder's or a
    vision-language model's: CLIPVisionModel of CLIP's folder), or None."""
    import transformers
    from transformers.models.auto import modeling_auto as auto

    base = auto.MODEL_MAPPING_NAMES.get(model_type)
    base = base[0] if isinstance(base, list | tuple) else base
    found = getattr(transformers, base, None) if isinstance(base, str) else None
    if found is not None and reads_pixels(found):
        return found
    named = auto.MODEL_MAPPING_NAMES.get(f"{model_type}_vision_model")
    if not isinstance(named, str) and isinstance(base, str):
        named = base.removesuffix("Model").removesuffix("ForConditionalGeneration")
        named = f"{named}VisionModel"
    tower = getattr(transformers, named, None) if isinstance(named, str) else None
    return tower if tower is not None and reads_pixels(tower) else None


def load_image_encoder(folder: str | Path, placement: Placement | None = None) -> ImageEncoder:
    """A folder's model, without a task's head (transformers' AutoModel, or its vision
    tower's class where that reads pictures alone: `vision_tower`), and its image processor
    (its PIL backend: torchvision is not installed), read offline."""
    import transformers

    folder = Path(folder)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            processor = transformers.AutoImageProcessor.from_pretrained(
                folder, backend="pil", local_files_only=True, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"transformers cannot read its image processor: {exc}") from None
    tower = vision_tower(hf_config(folder).model_type)
    model = load_model(folder, "encoder-only", placement, cls=tower)
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
