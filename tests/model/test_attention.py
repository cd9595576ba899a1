"""Our attention against PyTorch's, and the properties every mask must give the weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnviz.model import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from attnviz.model.attention import masked_softmax
from attnviz.model.hooks import hooked

from .conftest import build

B, T, D, H = 3, 7, 32, 4


def _ids() -> torch.Tensor:
    ids = torch.randint(1, 50, (B, T))
    ids[1, 5:] = 0  # padding at the end of row 1
    ids[2, 3:] = 0  # and of row 2
    return ids


def _mask(kind: str, ids: torch.Tensor) -> torch.Tensor:
    pad = padding_mask(ids)  # (B, 1, 1, T)
    causal = causal_mask(T)  # (T, T)
    return {"padding": pad, "causal": causal, "combined": pad & causal}[kind]


MASKS = ["padding", "causal", "combined"]


@pytest.mark.parametrize("kind", MASKS)
def test_scaled_dot_product_attention_equals_torch_sdpa(kind):
    q, k, v = (torch.randn(B, H, T, D // H) for _ in range(3))
    mask = _mask(kind, _ids())
    ours, weights = scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours - theirs).abs().max() <= 1e-5
    assert torch.allclose(weights.sum(-1), torch.ones(B, H, T))


@pytest.mark.parametrize("kind", MASKS)
def test_multi_head_attention_equals_torch_sdpa_on_our_projections(kind):
    mha = MultiHeadAttention(D, H, dropout=0.0).eval()
    x = torch.randn(B, T, D)
    mask = _mask(kind, _ids())
    split = mha.split_heads
    context = F.scaled_dot_product_attention(
        split(mha.wq(x)), split(mha.wk(x)), split(mha.wv(x)), attn_mask=mask
    )
    expected = mha.wo(context.transpose(1, 2).reshape(B, T, D))
    assert (mha(x, mask=mask) - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("kind", MASKS)
def test_multi_head_attention_equals_torch_multihead_attention(kind):
    ours = MultiHeadAttention(D, H, dropout=0.0).eval()
    theirs = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.wq.weight, ours.wk.weight, ours.wv.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.wq.bias, ours.wk.bias, ours.wv.bias]))
        theirs.out_proj.weight.copy_(ours.wo.weight)
        theirs.out_proj.bias.copy_(ours.wo.bias)
    x, ids = torch.randn(B, T, D), _ids()
    # torch's masks are the other way round: True means "must not attend".
    key_padding = (ids == 0) if kind in ("padding", "combined") else None
    attn_mask = ~causal_mask(T) if kind in ("causal", "combined") else None
    expected, expected_weights = theirs(
        x, x, x, key_padding_mask=key_padding, attn_mask=attn_mask, average_attn_weights=False
    )
    with hooked(ours, "hook_weights") as capture:
        out = ours(x, mask=_mask(kind, ids))
    assert (out - expected).abs().max() <= 1e-5
    assert (capture["hook_weights"] - expected_weights).abs().max() <= 1e-5


def _padded_batch():
    src = torch.randint(3, 50, (2, 9))
    src[1, 6:] = 0
    target = torch.randint(3, 40, (2, 8))
    target[0, 5:] = 0
    return src, target


def test_weight_rows_sum_to_one():
    model = build()
    src, target = _padded_batch()
    _, capture = model.run_with_capture(
        src, target, names_filter=lambda n: n.endswith("hook_weights")
    )
    assert len(capture) == 6  # 2 encoder self, 2 decoder self, 2 cross
    for name, weights in capture.items():
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6), name


def test_padded_keys_get_exactly_zero_weight():
    model = build()
    src, target = _padded_batch()
    _, capture = model.run_with_capture(src, target)
    for name in ("encoder.0.self_attn.hook_weights", "decoder.1.cross_attn.hook_weights"):
        weights = capture[name]
        assert torch.all(weights[1, :, :, 6:] == 0), name
        assert torch.all(weights[1, :, :, :6] > 0), name
    self_weights = capture["decoder.0.self_attn.hook_weights"]
    assert torch.all(self_weights[0, :, :, 5:] == 0)
    # the captured mask is the one applied, per query row and key column
    mask = capture["encoder.1.self_attn.hook_mask"]
    assert mask.shape == (2, 1, 9, 9) and mask.dtype == torch.bool
    assert torch.equal(mask[1, 0, 0], src[1] != 0)


def test_nothing_above_the_diagonal_under_a_causal_mask():
    model = build()
    src, target = _padded_batch()
    _, capture = model.run_with_capture(src, target)
    for layer in (0, 1):
        weights = capture[f"decoder.{layer}.self_attn.hook_weights"]
        above = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)
        assert torch.all(weights[..., above] == 0)
        assert torch.all(weights[1][..., ~above] > 0)  # row 1 has no padding
        scores = capture[f"decoder.{layer}.self_attn.hook_scores"]
        assert torch.isfinite(scores).all()  # scores are captured before the mask


def test_a_row_with_every_key_masked_gets_zero_weights_not_nan():
    q, k = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[True, True, False], [False, False, False]]).view(1, 1, 2, 3)
    context, weights = scaled_dot_product_attention(q, k, k, mask)
    assert torch.all(context[0, 0, 1] == 0)
    assert torch.all(weights[0, 0, 1] == 0)
    assert torch.isclose(weights[0, 0, 0].sum(), torch.tensor(1.0))


def test_masked_softmax_edges_an_open_mask_and_a_row_with_no_key():
    scores = torch.randn(2, 3, 4, 5, requires_grad=True)
    open_mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    assert torch.equal(masked_softmax(scores, open_mask), torch.softmax(scores, dim=-1))
    mask = open_mask.clone()
    mask[1, 0, 2] = False  # query 2 of the second row may attend to nothing
    mask[0, 0, :, 3:] = False
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[1, :, 2] == 0) and not torch.isnan(weights).any()
    assert torch.allclose(weights[0].sum(-1), torch.ones(3, 4)) and torch.all(
        weights[0, ..., 3:] == 0
    )
    expected = torch.softmax(scores[0, ..., :3], dim=-1)
    assert torch.allclose(weights[0, ..., :3], expected, atol=1e-7)
    weights.sum().backward()  # trainable through both paths
    assert torch.isfinite(scores.grad).all()
