"""Character-level source and token-level target vocabularies, saved as JSON lists."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .data import CJK_PUNCT, COPIED, SEP, UNK, Lexicon, normalize

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SRC_SPECIALS = [PAD, UNK]
TGT_SPECIALS = [PAD, BOS, EOS, UNK]  # ids 0..3: pad_id 0, bos_id 1, eos_id 2


@dataclass
class Encoded:
    ids: list[int]
    tokens: list[str]  # what the user typed, one visible token per id (<unk> for unknowns)
    truncated: bool  # the input was longer than the limit and was cut
    original_length: int  # tokens before truncation


class Vocab:
    def __init__(self, tokens: list[str]) -> None:
        if len(set(tokens)) != len(tokens):
            raise ValueError("a vocabulary lists each token once")
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.tokens, ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))


class SourceTokenizer:
    """One token per character of the normalized text; unknown characters become <unk>."""

    def __init__(self, vocab: Vocab, max_tokens: int = 128) -> None:
        self.vocab = vocab
        self.max_tokens = max_tokens
        self.unk_id = vocab.index[UNK]

    @classmethod
    def build(cls, lexicon: Lexicon, max_tokens: int = 128) -> SourceTokenizer:
        printable = [chr(c) for c in range(32, 127) if not chr(c).isupper()]
        extra = [c for c in CJK_PUNCT if c not in printable]
        return cls(Vocab(SRC_SPECIALS + printable + extra + lexicon.chars), max_tokens)

    def encode(self, text: str) -> Encoded:
        text = normalize(text)
        ids = [self.vocab.index.get(ch, self.unk_id) for ch in text]
        tokens = [ch if i != self.unk_id else UNK for ch, i in zip(text, ids, strict=True)]
        n = len(ids)
        return Encoded(ids[: self.max_tokens], tokens[: self.max_tokens], n > self.max_tokens, n)


class TargetTokenizer:
    """Pinyin syllables with tone, ARPAbet phonemes, the word separator, copied characters."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.unk_id = vocab.index[UNK]
        self.pad_id, self.bos_id, self.eos_id = (vocab.index[t] for t in (PAD, BOS, EOS))

    @classmethod
    def build(cls, lexicon: Lexicon) -> TargetTokenizer:
        tokens = TGT_SPECIALS + [SEP] + [c for c in COPIED if c != SEP]
        return cls(Vocab(tokens + lexicon.syllables + lexicon.phonemes))

    def encode(self, tokens: list[str] | tuple[str, ...]) -> list[int]:
        return [self.vocab.index.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: list[int]) -> list[str]:
        """The tokens after a leading BOS, up to (not including) the first EOS."""
        if ids and ids[0] == self.bos_id:
            ids = ids[1:]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return [self.vocab.tokens[i] for i in ids]
