"""The checked name mapping every family of pretrained weights goes through: each of the
model's tensors filled exactly once with an equal shape, each file tensor used or named
as deliberately left out, nothing left over (TransformerLens keeps one such converter per
family; ours share this check)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ..checkpoints import CheckpointError
from ..config import ModelConfig

CHECKED_MAPPING = (
    "model/ reads it through a checked mapping (every tensor once, shapes equal), tested "
    "equal to transformers; it also reads its GGUF files, rotates q and k back for the "
    "neuron view and replays the KV cache in the lab"
)


@dataclass(frozen=True)
class Adapter:
    """One family of pretrained weights on our model code, declared once in its module
    (as TransformerLens's adapter factory keeps one converter per family): the config.json
    `model_type` it reads, why our code serves it, its config as ours, its tensor names as
    ours and any fused tensor split first, and how a folder of it is read: as a language
    model (`causal`) or as a BERT encoder with its masked-LM head where it has one
    (`bert`). model/pretrained/adapters.py lists them: the backends, the folder reader
    and the model sources read that table."""

    model_type: str
    why: str
    config: Callable[[dict], ModelConfig]
    names: Callable[[str], str | None]
    # (tensors, our config) -> tensors with a fused projection split (GPT-2's c_attn)
    split: Callable[[dict[str, torch.Tensor], ModelConfig], dict[str, torch.Tensor]] | None = None
    reads: Literal["causal", "bert"] = "causal"


def map_state(
    tensors: Mapping[str, torch.Tensor],
    model: nn.Module,
    our_name: Callable[[str], str | None],
    not_mapped: Mapping[str, str],
    family: str,
    problems: list[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Our state dict from a file's tensors, renamed by `our_name` (None: no place in the
    model). `not_mapped` names the file tensors deliberately left out and why. Anything
    else that does not fit, and any `problems` a family found itself, is one
    CheckpointError listing them all."""
    expected = model.state_dict()
    # a tied tensor (the output projection that is the embedding) is filled by its one name
    tied = getattr(model, "tied", None)
    aliases = tied() if callable(tied) else {}
    for name in aliases:
        del expected[name]
    state: dict[str, torch.Tensor] = {}
    problems = list(problems or [])
    for name, tensor in tensors.items():
        if name in not_mapped:
            continue
        ours = our_name(name)
        if ours is None or ours not in expected:
            problems.append(f"{name} has no place in the model")
        elif ours in state:
            problems.append(f"{ours} would be filled twice")
        elif tensor.shape != expected[ours].shape:
            problems.append(f"{name} {tuple(tensor.shape)} != {ours} {tuple(expected[ours].shape)}")
        else:
            state[ours] = tensor.float()
    missing = sorted(set(expected) - set(state))
    if missing:
        problems.append(f"nothing fills {missing}")
    if problems:
        raise CheckpointError(f"{family} weights do not map onto model/: " + "; ".join(problems))
    for name, to in aliases.items():
        state[name] = state[to]
    return state
