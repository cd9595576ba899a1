"""Checkpoints: a folder with `config.json` and `model.safetensors`; nothing is unpickled.

Pickled weights (`pytorch_model.bin`, `*.pt`, ...) can run code when they are loaded, so
they are never read: such a folder is refused, naming the file."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .config import ModelConfig
from .transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# Weight files that are pickles (torch.save, joblib, ...): refused, never opened.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
# safetensors' names of the floating-point dtypes that weights may be stored in
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})


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
    tied = model.tied()
    for name, tensor in model.state_dict().items():
        if name in tied:  # stored once, under the name it is tied to
            continue
        tensor = tensor.detach().cpu()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        state[name] = tensor.contiguous()
    save_file(state, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    return directory


def load_checkpoint(directory: str | Path) -> Transformer:
    """Rebuild the model from its config and load its weights, in eval mode on the CPU.

    The weights file's header is checked against the config before any weight is read or
    any memory is allocated for the model: a truncated file, or weights that do not fit
    the config, are a CheckpointError."""
    directory = Path(directory)
    if not (directory / WEIGHTS_FILE).is_file():
        pickles = sorted(
            p.name for p in directory.glob("*") if p.suffix in PICKLE_SUFFIXES and p.is_file()
        )
        if pickles:
            raise CheckpointError(
                f"checkpoint {directory} has no {WEIGHTS_FILE}, only pickled weights "
                f"{pickles}: they are never loaded (unpickling can run code); save the "
                "weights as safetensors"
            )
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(f"checkpoint {directory} has no {name}")
    try:
        config = ModelConfig.load(directory / CONFIG_FILE)
        with torch.device("meta"):  # shapes only: nothing allocated yet
            skeleton = Transformer(config, init=False)
        expected = {k: v for k, v in skeleton.state_dict().items() if k not in skeleton.tied()}
    except (ValueError, TypeError, RuntimeError, OSError) as exc:
        raise CheckpointError(f"checkpoint {directory}: bad {CONFIG_FILE}: {exc}") from exc
    weights = directory / WEIGHTS_FILE
    try:
        with safe_open(weights, framework="pt", device="cpu") as f:
            header = {name: f.get_slice(name) for name in f.keys()}  # noqa: SIM118
            problems = _misfits(
                expected, {n: (t.get_shape(), t.get_dtype()) for n, t in header.items()}
            )
            if problems:
                raise CheckpointError(
                    f"checkpoint {directory} does not fit its config: " + "; ".join(problems)
                )
            state = {name: f.get_tensor(name) for name in expected}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(
            f"checkpoint {directory}: {WEIGHTS_FILE} is not a complete safetensors file "
            f"(truncated, or another format): {exc}"
        ) from exc
    model = Transformer(config, init=False)  # every weight comes from the file
    state = {name: t.to(expected[name].dtype) for name, t in state.items()}
    state |= {alias: state[name] for alias, name in model.tied().items()}
    model.load_state_dict(state)
    return model.eval()


def _misfits(
    expected: dict[str, torch.Tensor], stored: dict[str, tuple[list[int], str]]
) -> list[str]:
    """What keeps the stored tensors (name -> shape, safetensors dtype) from the model."""
    problems = []
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    for name in sorted(set(expected) & set(stored)):
        shape, dtype = stored[name]
        if tuple(expected[name].shape) != tuple(shape):
            problems.append(
                f"{name} has shape {tuple(shape)}, the config says {tuple(expected[name].shape)}"
            )
        if expected[name].is_floating_point() and dtype not in FLOAT_DTYPES:
            problems.append(f"{name} is {dtype}, not floating point")
    return problems
