"""Checkpoints: a folder with `config.json` and `model.safetensors`; nothing is unpickled."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .config import ModelConfig
from .transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint folder whose files do not fit together."""


def save_checkpoint(
    model: Transformer, directory: str | Path, dtype: torch.dtype | None = None
) -> Path:
    """Write the config and weights (optionally cast, e.g. to float16) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save(directory / CONFIG_FILE)
    state = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[name] = tensor.contiguous()
    save_file(state, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    return directory


def load_checkpoint(directory: str | Path) -> Transformer:
    """Rebuild the model from its config and load its weights, in eval mode on the CPU."""
    directory = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(f"checkpoint {directory} has no {name}")
    try:
        config = ModelConfig.load(directory / CONFIG_FILE)
    except (ValueError, TypeError, OSError) as exc:
        raise CheckpointError(f"checkpoint {directory}: bad {CONFIG_FILE}: {exc}") from exc
    model = Transformer(config)
    state = load_file(directory / WEIGHTS_FILE, device="cpu")
    expected = model.state_dict()
    problems = []
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    for name in sorted(set(expected) & set(state)):
        if expected[name].shape != state[name].shape:
            problems.append(
                f"{name} has shape {tuple(state[name].shape)}, the config says "
                f"{tuple(expected[name].shape)}"
            )
    if problems:
        raise CheckpointError(
            f"checkpoint {directory} does not fit its config: " + "; ".join(problems)
        )
    model.load_state_dict({name: t.to(expected[name].dtype) for name, t in state.items()})
    return model.eval()
