"""Incremental decoding through the KV cache against full recomputation."""

from __future__ import annotations

import pytest
import torch

from attnviz.model import DecoderCache, hooked

from .conftest import LLAMA, build

STEPS = 50


def _model(arch: str, positional: str):
    overrides = dict(positional=positional, max_seq_len=STEPS + 8)
    if arch == "decoder-only":
        overrides.update(architecture="decoder-only", norm_placement="pre")
    elif arch == "llama":
        overrides.update({**LLAMA, "positional": positional})
    # eos outside the vocabulary: greedy decoding runs all STEPS steps
    return build(seed=3, eos_id=10_000, **overrides)


def _src():
    src = torch.randint(3, 50, (2, 9))
    src[1, 5:] = 0
    return src


CASES = [
    ("encoder-decoder", "sinusoidal"),
    ("encoder-decoder", "rotary"),
    ("decoder-only", "rotary"),
    ("decoder-only", "learned"),
    ("llama", "rotary"),
]


@pytest.mark.parametrize("arch, positional", CASES)
def test_token_by_token_with_the_cache_equals_full_recomputation(arch, positional):
    model = _model(arch, positional)
    target = torch.randint(3, 40, (2, STEPS))
    target[0, 40:] = 0  # a padded tail: cached keys must stay masked too
    memory = src_mask = None
    if arch == "encoder-decoder":
        src = _src()
        full = model(src, target)
        src_mask = (src != 0)[:, None, None, :]
        memory = model.encode(src)
    else:
        full = model(target)
    cache = DecoderCache(model.config.decoder_layers)
    with torch.no_grad():
        steps = [
            model.logits(model.decode(target[:, t : t + 1], memory, src_mask, cache=cache))
            for t in range(STEPS)
        ]
    incremental = torch.cat(steps, dim=1)
    assert cache.length == STEPS
    assert (incremental - full).abs().max() <= 1e-5


@pytest.mark.parametrize("arch, positional", CASES)
def test_greedy_decoding_with_and_without_the_cache_agree(arch, positional):
    model = _model(arch, positional)
    kwargs = (
        {"src": _src()} if arch == "encoder-decoder" else {"prefix": torch.tensor([[1, 7], [1, 9]])}
    )
    cached = model.greedy_decode(**kwargs, max_new_tokens=STEPS, use_cache=True)
    plain = model.greedy_decode(**kwargs, max_new_tokens=STEPS, use_cache=False)
    assert cached.logits.shape == (2, STEPS, 40)
    assert torch.equal(cached.tokens, plain.tokens)
    assert (cached.logits - plain.logits).abs().max() <= 1e-5


def test_hooks_see_the_cached_key_positions_at_every_step():
    model = _model("encoder-decoder", "sinusoidal")
    src = _src()
    with hooked(model, lambda n: n.startswith("decoder.1.")) as capture:
        result = model.greedy_decode(src, max_new_tokens=6)
    ks = capture.all("decoder.1.self_attn.hook_k")
    assert [k.shape[2] for k in ks] == [1, 2, 3, 4, 5, 6]  # the KV cache grows by one each step
    assert all(q.shape == (2, 4, 1, 8) for q in capture.all("decoder.1.self_attn.hook_q"))
    weights = capture.all("decoder.1.self_attn.hook_weights")
    assert [p.shape[-1] for p in weights] == [1, 2, 3, 4, 5, 6]
    assert [m.shape for m in capture.all("decoder.1.self_attn.hook_mask")][-1] == (2, 1, 1, 6)
    assert all(k.shape == (2, 4, 9, 8) for k in capture.all("decoder.1.cross_attn.hook_k"))
    # the keys the last step attended to are the keys a full pass computes
    _, full = model.run_with_capture(
        src, result.tokens[:, :6], names_filter="decoder.1.self_attn.hook_k"
    )
    assert (ks[-1] - full["decoder.1.self_attn.hook_k"]).abs().max() <= 1e-5


def test_cross_attention_keys_and_values_are_computed_once_per_source():
    model = _model("encoder-decoder", "sinusoidal")
    calls = []
    handle = model.decoder.get_submodule("0.cross_attn.wk").register_forward_hook(
        lambda *_: calls.append(1)
    )
    try:
        model.greedy_decode(_src(), max_new_tokens=10, use_cache=True)
        assert len(calls) == 1
        calls.clear()
        model.greedy_decode(_src(), max_new_tokens=10, use_cache=False)
        assert len(calls) == 10
    finally:
        handle.remove()


def test_rows_that_finish_continue_with_padding():
    model = build(seed=5)
    src = torch.randint(3, 50, (4, 6))
    first = model.greedy_decode(src, max_new_tokens=8).tokens
    eos = int(first[0, 3])  # make a token this model emits act as end-of-sequence
    model = build(seed=5, eos_id=eos)
    tokens = model.greedy_decode(src, max_new_tokens=8).tokens
    assert (tokens[0, 1:4] == eos).any()
    for row in tokens:
        hits = (row[1:] == eos).nonzero()
        if len(hits):
            assert torch.all(row[int(hits[0]) + 2 :] == 0)
    if tokens.size(1) < 9:  # stopped early: only when every row has finished
        assert (tokens[:, 1:] == eos).any(dim=1).all()


def test_greedy_decoding_never_predicts_padding():
    model = _model("encoder-decoder", "sinusoidal")
    with torch.no_grad():
        model.output.bias[model.config.pad_id] = 1e4  # padding would win every argmax
    tokens = model.greedy_decode(_src(), max_new_tokens=5).tokens
    assert tokens.shape == (2, 6) and torch.all(tokens[:, 1:] != model.config.pad_id)
