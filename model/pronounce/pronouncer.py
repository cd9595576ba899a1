"""The shipped pronunciation model: load it, or its untrained twin, and transcribe text."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoints import CheckpointError, load_checkpoint
from ..config import ModelConfig
from ..hooks import NamesFilter
from ..masks import pad_batch
from ..outputs import OutputKind
from ..pretrained.bytelevel import visible
from ..runner import Capabilities, DecodedPiece, RunnerBase, RunResult, TokenUnit
from ..served import ServedModel
from ..transformer import Pieces, Transformer
from ..twins import UNTRAINED_SEED, untrained
from .data import normalize
from .tokenizers import BOS, EOS, SourceTokenizer, TargetTokenizer, Vocab

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "pronounce"
TRAINED_CHARS = 40  # the longest training sentence (see data.Generator)
BREAKS = " ，。！？；：、,.!?;:"


class Pronouncer(RunnerBase):
    """Chinese characters -> pinyin with tones, English words -> ARPAbet (a `Runner`)."""

    token_unit: TokenUnit = "characters"
    output_kind: OutputKind = "transcription"
    model: Transformer  # (greedy decoding piece by piece: our model code's)
    special_tokens = frozenset({BOS, EOS})  # what it adds: <bos> opens the target
    capabilities = Capabilities(kv_cache=True)

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
        source, target = _tokenizers(directory)
        return cls(untrained(config, seed), source, target)

    def with_model(self, model: ServedModel) -> Pronouncer:
        if not isinstance(model, Transformer):
            raise TypeError("the pronouncer takes our model code's weights")
        return Pronouncer(model, self.source, self.target)

    @property
    def max_tokens(self) -> int:
        return self.source.max_tokens

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        encoded = self.source.encode(text)
        return encoded.ids, [visible(t) for t in encoded.tokens]

    def target_vocabulary(self) -> list[str]:
        return self.target.vocab.tokens

    @torch.no_grad()
    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        """Greedy decoding through the KV cache, then (if `capture`) one forward pass over
        the source and the decoded tokens with the selected hook points captured.

        The model was trained on sentences of at most TRAINED_CHARS characters, and on
        longer ones it stops early; so longer text is decoded piece by piece (cut after a
        space or punctuation), and the pieces' outputs are joined. The captured pass reads
        the pieces as they were decoded: each piece's decoder input opens with its own
        <bos>, and every position sees only its own piece at the positions it had alone
        (`Pieces`), so each row predicts what the decoding made at that step."""
        encoded = self.source.encode(text)
        if not encoded.ids:
            raise ValueError("the text is empty once whitespace is removed")
        normalized = normalize(text)
        decoded = self._decode(encoded.ids, normalized)
        tokens = self.target.vocab.tokens
        target_ids = [i for piece in decoded for i in piece.target_ids]
        read = read_in(decoded)
        capture_, predicted = None, []
        if capture:
            source = torch.tensor([encoded.ids])
            target = torch.tensor([target_ids])
            logits, capture_ = self.model.run_with_capture(
                source, target, pieces=read, names_filter=names_filter
            )
            predicted = [tokens[i] for i in logits[0].argmax(-1).tolist()]
        return RunResult(
            text=normalized,
            source_tokens=[visible(t) for t in encoded.tokens],  # the space token as ␣
            source_raw=encoded.tokens,
            source_ids=encoded.ids,
            target_tokens=[tokens[i] for i in target_ids],
            target_ids=target_ids,
            output_tokens=[tokens[i] for piece in decoded for i in piece.target_ids[1:]],
            truncated=encoded.truncated,
            source_length=encoded.original_length,
            capture=capture_,
            predicted_tokens=predicted,
            pieces=decoded,
            read_in=read,
        )

    def decoded_pieces(self, result: RunResult) -> list[DecodedPiece]:
        """The pieces `run` decoded `result` in, each with its greedy output (kept on the
        result: decoded again only for a result made without them)."""
        return result.pieces or self._decode(result.source_ids, result.text)

    def _decode(self, ids: list[int], normalized: str) -> list[DecodedPiece]:
        """Greedy decoding of the source ids piece by piece (see `pieces`), in one batch."""
        rows = [ids[start:end] for start, end in pieces(normalized[: len(ids)])]
        batch = pad_batch(rows, self.model.config.pad_id)
        decoded = greedy_read(self.model, self.target, batch)
        return [
            DecodedPiece(torch.tensor([row]), target_ids, ended)
            for row, (target_ids, ended) in zip(rows, decoded, strict=True)
        ]


def read_in(decoded: list[DecodedPiece]) -> Pieces | None:
    """The pieces of one pass over decoded pieces' sources and decoder inputs, joined
    (None for one piece: a plain pass)."""
    if len(decoded) < 2:
        return None
    source = [k for k, piece in enumerate(decoded) for _ in range(piece.source.size(1))]
    target = [k for k, piece in enumerate(decoded) for _ in piece.target_ids]
    return Pieces(torch.tensor(source), torch.tensor(target))


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


def greedy_read(
    model: Transformer, target: TargetTokenizer, source: torch.Tensor
) -> list[tuple[list[int], bool]]:
    """Per row of `source`: the decoder's input (<bos> and the greedy output up to <eos>),
    and whether the output ended with <eos> within its length limit: 3 × the row's source
    tokens + 10, at most the decoder's positions (as if each row were decoded alone)."""
    room = model.config.max_seq_len - 1
    lengths = (source != model.config.pad_id).sum(-1).tolist()
    limits = [min(3 * n + 10, room) for n in lengths]
    rows = model.greedy_decode(source, max_new_tokens=max(limits)).tokens.tolist()
    eos, read = target.eos_id, []
    for row, limit in zip(rows, limits, strict=True):
        row = row[: 1 + limit]  # <bos> and at most `limit` tokens, <eos> among them
        read.append((row[: row.index(eos)], True) if eos in row else (row, False))
    return read


VOCAB_FILES = {"source": "source_vocab.json", "target": "target_vocab.json"}


def _tokenizers(directory: Path) -> tuple[SourceTokenizer, TargetTokenizer]:
    vocabs = {}
    for side, name in VOCAB_FILES.items():
        if not (directory / name).is_file():
            raise CheckpointError(f"checkpoint {directory} has no {name}")
        vocabs[side] = Vocab.load(directory / name)
    return SourceTokenizer(vocabs["source"]), TargetTokenizer(vocabs["target"])


def _check_fit(config: ModelConfig, source: Vocab, target: TargetTokenizer) -> None:
    problems = []
    if config.source_vocab_size != len(source):
        problems.append(
            f"source_vocab_size {config.source_vocab_size} != {len(source)} source tokens"
        )
    if config.target_vocab_size != len(target.vocab):
        problems.append(
            f"target_vocab_size {config.target_vocab_size} != {len(target.vocab)} target tokens"
        )
    specials = (config.pad_id, config.bos_id, config.eos_id)
    if specials != (target.pad_id, target.bos_id, target.eos_id):
        problems.append(f"pad/bos/eos ids {specials} differ from the target vocabulary's")
    if problems:
        raise CheckpointError("the vocabularies do not fit the model: " + "; ".join(problems))
