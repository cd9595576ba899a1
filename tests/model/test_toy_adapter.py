"""A family of pretrained weights on our model code is its module and one line
(tests/toy_adapter.py, put in `ADAPTERS` here as adapters.py's line would): a tiny Phi-3
folder is then read by our model code, chosen as its backend, checked without its weights,
and equal to transformers' Phi3ForCausalLM on the same weights."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from attnviz.model.pretrained import adapters
from attnviz.model.pretrained.backends import choose
from attnviz.model.pretrained.sources import load_origin, peek_origin
from harness.checkpoints import PROMPTS, VOCAB, saved
from tests import toy_adapter
from tests.model.test_hf import matches


@pytest.fixture
def phi3(tmp_path, monkeypatch):
    import transformers

    monkeypatch.setitem(adapters.ADAPTERS, "phi3", toy_adapter.ADAPTER)  # (its one line)
    config = transformers.Phi3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, eos_token_id=0, bos_token_id=0, pad_token_id=None,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = transformers.Phi3ForCausalLM(config).eval()
    return theirs, saved(tmp_path, theirs)


def test_a_toy_family_is_its_module_and_one_line(phi3):
    theirs, folder = phi3
    assert choose("phi3").backend == "ours"
    config, origin, key, _ = peek_origin(folder)  # (headers only)
    assert (origin.model_type, key, config.n_kv_heads) == ("phi3", "phi3", 2)
    runner, origin = load_origin(folder)
    assert origin.backend == "ours"
    for prompt in PROMPTS:
        matches(runner, theirs, prompt)


def test_without_its_line_the_family_is_not_ours():
    assert "phi3" not in adapters.ADAPTERS
    assert choose("phi3").backend == "transformers"
