"""What a text field of the API accepts: no control character, something besides
whitespace and invisible characters; the OpenAPI schema says so with a pattern, and the
server's character limit is written into it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

# Control characters (NUL, backspace, escape, DEL, C1, ...) are never text someone typed:
# refused. Tab, line feed, vertical tab, form feed and carriage return are whitespace.
CONTROL = r"\x00-\x08\x0e-\x1f\x7f-\x9f"
# Python's whitespace (str.split, str.strip) less the refused controls, spelled out so that
# every regex dialect reading the schema agrees with the server.
SPACE = r"\x09-\x0d\x20\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# Invisible characters: soft hyphen, zero-width space and (non-)joiner, direction marks,
# embeddings and isolates, word joiner, variation selectors, byte order mark. They have no
# sound and no meaning to the models (MiniLM's tokenizer drops most of them), so the server
# reads text without them (Inference.run).
INVISIBLE = (
    r"\xad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    r"\ufe00-\ufe0f\ufeff"
)
# What the server accepts as a text, for the OpenAPI schema (the server checks it in Python,
# with messages that say what to fix): no control character, and something besides
# whitespace and invisible characters. Its maxLength is the server's setting, written in by
# `document_text_limit`.
TEXT_PATTERN = rf"^[^{CONTROL}]*[^{CONTROL}{SPACE}{INVISIBLE}][^{CONTROL}]*$"
_CONTROL_CHAR = re.compile(f"[{CONTROL}]")


def valid_unicode(text: str) -> str:
    """The text, if it is valid Unicode without control characters."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text holds an unpaired surrogate (not valid Unicode)") from exc
    control = _CONTROL_CHAR.search(text)
    if control:
        raise ValueError(
            f"text holds the control character U+{ord(control.group()):04X} at position "
            f"{control.start()}: remove it"
        )
    return text


# A text field: validated as the pattern says (the blank check and the length limit are the
# server's, in Inference.run), documented with the pattern and, in the served schema, the limit.
Text = Annotated[
    str, Field(json_schema_extra={"pattern": TEXT_PATTERN}), AfterValidator(valid_unicode)
]


def document_text_limit(openapi: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Give every text field of the OpenAPI schema the server's character limit."""

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("pattern") == TEXT_PATTERN:
                node["maxLength"] = max_chars
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(openapi.get("components", {}))
    return openapi
