"""Which backend reads each architecture (config.json's `model_type`): one table, as
transformers' ALL_ATTENTION_FUNCTIONS and TransformerLens's adapter factory are.

- `ADAPTERS` (model/pretrained/adapters.py): the model types model/ reads through a checked
  mapping, and why ours serves them.
- `REFUSED`: architectures transformers has that the capture cannot serve, and why.
- Any other architecture transformers has is read by its own modeling code (model/hf)
  where its attention goes through the attention interface; otherwise it is refused,
  saying so. `backend="transformers"` (ATTNVIZ_BACKEND) sends the model types of
  `ADAPTERS` there too, so that each is tested equal both ways.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..checkpoints import CheckpointError
from .adapters import ADAPTERS

Backend = Literal["ours", "transformers"]
# What the capture cannot serve among the architectures transformers has, and why (found
# by the architecture matrix, harness/matrix.py: served, they would be wrong).
SINK_SCALE = (
    "its attention sinks are scaled by a learned sigmoid inside its own eager attention, "
    "which the capture does not reproduce (its weights would differ by up to 1.0)"
)
REFUSED: dict[str, str] = {
    "diffllama": "it subtracts two softmax maps per layer (differential attention); the "
    "capture would show each map as a layer of its own",
    "granite_swa": SINK_SCALE,
    "granitemoe_swa": SINK_SCALE,
}


@dataclass(frozen=True)
class Choice:
    """The backend that reads an architecture, and why."""

    backend: Backend
    reason: str


@functools.cache
def modeling_source(model_type: str) -> str | None:
    """The text of transformers' modeling module for a model_type, or None where it has
    none (read as text: nothing is imported)."""
    from transformers.models.auto.configuration_auto import (
        CONFIG_MAPPING_NAMES,
        model_type_to_module_name,
    )

    if model_type not in CONFIG_MAPPING_NAMES:
        return None
    module = model_type_to_module_name(model_type)
    spec = importlib.util.find_spec(f"transformers.models.{module}")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / f"modeling_{module}.py"
    return path.read_text(encoding="utf-8") if path.exists() else None


@functools.cache
def uses_attention_interface(model_type: str) -> bool:
    """Whether an architecture's attention goes through the attention interface: its own
    modeling code's, or (a model made of towers, as a vision-language model is: its
    modeling code builds them with AutoModel) its default config's text and vision towers'."""
    source = modeling_source(model_type)
    if source is None:
        return False
    if "ALL_ATTENTION_FUNCTIONS" in source:
        return True
    towers = towers_of(model_type) if "AutoModel.from_config" in source else []
    return bool(towers) and all(uses_attention_interface(t) for t in towers)


def towers_of(model_type: str) -> list[str]:
    """The model types of a config's text and vision towers (its default config's)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(model_type)
    except (ValueError, KeyError, TypeError, ImportError):
        return []
    found = [getattr(getattr(config, n, None), "model_type", None)
             for n in ("text_config", "vision_config")]  # fmt: skip
    return [t for t in found if isinstance(t, str) and t != model_type]


def choose(model_type: str, forced: Backend | None = None) -> Choice:
    """The backend of an architecture; a CheckpointError saying why where none serves it."""
    if model_type in ADAPTERS and forced != "transformers":
        return Choice("ours", ADAPTERS[model_type].why)
    if model_type in REFUSED:
        raise CheckpointError(
            f"the architecture {model_type!r} is not served: {REFUSED[model_type]}"
        )
    if modeling_source(model_type) is None:
        raise CheckpointError(
            f"the architecture {model_type!r} is not one transformers has (nor model/): "
            "nothing can read it"
        )
    if not uses_attention_interface(model_type):
        raise CheckpointError(
            f"the architecture {model_type!r} computes its attention in its own code, not "
            "through transformers' attention interface: its heads cannot be captured"
        )
    return Choice(
        "transformers", "transformers' own modeling code, captured in its attention interface"
    )
