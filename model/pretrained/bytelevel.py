"""Byte-level BPE tokens (GPT-2's, Llama 3's, SmolLM2's) as people read them.

Such a token is spelled in GPT-2's byte alphabet: "Ġthe" is the bytes of " the", and a
Chinese character is often split between tokens ("ä»" + "ĸ" are the three bytes of 他).
`readable` shows each token of a sequence as its text, every character a person could not
see marked (`visible`): a space as ␣ (the typographic sign for a space: "Ġthe" is read as
"␣the"; not a middle dot, which the page's token list already sets between tokens, and
which is a character of text), a line break as ↵, a tab as ⇥, a carriage return as ␍, any
other invisible character (a no-break space, a zero-width joiner, a control character) by
its code point, ‹U+00A0›; and the bytes of a character split between tokens as ‹他 1-2/3›
(bytes 1 to 2 of its 3), a byte of no character as ‹a0›, never as mojibake. The raw piece
(the tokenizer's own spelling, "Ġthe") is what the API's raw fields carry.
"""

from __future__ import annotations

import unicodedata
from functools import cache

SPACE = "␣"
SHOWN = {" ": SPACE, "\n": "↵", "\t": "⇥", "\r": "␍"}
# characters that draw nothing: separators (Zs, Zl, Zp), controls (Cc), formats (Cf)
INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})


def visible_char(char: str) -> str:
    """One character as shown: marked (see the module's doc) if it draws nothing."""
    if char in SHOWN:
        return SHOWN[char]
    if unicodedata.category(char) in INVISIBLE:
        return f"‹U+{ord(char):04X}›"
    return char


def visible(text: str) -> str:
    """A text (a token of a character-level vocabulary) with every invisible character
    marked: the space token " " as "␣"."""
    return "".join(visible_char(c) for c in text)


@cache
def byte_of_char() -> dict[str, int]:
    """GPT-2's alphabet: the character spelling each byte (printable bytes are themselves,
    the others shifted past 255), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, shift = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shift)
            shift += 1
    return {c: b for b, c in chars.items()}


def token_bytes(token: str) -> bytes | None:
    """The bytes a byte-level token spells (None: not in the byte alphabet, e.g. a special
    token such as <|im_start|>)."""
    table = byte_of_char()
    if not token or any(c not in table for c in token):
        return None
    return bytes(table[c] for c in token)


def utf8_length(lead: int) -> int:
    """Bytes of the UTF-8 character a lead byte starts (0 for a continuation byte)."""
    if lead < 0x80:
        return 1
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    if lead >> 3 == 0b11110:
        return 4
    return 0


def readable(tokens: list[str], specials: frozenset[str] = frozenset()) -> list[str]:
    """Each token of a sequence as text (see the module's doc). A character split between
    tokens is named in every token holding part of it, with the bytes that token holds."""
    spelled = [None if t in specials else token_bytes(t) for t in tokens]
    stream = b"".join(b for b in spelled if b is not None)
    # for every byte of the stream: (start of its character, the character's length), or
    # None where the bytes do not form a character (a sequence cut mid-character)
    owner: list[tuple[int, int] | None] = [None] * len(stream)
    i = 0
    while i < len(stream):
        n = utf8_length(stream[i])
        whole = n > 0 and i + n <= len(stream)
        if whole:
            try:
                stream[i : i + n].decode("utf-8")
            except UnicodeDecodeError:
                whole = False
        if not whole:
            i += 1
            continue
        for k in range(i, i + n):
            owner[k] = (i, n)
        i += n
    shown, at = [], 0
    for token, raw in zip(tokens, spelled, strict=True):
        if raw is None:
            shown.append(token)
            continue
        parts, k = [], 0
        while k < len(raw):
            place = owner[at + k]
            if place is None:  # a byte of no whole character
                parts.append(f"‹{raw[k]:02x}›")
                k += 1
                continue
            start, n = place
            first = at + k - start  # this token's first byte of the character
            held = min(n - first, len(raw) - k)  # bytes of it this token holds
            char = stream[start : start + n].decode("utf-8")
            if held == n:
                parts.append(visible_char(char))
            else:
                span = f"{first + 1}" if held == 1 else f"{first + 1}-{first + held}"
                parts.append(f"‹{char} {span}/{n}›")
            k += held
        shown.append("".join(parts))
        at += len(raw)
    return shown
