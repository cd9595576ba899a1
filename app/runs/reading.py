"""The text a model reads: a request's text normalised (`reading_form`), and bounded by
the tokens its model reads (`text_limit`), with a 422 that says what to change."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from ..errors import CannotServe
from ..payloads.text import INVISIBLE
from ..settings import Settings

_INVISIBLE_CHARS = re.compile(f"[{INVISIBLE}]+")


# Unicode's stream-safe format (UAX #15, section 13): past 30 combining marks in a row a
# combining grapheme joiner (U+034F) is put in, so that NFC's reordering of a run, quadratic
# in its length, never takes more than 30 marks at once (4,000 marks in one run took 17 ms
# of the GIL per line: an upload of 500 such lines held /healthz past 100 ms).
_MARKS = "".join(re.escape(chr(c)) for c in range(0x110000) if unicodedata.combining(chr(c)))
_LONG_RUN = re.compile(f"([{_MARKS}]{{30}})(?=[{_MARKS}])")
_JOINER = "\u034f"


def reading_form(text: str) -> str:
    """The text a model reads: in Unicode NFC (é typed as e + U+0301 reads as é), without
    invisible characters (a zero-width joiner or direction mark pasted into a word would
    otherwise be an unknown token that changes its transcription). A run of more than 30
    combining marks (no writing system has one) is ordered 30 at a time."""
    safe = _LONG_RUN.sub(lambda m: m.group(1) + _JOINER, text)
    normal = unicodedata.normalize("NFC", safe)
    return _INVISIBLE_CHARS.sub("", normal.replace(_JOINER, "") if safe is not text else normal)


def read_text(text: str, limit: int, field: str = "text") -> str:
    """A request's text as a model reads it (`reading_form`), or a 422 that says what to
    change: over the character limit, or nothing left to read."""
    if len(text) > limit:
        raise CannotServe(f"{field} has {len(text)} characters; the limit is {limit}: shorten it")
    text = reading_form(text)
    if not text.strip():
        raise CannotServe(f"{field} is empty: type a sentence")
    return text


# A text's characters per token its model reads, at most: the bound is the model's tokens
# (a text past them is read up to them, `truncated`), and the character cap only bounds
# the tokenizer's work. English prose is ~4.7 characters a SmolLM2 token (a cap of 4 a
# token refused 7,900 tokens of licence text, 36,861 characters, in an 8,192-token
# context); code's indentation and rules of "=====" run to ~16.
CHARS_PER_TOKEN = 16


def text_limit(settings: Settings, runner: Any) -> int:
    """The characters a text for this model may have: ATTNVIZ_MAX_TEXT_CHARS, or 16 per
    token the model reads where that is more, so that any real text of as many tokens as
    the model reads is read."""
    return max(settings.max_text_chars, CHARS_PER_TOKEN * runner.max_tokens)
