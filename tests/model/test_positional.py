"""Positional encodings: the seed's sinusoidal table, learned tables, RoPE's relativity."""

from __future__ import annotations

import math

import pytest
import torch

from attnviz.model.positional import RotaryPositions, apply_rotary, sinusoidal_table

from .conftest import build
from .seed_reference import PositionalEncoding


def test_sinusoidal_table_equals_the_formula_element_by_element():
    max_len, dim = 60, 16
    table = sinusoidal_table(max_len, dim)
    for pos in range(max_len):
        for i in range(dim // 2):
            angle = pos / 10000 ** (2 * i / dim)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=2e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=2e-6)


def test_sinusoidal_table_is_bit_identical_to_the_seeds_buffer():
    assert torch.equal(sinusoidal_table(500, 64), PositionalEncoding(64, 500).pe[0])


def test_the_encoder_adds_the_table_it_shows_on_hook_pos():
    model = build()
    src = torch.randint(1, 50, (2, 11))
    _, capture = model.run_with_capture(src, torch.randint(1, 40, (2, 4)))
    assert torch.equal(capture["encoder.hook_pos"], sinusoidal_table(128, 32)[:11])
    assert torch.equal(capture["decoder.hook_pos"], sinusoidal_table(128, 32)[:4])
    expected = model.encoder.tok_embed(src) * math.sqrt(32)
    assert torch.allclose(capture["encoder.hook_embed"], expected)


def test_learned_positions_show_their_own_weights():
    model = build(architecture="encoder-only", positional="learned")
    _, capture = model.run_with_capture(torch.randint(1, 50, (1, 9)))
    assert torch.equal(capture["encoder.hook_pos"], model.encoder.pos.embedding.weight[:9])


def test_rope_score_depends_only_on_relative_position():
    head_dim = 16
    rope = RotaryPositions(head_dim, max_seq_len=512)
    q, k = torch.randn(head_dim), torch.randn(head_dim)

    def score(m: int, n: int) -> float:
        rq = apply_rotary(q.view(1, 1, 1, -1), rope.angles(m, 1))
        rk = apply_rotary(k.view(1, 1, 1, -1), rope.angles(n, 1))
        return (rq * rk).sum().item()

    for m, n in [(0, 0), (3, 1), (5, 9), (40, 2)]:
        for shift in (1, 17, 300):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)  # distance does matter


def test_rope_rotation_keeps_vector_norms():
    rope = RotaryPositions(8, max_seq_len=64)
    x = torch.randn(2, 3, 20, 8)
    rotated = apply_rotary(x, rope.angles(7, 20))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_rotary_model_shows_angles_and_adds_nothing():
    model = build(architecture="decoder-only", positional="rotary")
    ids = torch.randint(1, 40, (1, 6))
    _, capture = model.run_with_capture(ids)
    angles = capture["decoder.hook_pos"]
    assert angles.shape == (6, 4)  # (T, d_head / 2)
    inv_freq = 1 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    assert torch.allclose(angles, torch.outer(torch.arange(6).float(), inv_freq))
    # nothing is added to the embeddings: the first layer's v is a plain projection of them
    v = model.decoder.get_submodule("0.self_attn").wv(capture["decoder.hook_embed"])
    assert torch.allclose(capture["decoder.0.self_attn.hook_v"][0, 0], v[0, :, :8], atol=1e-6)


def test_positions_past_the_maximum_are_a_clear_error():
    model = build(max_seq_len=16)
    with pytest.raises(ValueError, match="exceeds the model's max_seq_len of 16"):
        model(torch.randint(1, 50, (1, 17)), torch.randint(1, 40, (1, 3)))
