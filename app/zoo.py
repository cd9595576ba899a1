"""The models the server holds: loaded once in the lifespan, shared by every request."""

from __future__ import annotations

from dataclasses import dataclass

from model.pretrained import MiniLM
from model.pronounce.pronouncer import Pronouncer

from .settings import Settings

# attention type -> (stack, attention module name within a layer)
ATTENTION_TYPES = {
    "encoder.self": ("encoder", "self_attn"),
    "decoder.self": ("decoder", "self_attn"),
    "decoder.cross": ("decoder", "cross_attn"),
}


@dataclass
class ModelEntry:
    id: str
    title: str
    description: str
    languages: list[str]
    runner: Pronouncer | MiniLM  # transcribe(text, capture) -> Transcription
    tokens: str = "characters"  # or "wordpiece": words can be merged, [CLS]/[SEP] hidden
    output: str = "transcription"  # or "embedding": a sentence embedding, comparable

    @property
    def config(self):
        return self.runner.model.config

    def attention_types(self) -> list[str]:
        cfg = self.config
        types = []
        if cfg.has_encoder:
            types.append("encoder.self")
        if cfg.has_decoder:
            types.append("decoder.self")
        if cfg.architecture == "encoder-decoder":
            types.append("decoder.cross")
        return types

    def layers(self, attention_type: str) -> int:
        stack, _ = ATTENTION_TYPES[attention_type]
        return self.config.n_layers if stack == "encoder" else self.config.decoder_layers


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


def load_zoo(settings: Settings) -> Zoo:
    """The shipped pronunciation model, all-MiniLM-L6-v2, and their untrained twins (same
    configs, fixed-seed weights), for comparing attention before and after training."""
    twin = "The same configuration with fixed-seed random weights, for comparison."
    entries = [
        ModelEntry(
            "pronounce",
            "Pronunciation (Chinese → pinyin, English → ARPAbet)",
            PRONOUNCE_DESCRIPTION,
            ["zh", "en"],
            Pronouncer.load(settings.pronounce_dir),
        ),
        ModelEntry(
            "pronounce-untrained",
            "Pronunciation, untrained twin",
            twin,
            ["zh", "en"],
            Pronouncer.untrained(settings.pronounce_dir),
        ),
        ModelEntry(
            "minilm",
            "all-MiniLM-L6-v2 (English)",
            MINILM_DESCRIPTION,
            ["en"],
            MiniLM(),
            tokens="wordpiece",
            output="embedding",
        ),
        ModelEntry(
            "minilm-untrained",
            "all-MiniLM-L6-v2, untrained twin",
            twin,
            ["en"],
            MiniLM(trained=False),
            tokens="wordpiece",
            output="embedding",
        ),
    ]
    return Zoo({e.id: e for e in entries}, default="pronounce")
