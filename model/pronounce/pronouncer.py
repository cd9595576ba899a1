"""The shipped pronunciation model: load it, or its untrained twin, and transcribe text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoints import CheckpointError, load_checkpoint
from ..config import ModelConfig
from ..hooks import Capture, NamesFilter
from ..masks import pad_batch
from ..transformer import Transformer
from .data import normalize
from .tokenizers import BOS, SourceTokenizer, TargetTokenizer, Vocab

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "pronounce"
UNTRAINED_SEED = 0
TRAINED_CHARS = 40  # the longest training sentence (see data.Generator)
BREAKS = " ，。！？；：、,.!?;:"


@dataclass
class Transcription:
    text: str  # the input as the model read it (whitespace collapsed, case folded)
    source_tokens: list[str]  # one per encoder position; unknown characters as <unk>
    decoder_tokens: list[str]  # one per decoder position: <bos>, then the output
    output_tokens: list[str]  # the transcription, without <bos> and <eos>
    truncated: bool  # the input (or its transcription) was longer than the model holds: cut
    source_length: int  # tokens in the input before truncation
    capture: Capture | None  # one forward pass over (source, decoder_tokens)
    embedding: list[float] | None = None  # a sentence embedding, for models that make one
    source_words: list[int | None] | None = None  # word of each source token (WordPiece)


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
        the source and the decoded tokens with the selected hook points captured.

        The model was trained on sentences of at most TRAINED_CHARS characters, and on
        longer ones it stops early; so longer text is decoded piece by piece (cut after a
        space or punctuation), and the pieces' outputs are joined. The capture is still one
        pass over the whole source and the whole output."""
        encoded = self.source.encode(text)
        if not encoded.ids:
            raise ValueError("the text is empty once whitespace is removed")
        normalized = normalize(text)
        spans = pieces(normalized[: len(encoded.ids)])
        src_pieces = pad_batch([encoded.ids[start:end] for start, end in spans])
        output = []
        for ids in greedy_read(self.model, self.target, src_pieces):
            output += self.target.decode(ids)
        room = self.model.config.max_seq_len - 1  # decoder positions after <bos>
        output_cut = len(output) > room
        output = output[:room]
        decoder_ids = [self.target.bos_id, *self.target.encode(output)]
        cache = None
        if capture:
            src = torch.tensor([encoded.ids])
            decoder_input = torch.tensor([decoder_ids])
            _, cache = self.model.run_with_cache(src, decoder_input, names_filter=names_filter)
        return Transcription(
            text=normalized,
            source_tokens=encoded.tokens,
            decoder_tokens=[BOS, *output],
            output_tokens=output,
            truncated=encoded.truncated or output_cut,
            source_length=encoded.original_length,
            capture=cache,
        )


def pieces(text: str, limit: int = TRAINED_CHARS) -> list[tuple[int, int]]:
    """(start, end) of pieces of at most `limit` characters covering `text`, each cut
    after its last space or punctuation mark where it has one."""
    spans, start = [], 0
    while len(text) - start > limit:
        window = text[start : start + limit]
        cut = max(window.rfind(mark) for mark in BREAKS) + 1
        end = start + (cut if cut > 0 else limit)
        spans.append((start, end))
        start = end
    spans.append((start, len(text)))
    return spans


def greedy_read(model: Transformer, target: TargetTokenizer, src: torch.Tensor) -> list[list[int]]:
    """Per row of `src`: the decoder's input, <bos> and the greedy output up to <eos>."""
    limit = min(3 * src.size(1) + 10, model.config.max_seq_len - 1)
    rows = model.greedy_decode(src, max_new_tokens=limit).tokens.tolist()
    return [row[: row.index(target.eos_id)] if target.eos_id in row else row for row in rows]


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
