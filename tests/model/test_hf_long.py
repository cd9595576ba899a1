"""Long inputs on transformers' own code (model/hf/long.py): each attention call by torch's
fused kernel, its queries and keys kept with its mask described, never an N x N matrix,
and any window of a head recomputed; against transformers' eager attention of the same
tiny random models (Llama, Qwen2 with its biases, Mistral with a sliding window shorter
than the prompt), and its own `generate`."""

from __future__ import annotations

import pytest
import torch

from attnviz.model.hf.loading import load_transformers
from attnviz.model.long import LongCapture, MaskRule
from attnviz.model.long.reading import LONG_FROM
from harness.checkpoints import VOCAB, saved, tiny

from .test_long import pooled_reference

N = 700  # past LONG_FROM: the long path
WINDOW = 100
FAMILIES = {"llama": {}, "qwen2": {}, "mistral": {"sliding_window": WINDOW}}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    extra = {"max_position_embeddings": 2048, **FAMILIES[request.param]}
    folder = saved(tmp_path_factory.mktemp(request.param), tiny(request.param, **extra))
    ours = load_transformers(folder, request.param).read_long(1 << 30)
    theirs = tiny(request.param, **extra)  # a model of its own, eager attention
    ids = torch.randint(0, VOCAB, (N,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        expected = theirs(torch.tensor([ids]), output_attentions=True)
    return request.param, theirs, ours, ids, expected


def test_its_long_pass_keeps_no_square_matrix_and_predicts_as_transformers(family):
    name, _theirs, ours, ids, expected = family
    assert ours.model.long_refusal is None
    assert ours.max_tokens == 2048  # its context (the capture fits)
    result = ours.result("", ids, [])
    capture = result.capture
    assert isinstance(capture, LongCapture) and N > LONG_FROM
    largest = max(t.numel() for n in capture for t in capture.all(n))
    assert largest < N * N / 4
    vocabulary = ours.target_vocabulary()
    assert result.predicted_tokens == [vocabulary[int(i)] for i in expected.logits[0].argmax(-1)]
    rule = capture.attention["decoder.0.self_attn"].mask
    window = WINDOW if name == "mistral" else None
    assert rule == MaskRule(N, N, causal=True, window=window)


def test_every_heads_window_is_transformers_eager_attention(family):
    name, _theirs, ours, ids, expected = family
    capture = ours.result("", ids, []).capture
    for layer, weights in enumerate(expected.attentions):
        heads = capture.attention[f"decoder.{layer}.self_attn"]
        for head in range(weights.size(1)):
            got, _, _ = heads.window("weights", head, (0, N), (0, N))
            assert float((got - weights[0, head]).abs().max()) <= 1e-5, (name, layer, head)
    exact = expected.attentions[1][0, 3]
    got, rows, cols = heads.window("weights", 3, (0, N), (0, N), pool=64, reduce="max")
    assert float((got.double() - pooled_reference(exact, rows, cols, "max")).abs().max()) <= 1e-5
    mask, _, _ = heads.window("mask", 3, (0, N), (0, N))
    query, key = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allowed = key <= query  # the definition: itself and what came before (in the window)
    if name == "mistral":
        allowed &= key > query - WINDOW
    assert mask.bool().equal(allowed)


def test_a_long_prompt_generates_as_transformers_generate(family):
    name, theirs, ours, ids, _ = family
    steps = [s.token_id for s in ours.generate(ids, 4, stop=False)]
    with torch.no_grad():
        out = theirs.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False,
                              min_new_tokens=4, pad_token_id=0)  # fmt: skip
    assert steps == out[0, N:].tolist(), name


def test_a_model_whose_attention_adds_soft_capping_keeps_512(tmp_path):
    from harness.architectures import build

    build("gemma2", "decoder-only", tmp_path / "gemma2")
    runner = load_transformers(tmp_path / "gemma2", "gemma2")
    assert "soft-capping" in (runner.model.long_refusal or "")
    assert runner.read_long(1 << 30).max_tokens == runner.max_tokens


def test_generation_rows_read_each_layers_own_mask_and_scaling(tmp_path):
    """Gemma 3: sliding-window layers (6 keys) beside full ones, and scores scaled by its
    query_pre_attn_scalar, not 1/sqrt(d): each step's new row as eager attention has it."""
    from harness.architectures import build, reference

    build("gemma3_text", "decoder-only", tmp_path / "gemma3")
    runner = load_transformers(tmp_path / "gemma3", "gemma3_text")
    theirs = reference("gemma3_text", "decoder-only", tmp_path / "gemma3", eager=True)
    ids = [(5 * i + 3) % VOCAB for i in range(20)]
    steps = list(runner.generate(ids, 3, rows=True, stop=False))
    sequence = ids + [s.token_id for s in steps]
    for step in steps:
        keys = step.index  # the query: the newest token fed, at position index - 1
        with torch.no_grad():
            expected = theirs(torch.tensor([sequence[:keys]]), output_attentions=True)
        for layer, weights in enumerate(expected.attentions):
            row = step.rows[f"decoder.{layer}.self_attn.hook_weights"][0, :, 0]
            assert float((row - weights[0, :, -1]).abs().max()) <= 1e-5, (step.index, layer)
