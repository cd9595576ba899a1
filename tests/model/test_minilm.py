"""all-MiniLM-L6-v2 on our model code, against the transformers and sentence-transformers
implementations loaded from the same package folder."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the installed package

import pytest
import torch
from safetensors import safe_open

from attnviz.model import pad_batch
from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.bert import (
    MAX_TOKENS,
    NOT_MAPPED,
    BertRunner,
    map_bert_state,
    package_dir,
)

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "Hello world",
    "Attention is all you need.",
    " ".join(["The quick brown fox jumps over the lazy dog near the riverbank at dawn."] * 45),
]


@pytest.fixture(scope="module")
def minilm() -> BertRunner:
    return BertRunner.load()


@pytest.fixture(scope="module")
def bert_tensors() -> dict[str, torch.Tensor]:
    with safe_open(package_dir() / "model.safetensors", "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118


def batch(minilm: BertRunner, texts: list[str]) -> torch.Tensor:
    return pad_batch([minilm.encode(t).ids for t in texts])


def test_every_tensor_is_used_once_and_nothing_is_left_over(minilm, bert_tensors):
    state = map_bert_state(bert_tensors, minilm.model)
    assert state.keys() == minilm.model.state_dict().keys()
    assert len(state) + len(NOT_MAPPED) == len(bert_tensors) == 104
    extra = {**bert_tensors, "encoder.layer.0.attention.self.rotary.weight": torch.zeros(1)}
    with pytest.raises(CheckpointError, match=r"rotary\.weight has no place"):
        map_bert_state(extra, minilm.model)
    fewer = {k: v for k, v in bert_tensors.items() if "layer.5.output.dense.bias" not in k}
    with pytest.raises(
        CheckpointError, match=r"nothing fills \['encoder.5.feed_forward.w2.bias'\]"
    ):
        map_bert_state(fewer, minilm.model)


def test_attention_and_hidden_states_match_transformers_bert(minilm):
    from transformers import BertModel

    reference = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager").eval()
    ids = batch(minilm, SENTENCES)  # short and long (512 tokens), padded in one batch
    assert ids.shape == (4, MAX_TOKENS)
    keep = ids != 0
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=keep.long(), output_attentions=True)
        hidden, capture = minilm.model.run_with_capture(
            ids, names_filter=lambda n: n.endswith("hook_weights")
        )
    for layer in range(6):
        weights = capture[f"encoder.{layer}.self_attn.hook_weights"]
        assert weights.shape == (4, 12, MAX_TOKENS, MAX_TOKENS)
        assert (weights - expected.attentions[layer]).abs().max() <= 1e-4, layer
    # padded positions are not compared: neither model's output there means anything
    assert (hidden - expected.last_hidden_state)[keep].abs().max() <= 1e-4


def test_sentence_embeddings_match_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(package_dir()), device="cpu")
    texts = SENTENCES[:3]
    expected = torch.tensor(reference.encode(texts, normalize_embeddings=True))
    ours = minilm.embed(batch(minilm, texts))
    cosine = (ours * expected).sum(-1)
    assert torch.all(cosine >= 0.9999), cosine
    assert (minilm.embed(batch(minilm, texts[:1])) - ours[:1]).abs().max() <= 1e-5  # padding-free


def test_tokenizer_neither_pads_nor_truncates_by_itself(minilm):
    short = minilm.encode("Hello world")
    assert short.tokens == ["[CLS]", "hello", "world", "[SEP]"] and not short.truncated
    long = minilm.encode(SENTENCES[3])
    assert long.truncated and long.original_length > MAX_TOKENS
    assert len(long.ids) == MAX_TOKENS and long.tokens[-1] == "[SEP]"
