"""The models the server holds: a registry of families (`id -> factory`), loaded once in
the lifespan and shared by every request. Adding a family is its runner module and one
`register(...)` line; the untrained twin of each is made here, not by the family."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from model.config import ModelConfig
from model.pretrained import MiniLM
from model.pronounce.pronouncer import Pronouncer
from model.runner import AttentionSpec, Runner, untrained

from .settings import Settings

TWIN_DESCRIPTION = "The same configuration with fixed-seed random weights, for comparison."


@dataclass(frozen=True)
class Family:
    """A registry entry: how to load one model, and what the page says about it."""

    id: str
    title: str
    description: str
    languages: list[str]  # ISO 639-1 codes of the text it reads
    load: Callable[[Settings], Runner]
    short_title: str = ""  # for the twin's title; default: the title
    twin: bool = True  # also serve `<id>-untrained`


REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to the registry (a second one with the same id replaces the first)."""
    REGISTRY[family.id] = family
    return family


@dataclass
class ModelEntry:
    """One served model: its id and texts, and its runner."""

    id: str
    title: str
    description: str
    languages: list[str]
    runner: Runner
    specs: dict[str, AttentionSpec] = field(init=False)
    # what the model has and can do, as the lab's experiments name their needs: its
    # capabilities that hold, "encoder", "decoder" and "positions" (an encoding that can
    # be switched off)
    features: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.specs = {spec.type: spec for spec in self.runner.attention}
        cfg = self.config
        flags = dataclasses.asdict(self.runner.capabilities) | {
            "encoder": cfg.has_encoder,
            "decoder": cfg.has_decoder,
            "positions": cfg.positional != "none",
        }
        self.features = frozenset(name for name, on in flags.items() if on)

    @property
    def config(self) -> ModelConfig:
        return self.runner.model.config

    def attention_types(self) -> list[str]:
        return list(self.specs)


@dataclass
class Zoo:
    models: dict[str, ModelEntry]
    default: str

    def ids(self) -> list[str]:
        return list(self.models)


PRONOUNCE_DESCRIPTION = (
    "The seed tutorial's encoder-decoder Transformer (Post-LN, sinusoidal positions), trained "
    "by this project to read text aloud: Chinese characters to pinyin with tone numbers, "
    "English words to ARPAbet phonemes. Its cross-attention aligns each sound with the "
    "characters that produce it."
)
MINILM_DESCRIPTION = (
    "all-MiniLM-L6-v2, a BERT-style sentence encoder (6 layers, 12 heads, learned positions, "
    "GELU, Post-LN), its weights mapped onto this project's model code. Reads English; its "
    "output is the sentence embedding."
)

register(
    Family(
        "pronounce",
        "Pronunciation (Chinese → pinyin, English → ARPAbet)",
        PRONOUNCE_DESCRIPTION,
        ["zh", "en"],
        lambda settings: Pronouncer.load(settings.pronounce_dir),
        short_title="Pronunciation",
    )
)
register(
    Family(
        "minilm",
        "all-MiniLM-L6-v2 (English)",
        MINILM_DESCRIPTION,
        ["en"],
        lambda settings: MiniLM.load(),
        short_title="all-MiniLM-L6-v2",
    )
)


def load_zoo(settings: Settings) -> Zoo:
    """The registered families (all in registry order, or those `settings.zoo` names in its order),
    each with its untrained twin (same config and tokenizers, fixed-seed weights), for
    comparing attention before and after training. `settings.plugins` are imported
    first: a plugin module registers families of its own."""
    for module in settings.plugins:
        importlib.import_module(module)
    unknown = sorted(set(settings.zoo) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown model families {unknown}; registered: {sorted(REGISTRY)}")
    entries = []
    for family in [REGISTRY[i] for i in dict.fromkeys(settings.zoo)] or REGISTRY.values():
        runner = family.load(settings)
        entries.append(
            ModelEntry(family.id, family.title, family.description, family.languages, runner)
        )
        if family.twin:
            twin = runner.with_model(untrained(runner.model.config))
            title = f"{family.short_title or family.title}, untrained twin"
            entries.append(
                ModelEntry(
                    f"{family.id}-untrained", title, TWIN_DESCRIPTION, family.languages, twin
                )
            )
    if not entries:
        raise ValueError("no model to serve: settings.zoo names none of the registered families")
    ids = [e.id for e in entries]
    default = settings.default_model if settings.default_model in ids else ids[0]
    return Zoo({e.id: e for e in entries}, default=default)
