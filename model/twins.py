"""Our own Transformer (the seed tutorial's) run directly: its untrained twin, the same
weights every time for a config, and the positional arguments its forward takes for each
architecture."""

from __future__ import annotations

import torch
from torch import Tensor

from .config import ModelConfig
from .transformer import Transformer

UNTRAINED_SEED = 0  # the fixed seed of every untrained twin


def model_inputs(config: ModelConfig, source: Tensor | None, target: Tensor | None) -> tuple:
    """The positional arguments of `Transformer.forward` for an architecture."""
    if config.architecture == "encoder-only":
        return (source,)
    if config.architecture == "decoder-only":
        return (target,)
    return (source, target)


def untrained(config: ModelConfig, seed: int = UNTRAINED_SEED) -> Transformer:
    """A model of `config` with the fixed-seed initialisation of `Transformer` (the
    untrained twin): the same weights every time, the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(config).eval()
