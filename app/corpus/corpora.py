"""The sentences a corpus run reads: a corpus the project ships, or a text of yours (one
sentence a line) checked line by line, its encoding included."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..errors import CannotServe


@dataclass(frozen=True)
class Shipped:
    id: str
    title: str
    language: str  # ISO 639-1
    licence: str
    origin: str  # where its sentences come from
    title_zh: str  # the title and origin as the page shows them in Chinese
    origin_zh: str


# HSK 3.0's graded sentences (hsk-sentences-audio, pinned in pyproject.toml): 4,354 in
# Chinese, each with its English translation
HSK = "the hsk-sentences-audio package 1.0.0 (https://github.com/no7z/hsk-sentences-audio)"
HSK_ZH = "hsk-sentences-audio 软件包 1.0.0（https://github.com/no7z/hsk-sentences-audio）"
SHIPPED = {
    c.id: c
    for c in (
        Shipped(
            "hsk-zh",
            "HSK 3.0 graded sentences (Chinese)",
            "zh",
            "CC-BY-SA-4.0",
            HSK,
            "HSK 3.0 分级例句（中文）",
            HSK_ZH,
        ),
        Shipped(
            "hsk-en",
            "HSK 3.0 graded sentences, their English translations",
            "en",
            "CC-BY-SA-4.0",
            HSK,
            "HSK 3.0 分级例句的英文译文",
            HSK_ZH,
        ),
    )
}


@cache
def _hsk_records() -> list[dict]:
    from hsk_sentences_audio import load_sentences

    return load_sentences()


@cache
def shipped_sentences(corpus: str) -> tuple[str, ...]:
    records = _hsk_records()
    if corpus == "hsk-zh":
        return tuple(r["chinese"] for r in records)
    return tuple(r["translation"]["en"] for r in records if r.get("translation", {}).get("en"))


def read_shipped() -> None:
    """Every shipped corpus read, at start-up: the package's file is one JSON document,
    whose parse holds the GIL, and with it the event loop, for ~0.1 s (measured: /healthz
    waited 92 ms behind a request's first read of it)."""
    for corpus in SHIPPED:
        shipped_sentences(corpus)


def read_lines(body: bytes, max_sentences: int, max_chars: int) -> list[str]:
    """A text of yours as its sentences: UTF-8 (a BOM is dropped), one sentence a line,
    blank lines skipped; a 422 naming the first line that is not UTF-8, holds a control
    character, or is longer than a text may be, or where there are too many or none."""
    import re

    from ..payloads.text import CONTROL
    from ..runs.reading import reading_form

    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    control = re.compile(f"[{CONTROL}]")
    sentences = []
    for number, raw in enumerate(body.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            raise CannotServe(
                f"line {number} is not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} "
                "of the line): save the file as UTF-8",
            ) from None
        if found := control.search(line):
            raise CannotServe(
                f"line {number} holds a control character (U+{ord(found.group()):04X})"
            )
        if len(line) > max_chars:
            raise CannotServe(
                f"line {number} has {len(line)} characters; a sentence may have {max_chars}"
            )
        line = reading_form(line).strip()
        if line:
            sentences.append(line)
        if len(sentences) > max_sentences:
            raise CannotServe(f"more than {max_sentences} sentences (ATTNVIZ_CORPUS_MAX_SENTENCES)")
    if not sentences:
        raise CannotServe("the text has no sentence: one a line")
    return sentences
