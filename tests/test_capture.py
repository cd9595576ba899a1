"""`attnviz.capture` (attnviz/captured.py): a shipped model by its id and a folder of
yours by its path, each run's weights against transformers' own eager attentions."""

from __future__ import annotations

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from PIL import Image

import attnviz
from attnviz.model.pretrained.bert import package_dir
from harness.checkpoints import PROMPTS, saved, saved_masked_lm, tiny, tokenizer

TEXT = "The cat sat on the mat."


def test_a_shipped_model_by_its_id_is_transformers_bertmodel():
    from transformers import AutoTokenizer, BertModel

    run = attnviz.capture("minilm", TEXT)
    theirs = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager").eval()
    ids = AutoTokenizer.from_pretrained(str(package_dir()))(TEXT, return_tensors="pt")
    with torch.no_grad():
        expected = theirs(**ids, output_attentions=True).attentions
    assert run.source_tokens[0] == "[CLS]" and len(run.source_tokens) == ids.input_ids.size(1)
    assert list(run.types) == ["encoder.self"] and run.types["encoder.self"]["layers"] == 6
    for layer, weights in enumerate(expected):
        assert (run.weights(layer) - weights[0]).abs().max() <= 1e-5
    assert run.numpy("weights", 3).shape == (12, len(run.source_tokens), len(run.source_tokens))
    assert run.get("mask", 0).dtype == torch.bool and run.get("norms", 0).shape == (12, 9, 9)
    with pytest.raises(IndexError, match=re.escape("layer 6 out of range: encoder.self has 0..5")):
        run.weights(6)
    with pytest.raises(ValueError, match="is none of"):
        run.get("context")  # type: ignore[arg-type]


def test_a_folder_by_its_path_is_its_own_eager_attention(tmp_path):
    theirs = tiny("llama")
    folder = saved(tmp_path, theirs)
    run = attnviz.capture(folder, PROMPTS[0])
    ids = torch.tensor([[int(t) for t in run._result.source_ids]])
    with torch.no_grad():
        expected = theirs(ids, output_attentions=True).attentions
    assert list(run.types) == ["decoder.self"] and run.model == "model"
    for layer, weights in enumerate(expected):
        assert (run.weights(layer) - weights[0]).abs().max() <= 1e-5
    assert run.get("k", 1).shape[0] == theirs.config.num_key_value_heads
    with pytest.raises(TypeError, match="a shipped model's id"):
        attnviz.capture(3, PROMPTS[0])
    with pytest.raises(TypeError, match="model reads text alone: leave the image out"):
        attnviz.capture(folder, PROMPTS[0], image=Image.new("RGB", (8, 8)))


def test_a_long_text_keeps_q_k_v_and_says_how_to_read_its_matrices():
    run = attnviz.capture("smollm2", "hello world " * 300)
    n = len(run.source_tokens)
    assert n > 512 and not run.truncated and run.source_length == n
    assert run.get("q", 3).shape == (9, n, 64) and run.get("v", 3).shape == (3, n, 64)
    with pytest.raises(ValueError, match="past 512 a run keeps no whole weights matrix"):
        run.weights(3)


def test_a_model_in_memory_is_read_with_its_tokenizer_and_left_as_it_was():
    from transformers import PreTrainedTokenizerFast

    theirs = tiny("qwen2")
    theirs.train()  # (a model being trained: attnviz's run must not switch it to eval)
    calls = []
    hook = theirs.model.layers[0].register_forward_hook(lambda *_: calls.append(1))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer(), eos_token="<|endoftext|>")
    fast.backend_tokenizer.enable_truncation(max_length=3)  # (the user's, for their batches)
    before = {n: p.detach().clone() for n, p in theirs.named_parameters()}
    run = attnviz.capture(theirs, PROMPTS[2], tokenizer=fast)
    # the user's objects as they were: mode, attention, hooks, weights, tokenizer settings
    assert theirs.training and theirs.config._attn_implementation == "eager"
    assert calls == [] and len(theirs.model.layers[0]._forward_hooks) == 1
    assert all(torch.equal(p, before[n]) for n, p in theirs.named_parameters())
    assert fast.backend_tokenizer.truncation["max_length"] == 3
    # the whole text read (the user's truncation is theirs), as transformers reads it
    fast.backend_tokenizer.no_truncation()
    ids = fast(PROMPTS[2], return_tensors="pt").input_ids
    assert len(run.source_tokens) == ids.size(1) > 3
    hook.remove()
    with torch.no_grad():
        expected = theirs.eval()(ids, output_attentions=True).attentions
    for layer, weights in enumerate(expected):
        assert (run.weights(layer) - weights[0]).abs().max() <= 1e-5
    # a model in half precision: run in it, on its own tensors (no copy), as its eager
    # attention computes it in float16
    half = tiny("llama").half()
    run = attnviz.capture(half, PROMPTS[0], tokenizer=tokenizer())
    assert run.weights(0).dtype == torch.float16
    assert next(half.parameters()).dtype == torch.float16
    ids = torch.tensor([tokenizer().encode(PROMPTS[0]).ids])
    half.config._attn_implementation = "eager"
    with torch.no_grad():
        expected = half(ids, output_attentions=True).attentions
    assert all(torch.equal(run.weights(i), w[0]) for i, w in enumerate(expected))
    with pytest.raises(TypeError, match=re.escape("tokenizer=...")):
        attnviz.capture(theirs, PROMPTS[0])
    with pytest.raises(TypeError, match="a path brings its own"):
        attnviz.capture("minilm", PROMPTS[0], tokenizer=fast)


def test_a_masked_lm_in_memory_reads_its_head_and_a_base_model_is_an_encoder(tmp_path):
    from tokenizers import Tokenizer
    from transformers import BertModel

    folder = tmp_path / "masked"
    theirs = saved_masked_lm(folder)
    made = Tokenizer.from_file(str(folder / "tokenizer.json"))
    run = attnviz.capture(theirs, "the cat [MASK] on the mat", tokenizer=made)
    ids = torch.tensor([made.encode("the cat [MASK] on the mat").ids])
    with torch.no_grad():
        expected = theirs(ids, output_attentions=True).attentions
    for layer, weights in enumerate(expected):
        assert (run.weights(layer) - weights[0]).abs().max() <= 1e-5
    assert run.output_tokens  # its head's predictions for the mask
    encoder = attnviz.capture(BertModel(theirs.config), "the cat", tokenizer=made)
    assert encoder.output_tokens == [] and list(encoder.types) == ["encoder.self"]


def test_a_model_of_a_vocabulary_smaller_than_ten_tokens_is_captured():
    """The likeliest next tokens are as many as the vocabulary has (ten asked of a
    vocabulary of six raised RuntimeError: selected index k out of range)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = Tokenizer(
        models.WordLevel(
            {"<|endoftext|>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, unk_token="<|endoftext|>"
        )
    )
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    theirs = tiny("llama", vocab_size=6)
    run = attnviz.capture(theirs, "a b c d e a b", tokenizer=words)
    assert run.source_tokens == list("abcdeab")
    ids = torch.tensor([[1, 2, 3, 4, 5, 1, 2]])
    with torch.no_grad():
        expected = theirs(ids, output_attentions=True).attentions
    for layer, weights in enumerate(expected):
        assert (run.weights(layer) - weights[0]).abs().max() <= 1e-5
