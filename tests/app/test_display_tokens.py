"""Tokens as people read them (issue 41): every token of a byte-level tokenizer shown in
one form in every answer meant for reading (a space as ␣, a line break as ↵, a tab as ⇥,
another invisible character by its code point), beside the tokenizer's own pieces in a
raw field; the lens and DLA answers in the same form; pronounce's space token as ␣."""

from __future__ import annotations

import pytest

from harness.references import smollm2

# spaces, a double space, a line break, a tab and a no-break space (no digits: transformers'
# reading of the GGUF does not split them as SmolLM2's tokenizer does)
TEXT = "The cat sat  on\nthe\tmat,\u00a0then left."
RAW_MARKS = ("Ġ", "Ċ", "ĉ", "Âł")


def post(client, path: str, **body) -> dict:
    response = client.post(f"/api/v1/{path}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def pieces() -> list[str]:
    """The prompt's pieces by the `tokenizers` library itself (transformers' reading of the
    GGUF: an independent reference to our own reader's)."""
    theirs = smollm2.tokenizer()
    return theirs.backend_tokenizer.encode(TEXT, add_special_tokens=False).tokens


def test_every_smollm2_token_is_shown_readable_beside_its_raw_piece(client, pieces):
    body = post(client, "analyze", model="smollm2", text=TEXT)
    shown = body["source_tokens"]
    assert body["source_raw"] == pieces and body["target_raw"] == pieces
    assert len(shown) == len(pieces) and body["target_tokens"] == shown
    for token in shown:
        assert not any(mark in token for mark in RAW_MARKS), shown
    assert "␣cat" in shown and "↵" in "".join(shown) and "⇥" in "".join(shown)
    assert "‹U+00A0›" in "".join(shown)  # the no-break space: visible, by its code point
    for raw, token in zip(pieces, shown, strict=True):  # a space in the raw: ␣ where shown
        assert raw.count("Ġ") == token.count("␣"), (raw, token)
    # the next token's candidates: shown the same way, each with its piece
    for step in body["next_tokens"]:
        for a in step["top"]:
            assert not any(mark in a["token"] for mark in RAW_MARKS) and a["raw"], a
    attention = post(client, "attention", model="smollm2", text=TEXT, layers=[0], encoding="json")
    assert attention["source_tokens"] == shown and attention["source_raw"] == pieces
    assert attention["blocks"][0]["rows"] == shown


def test_the_lens_and_dla_name_every_token_in_one_form(client, pieces):
    body = {"model": "smollm2", "text": TEXT}
    lens = post(client, "lab/lens", **body, position=2)
    analysis = post(client, "analyze", **body)
    dla = post(client, "lab/dla", **body)
    vocab_form = {}  # id -> shown form, across both answers: one form per token
    for answer in (lens, dla):
        assert answer["tokens"] == analysis["source_tokens"] and answer["raw_tokens"] == pieces
    guesses = [lens["predicted"], dla["target"], dla["baseline"], *dla["candidates"]]
    for row in lens["rows"]:
        guesses += row["best"] + row["top"]
    for g in guesses:
        assert not any(mark in g["token"] for mark in RAW_MARKS), g
        assert vocab_form.setdefault(g["id"], (g["token"], g["raw"])) == (g["token"], g["raw"])
        if (
            g["raw"].startswith("Ġ")
            and len(g["raw"]) > 1
            and g["raw"][1:].isascii()
            and g["raw"][1:].isalpha()
        ):
            assert g["token"] == "␣" + g["raw"][1:], g  # a word's leading space: ␣
    assert any(g["raw"].startswith("Ġ") for g in guesses)  # (the case is met)


def test_pronounces_space_token_is_shown(client):
    body = post(client, "analyze", model="pronounce", text="to be")
    assert body["source_tokens"] == ["t", "o", "␣", "b", "e"]
    assert body["source_raw"] == ["t", "o", " ", "b", "e"]
    block = post(client, "attention", model="pronounce", text="to be", types=["decoder.cross"],
                 layers=[0], encoding="json")["blocks"][0]  # fmt: skip
    assert block["columns"] == body["source_tokens"]  # hovers name ␣, not an empty label


def test_a_generations_steps_name_each_token_as_shown_and_as_spelled(client):
    theirs = smollm2.tokenizer()
    body = post(client, "generate", model="smollm2", text="The cat sat on the", max_new_tokens=4)
    for step in body["steps"]:
        # the raw piece is the tokenizer's own spelling of the id (transformers' reading)
        assert step["raw"] == theirs.convert_ids_to_tokens(step["id"]), step
        assert not any(mark in step["token"] for mark in RAW_MARKS), step
        assert step["token"].count("␣") == step["raw"].count("Ġ"), step
        for a in step["top"]:
            assert a["raw"] == theirs.convert_ids_to_tokens(a["id"]), a
            assert not any(mark in a["token"] for mark in RAW_MARKS), a
