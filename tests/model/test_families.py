"""The architecture matrix (tests/model/families.py): every text architecture of the
installed transformers whose attention goes through its attention interface, as a tiny
random model read back by our loader, against transformers' own forward."""

from __future__ import annotations

import pytest

from model.pretrained.backends import OURS
from tests.model.families import compare, interface_architectures, matrix, text_architectures

# Measured on transformers 5.24: 107 of the 165 are served and equal (the others are
# encoder-decoders, not served yet, architectures the matrix cannot make tiny, and those
# backends.REFUSED names). A change that serves fewer is a regression.
SERVED_AND_EQUAL_AT_LEAST = 107


@pytest.fixture(scope="module")
def rows():
    return matrix()


def test_the_architectures_come_from_transformers_own_mappings():
    text, through = text_architectures(), interface_architectures()
    assert len(text) > 150 and set(through) <= set(text)
    for expected in ("llama", "qwen3", "gemma3_text", "phi3", "gpt_neox", "roberta", "t5"):
        assert expected in through
    assert "bloom" in text and "bloom" not in through  # its attention is its own code


def test_no_architecture_is_served_with_other_numbers_than_transformers(rows):
    for row in rows:
        if row.served:
            assert row.weights <= 1e-5, (row.model_type, row.weights)


def test_most_architectures_are_served_equal_and_the_rest_say_why(rows):
    equal = [r for r in rows if r.equal]
    assert len(equal) >= SERVED_AND_EQUAL_AT_LEAST, len(equal)
    for row in rows:
        assert row.equal or row.reason or row.served, row.model_type
    by_type = {r.model_type: r for r in rows}
    for served in ("qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox", "olmo2", "gpt_oss",
                   "roberta", "distilbert", "modernbert", "llama", "gpt2"):  # fmt: skip
        assert by_type[served].equal, by_type[served]
    assert "sigmoid" in by_type["granite_swa"].reason  # refused: it would be wrong


@pytest.mark.parametrize("family", sorted(OURS))
def test_our_families_are_equal_through_transformers_path_too(family):
    kind = "encoder-only" if family == "bert" else "decoder-only"
    ours, theirs = compare(family, kind), compare(family, kind, backend="transformers")
    assert (ours.backend, theirs.backend) == ("ours", "transformers")
    assert ours.equal and theirs.equal, (ours, theirs)
