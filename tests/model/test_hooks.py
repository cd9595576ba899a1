"""Hook points: their names, per-call capture, interventions, and isolation between calls."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

from attnviz.model import hooked
from attnviz.model.hooks import _ACTIVE

from .conftest import ARCH_CONFIGS, build

ATTENTION = [
    "hook_q",
    "hook_k",
    "hook_v",
    "hook_scores",
    "hook_mask",
    "hook_weights",
    "hook_context",
]


def _attn(prefix: str) -> list[str]:
    return [f"{prefix}.{hook}" for hook in ATTENTION]


PINNED = {
    "encoder-decoder": [
        "encoder.hook_embed",
        "encoder.hook_pos",
        *_attn("encoder.0.self_attn"),
        *_attn("encoder.1.self_attn"),
        "encoder.hook_out",
        "decoder.hook_embed",
        "decoder.hook_pos",
        *_attn("decoder.0.self_attn"),
        *_attn("decoder.0.cross_attn"),
        *_attn("decoder.1.self_attn"),
        *_attn("decoder.1.cross_attn"),
        "decoder.hook_out",
        "hook_logits",
    ],
    "encoder-only": [
        "encoder.hook_embed",
        "encoder.hook_type_embed",
        "encoder.hook_pos",
        *_attn("encoder.0.self_attn"),
        *_attn("encoder.1.self_attn"),
        "encoder.hook_out",
    ],
    "decoder-only": [
        "decoder.hook_embed",
        "decoder.hook_pos",  # rotary angles
        *_attn("decoder.0.self_attn"),
        *_attn("decoder.1.self_attn"),
        "decoder.hook_out",
        "hook_logits",
    ],
}


def _inputs(arch: str, seed: int = 0, length: int = 6):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (1, length), generator=g)
    return (ids, ids[:, :4]) if arch == "encoder-decoder" else (ids,)


@pytest.mark.parametrize("arch", PINNED)
def test_hook_names_are_pinned_for_each_architecture(arch):
    model = build(**ARCH_CONFIGS[arch])
    assert model.hook_names() == PINNED[arch]
    _, capture = model.run_with_capture(*_inputs(arch))
    assert sorted(capture) == sorted(PINNED[arch])  # every hook point fires in a forward pass


def test_positional_none_has_no_hook_pos():
    names = build(positional="none").hook_names()
    assert not any(n.endswith("hook_pos") for n in names)


def test_names_filter_selects_by_name_list_or_predicate():
    model = build()
    src, target = _inputs("encoder-decoder")
    _, one = model.run_with_capture(src, target, names_filter="decoder.1.cross_attn.hook_weights")
    assert list(one) == ["decoder.1.cross_attn.hook_weights"]
    assert one["decoder.1.cross_attn.hook_weights"].shape == (1, 4, 4, 6)
    wanted = ["encoder.hook_pos", "hook_logits"]
    _, some = model.run_with_capture(src, target, names_filter=wanted)
    assert sorted(some) == wanted
    _, masks = model.run_with_capture(src, target, names_filter=lambda n: n.endswith("hook_mask"))
    assert len(masks) == 6
    with pytest.raises(KeyError, match=r"encoder\.9\.self_attn\.hook_weights"):
        model.run_with_capture(src, target, names_filter=["encoder.9.self_attn.hook_weights"])


def test_captured_tensors_are_detached_copies_of_what_flowed():
    model = build()
    model.train(False)
    src, target = _inputs("encoder-decoder")
    with torch.enable_grad(), hooked(model, "hook_logits") as capture:
        logits = model(src, target)
    assert logits.requires_grad and not capture["hook_logits"].requires_grad
    assert torch.equal(capture["hook_logits"], logits.detach())


def _module_state(model):
    return {
        name: (
            sorted(vars(m)),
            len(m._forward_hooks),
            len(m._forward_pre_hooks),
        )
        for name, m in model.named_modules()
    }


def test_nothing_stays_on_the_model_after_a_call():
    model = build()
    src, target = _inputs("encoder-decoder")
    before = _module_state(model)
    plain = model(src, target)
    model.run_with_capture(src, target)
    model.run_with_hooks(src, target, fwd_hooks=[("hook_logits", lambda x, _: x * 0)])
    assert _module_state(model) == before
    assert _ACTIVE.get() == ()
    assert torch.equal(model(src, target), plain)


def test_the_capture_ends_even_when_the_forward_pass_fails():
    model = build(max_seq_len=8)
    with pytest.raises(ValueError), hooked(model) as capture:
        model(torch.randint(3, 40, (1, 20)), torch.randint(3, 40, (1, 3)))
    assert _ACTIVE.get() == ()
    assert "encoder.hook_embed" in capture  # what fired before the error is still there
    model(torch.randint(3, 40, (1, 5)), torch.randint(3, 40, (1, 3)))  # and outside: no capture
    assert len(capture) == 1


def test_hook_functions_can_ablate_a_head():
    model = build()
    src, target = _inputs("encoder-decoder")
    plain = model(src, target)

    def zero_head_0(weights, name):
        assert name == "decoder.1.cross_attn.hook_weights"
        weights = weights.clone()
        weights[:, 0] = 0
        return weights

    def observe(weights, name):
        return None  # returning None leaves the tensor as it was

    ablated = model.run_with_hooks(
        src, target, fwd_hooks=[("decoder.1.cross_attn.hook_weights", zero_head_0)]
    )
    observed = model.run_with_hooks(
        src, target, fwd_hooks=[("encoder.0.self_attn.hook_q", observe)]
    )
    assert not torch.allclose(ablated, plain)
    assert torch.equal(observed, plain)
    with pytest.raises(KeyError):
        model.run_with_hooks(src, target, fwd_hooks=[("decoder.7.hook_nothing", observe)])


def test_eight_threads_on_one_model_each_capture_only_their_own_tensors():
    model = build()
    inputs = [_inputs("encoder-decoder", seed=i, length=5 + i) for i in range(8)]
    expected = [model.run_with_capture(*args)[1] for args in inputs]
    barrier = threading.Barrier(8)
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = [model.run_with_capture(*inputs[i])[1] for _ in range(5)]
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that the calls interleave
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    for i in range(8):
        for capture in results[i]:
            assert sorted(capture) == sorted(expected[i])
            for name in capture:
                assert len(capture.all(name)) == 1, name  # fired once: no other call's firing
                assert capture[name].shape == expected[i][name].shape, name
                assert torch.allclose(capture[name], expected[i][name], atol=1e-6), name


def test_a_capture_sees_only_its_own_model():
    a, b = build(seed=1), build(seed=2)
    src, target = _inputs("encoder-decoder")
    with hooked(a, "hook_logits") as capture:
        from_a = a(src, target)
        b(src, target)  # the same hook names, another model: not captured
    assert len(capture.all("hook_logits")) == 1
    assert torch.equal(capture["hook_logits"], from_a)


def test_nested_blocks_each_get_what_they_asked_for():
    model = build()
    src, target = _inputs("encoder-decoder")
    with hooked(model, "hook_logits") as outer:
        with hooked(model, fwd_hooks=[("hook_logits", lambda x, _: x * 0)], capture=False):
            model(src, target)
        model(src, target)
    first, second = outer.all("hook_logits")
    assert torch.all(first == 0) and not torch.all(second == 0)


def test_a_submodule_can_be_the_root_with_names_from_it():
    model = build()
    src, target = _inputs("encoder-decoder")
    with hooked(model.encoder, "0.self_attn.hook_weights") as capture:
        model(src, target)
    assert list(capture) == ["0.self_attn.hook_weights"]
