"""The models the server holds: loaded once in the lifespan, shared by every request."""

from __future__ import annotations

from dataclasses import dataclass

from model.pronounce.pronouncer import Pronouncer

from .settings import Settings


@dataclass
class Zoo:
    models: dict[str, Pronouncer]
    default: str

    def ids(self) -> list[str]:
        return list(self.models)


def load_zoo(settings: Settings) -> Zoo:
    """The shipped pronunciation model and its untrained twin (same config, fixed seed)."""
    return Zoo(
        models={
            "pronounce": Pronouncer.load(settings.pronounce_dir),
            "pronounce-untrained": Pronouncer.untrained(settings.pronounce_dir),
        },
        default="pronounce",
    )
