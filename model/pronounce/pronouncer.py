"""The shipped pronunciation model: load it, or its untrained twin, and transcribe text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoints import CheckpointError, load_checkpoint
from ..config import ModelConfig
from ..hooks import Capture, NamesFilter
from ..transformer import Transformer
from .data import normalize
from .tokenizers import BOS, SourceTokenizer, TargetTokenizer, Vocab

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "pronounce"
UNTRAINED_SEED = 0


@dataclass
class Transcription:
    text: str  # the input as the model read it (whitespace collapsed, case folded)
    source_tokens: list[str]  # one per encoder position; unknown characters as <unk>
    decoder_tokens: list[str]  # one per decoder position: <bos>, then the output but its last
    output_tokens: list[str]  # the transcription, without <bos> and <eos>
    truncated: bool  # the input had more than `max_source_tokens` and was cut
    source_length: int  # tokens in the input before truncation
    capture: Capture | None  # one forward pass over (source, decoder_tokens)


class Pronouncer:
    """Chinese characters -> pinyin with tones, English words -> ARPAbet."""

    def __init__(
        self,
        model: Transformer,
        source: SourceTokenizer,
        target: TargetTokenizer,
        card: dict | None = None,
    ) -> None:
        _check_fit(model.config, source.vocab, target)
        self.model = model.eval()
        self.source = source
        self.target = target
        self.card = card or {}

    @classmethod
    def load(cls, directory: str | Path = SHIPPED) -> Pronouncer:
        """Weights (safetensors), config and vocabularies, checked against each other."""
        directory = Path(directory)
        model = load_checkpoint(directory)
        source, target = _tokenizers(directory)
        metrics = directory / "metrics.json"
        card = json.loads(metrics.read_text()) if metrics.is_file() else None
        return cls(model, source, target, card)

    @classmethod
    def untrained(cls, directory: str | Path = SHIPPED, seed: int = UNTRAINED_SEED) -> Pronouncer:
        """The same configuration and vocabularies, weights from a fixed-seed initialisation."""
        directory = Path(directory)
        config = ModelConfig.load(directory / "config.json")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Transformer(config)
        source, target = _tokenizers(directory)
        return cls(model, source, target)

    @property
    def max_source_tokens(self) -> int:
        return self.source.max_tokens

    @torch.no_grad()
    def transcribe(
        self, text: str, capture: bool = True, names_filter: NamesFilter = None
    ) -> Transcription:
        """Greedy decoding through the KV cache, then (if `capture`) one forward pass over
        the source and the decoded tokens with the selected hook points captured."""
        encoded = self.source.encode(text)
        if not encoded.ids:
            raise ValueError("the text is empty once whitespace is removed")
        src = torch.tensor([encoded.ids])
        limit = min(3 * len(encoded.ids) + 10, self.model.config.max_seq_len - 1)
        tokens = self.model.greedy_decode(src, max_new_tokens=limit).tokens[0]
        output = self.target.decode(tokens.tolist())
        decoder_ids = tokens[: len(output) + 1]  # <bos> and the output, without <eos>
        cache = None
        if capture:
            _, cache = self.model.run_with_cache(src, decoder_ids[None], names_filter=names_filter)
        return Transcription(
            text=normalize(text),
            source_tokens=encoded.tokens,
            decoder_tokens=[BOS, *output],
            output_tokens=output,
            truncated=encoded.truncated,
            source_length=encoded.original_length,
            capture=cache,
        )


def _tokenizers(directory: Path) -> tuple[SourceTokenizer, TargetTokenizer]:
    files = {name: directory / f"{name}_vocab.json" for name in ("src", "tgt")}
    for path in files.values():
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory} has no {path.name}")
    return SourceTokenizer(Vocab.load(files["src"])), TargetTokenizer(Vocab.load(files["tgt"]))


def _check_fit(config: ModelConfig, source: Vocab, target: TargetTokenizer) -> None:
    problems = []
    if config.src_vocab_size != len(source):
        problems.append(f"src_vocab_size {config.src_vocab_size} != {len(source)} source tokens")
    if config.tgt_vocab_size != len(target.vocab):
        problems.append(
            f"tgt_vocab_size {config.tgt_vocab_size} != {len(target.vocab)} target tokens"
        )
    specials = (config.pad_id, config.bos_id, config.eos_id)
    if specials != (target.pad_id, target.bos_id, target.eos_id):
        problems.append(f"pad/bos/eos ids {specials} differ from the target vocabulary's")
    if problems:
        raise CheckpointError("the vocabularies do not fit the model: " + "; ".join(problems))
