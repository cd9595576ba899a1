"""A lean capture (model/lean.py) gives back every tensor of the capture it is made from,
bit for bit, while storing no attention scores or weights that it can recompute."""

from __future__ import annotations

import pytest
import torch

from attnviz.model.hooks import hooked
from attnviz.model.lean import LeanCapture, capture_bytes

from .conftest import ARCH_CONFIGS, build
from .test_hooks import _inputs


@pytest.mark.parametrize("arch", list(ARCH_CONFIGS))
def test_every_tensor_comes_back_bit_for_bit(arch):
    model = build(**ARCH_CONFIGS[arch])
    _, full = model.run_with_capture(*_inputs(arch, length=9))
    lean = LeanCapture(full)
    assert list(lean) == list(full) and len(lean) == len(full)
    for name in full:
        assert torch.equal(lean[name], full[name]), name
        assert len(lean.all(name)) == len(full.all(name))
    # every attention module's scores and weights are recomputed, nothing else
    recomputed = set(lean.recomputed)
    assert recomputed == {n for n in full if n.endswith(("hook_scores", "hook_weights"))}
    saved = sum(full[n].nbytes for n in recomputed)
    kept = 4 * max(full[n].nbytes for n in recomputed)  # the recent recomputed ones, at most
    assert capture_bytes(lean) == capture_bytes(full) - saved + kept
    with pytest.raises(TypeError):
        lean.add("x", torch.zeros(1))


def test_weights_computed_otherwise_stay_stored():
    """Where recomputing from q and k does not give the captured weights back (here a hook
    halved them in every layer, as a family computing them otherwise would), they stay."""
    model = build(**ARCH_CONFIGS["llama"])
    names = [f"decoder.{i}.self_attn.hook_weights" for i in range(2)]

    def halve(weights, name):
        return weights / 2

    with hooked(model, fwd_hooks=[(n, halve) for n in names]) as full:
        model(*_inputs("llama", length=7))
    lean = LeanCapture(full)
    assert not set(names) & set(lean.recomputed)
    assert all(torch.equal(lean[n], full[n]) for n in names)
    assert "decoder.0.self_attn.hook_scores" in lean.recomputed


def test_a_capture_of_cached_decoding_keeps_its_firings():
    model = build(**ARCH_CONFIGS["decoder-only"])
    ids = torch.tensor([[1, 2, 3, 4]])
    with hooked(model) as full:
        model(ids)
        model(ids[:, :2])  # two firings per hook: not a single pass, nothing recomputed
    lean = LeanCapture(full)
    assert lean.recomputed == []
    name = "decoder.0.self_attn.hook_weights"
    firings = zip(lean.all(name), full.all(name), strict=True)
    assert len(lean.all(name)) == 2 and all(torch.equal(a, b) for a, b in firings)
