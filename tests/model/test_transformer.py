"""The Transformer against the seed's code, and each configurable part on its own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnviz.model import ModelConfig, Transformer, generate_mask
from attnviz.model.layers import EncoderLayer, FeedForward, LayerNorm
from attnviz.model.transformer import SkipInit

from . import seed_reference as seed
from .conftest import LLAMA, build, tiny_config


def test_seed_main_demo_gives_logits_of_batch_by_target_len_by_vocab():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(max_seq_len=50))  # the seed's main.py hyper-parameters
    src = torch.randint(1, 100, (2, 10))
    target = torch.randint(1, 100, (2, 12))
    assert model(src, target).shape == (2, 12, 100)
    n_params = sum(p.numel() for p in model.parameters())
    reference = seed.Transformer(100, 100, 512, 8, 6, 2048, 50, 0.1)
    assert n_params == sum(p.numel() for p in reference.parameters())


def test_encoder_decoder_computes_exactly_what_the_seed_computes():
    reference = seed.Transformer(50, 40, dim=32, n_heads=4, n_layers=2, hidden_dim=64).eval()
    ours = Transformer(tiny_config(max_seq_len=5000)).eval()
    ours.load_state_dict(seed.to_ours(reference.state_dict()), strict=True)
    src = torch.randint(1, 50, (3, 9))
    src[1, 6:] = 0
    target = torch.randint(1, 40, (3, 7))
    target[2, 4:] = 0
    with torch.no_grad():
        expected = reference(src, target)
        got = ours(src, target)
    assert torch.equal(got, expected)  # the same operations in the same order


def test_generate_mask_equals_the_seeds():
    src = torch.tensor([[5, 6, 0], [7, 0, 0]])
    target = torch.tensor([[3, 4, 5, 0], [3, 0, 0, 0]])
    ours = generate_mask(src, target)
    theirs = seed.Transformer.generate_mask(None, src, target)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)


def test_configurable_pad_id_masks_that_id():
    model = build(pad_id=7)
    src = torch.tensor([[3, 4, 7, 7]])
    _, capture = model.run_with_capture(src, torch.tensor([[1, 5]]))
    weights = capture["encoder.0.self_attn.hook_weights"]
    assert torch.all(weights[..., 2:] == 0) and torch.all(weights[..., :2] > 0)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("eps", [1e-6, 1e-12])
def test_layer_norm_equals_torch_with_its_eps(eps, fused):
    norm = LayerNorm(16, eps, fused)
    with torch.no_grad():
        norm.gamma.uniform_(0.5, 1.5)
        norm.beta.uniform_(-1, 1)
    x = torch.randn(2, 5, 16) * 3 + 1
    expected = F.layer_norm(x, (16,), norm.gamma, norm.beta, eps)
    assert (norm(x) - expected).abs().max() <= 1e-5


def test_gelu_feed_forward_uses_exact_gelu():
    ffn = FeedForward(8, 16, dropout=0.0, activation="gelu")
    x = torch.randn(3, 8)
    assert torch.allclose(ffn(x), ffn.w2(F.gelu(ffn.w1(x))))


def test_pre_ln_layer_normalises_before_each_sublayer():
    layer = EncoderLayer(tiny_config(norm_placement="pre")).eval()
    x = torch.randn(2, 5, 32)
    h = x + layer.self_attn(layer.self_attn_norm(x))
    expected = h + layer.feed_forward(layer.ffn_norm(h))
    assert torch.allclose(layer(x, None), expected, atol=1e-6)


def test_post_ln_layer_normalises_after_each_residual():
    layer = EncoderLayer(tiny_config()).eval()
    x = torch.randn(2, 5, 32)
    h = layer.self_attn_norm(x + layer.self_attn(x))
    expected = layer.ffn_norm(h + layer.feed_forward(h))
    assert torch.allclose(layer(x, None), expected, atol=1e-6)


def test_pre_ln_stacks_end_with_a_final_norm():
    model = build(norm_placement="pre")
    assert isinstance(model.encoder.final_norm, LayerNorm)
    assert isinstance(model.decoder.final_norm, LayerNorm)
    assert build().encoder.final_norm is None


def test_encoder_only_uses_token_types_and_returns_hidden_states():
    model = build(
        architecture="encoder-only", positional="learned", type_vocab_size=2, embed_norm=True
    )
    assert not hasattr(model, "decoder")
    ids = torch.randint(1, 50, (2, 6))
    plain = model(ids)
    assert plain.shape == (2, 6, 32)
    types = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    assert torch.equal(model(ids, token_type_ids=torch.zeros_like(ids)), plain)
    assert not torch.allclose(model(ids, token_type_ids=types), plain)


def test_decoder_only_logits_never_depend_on_later_tokens():
    model = build(architecture="decoder-only", positional="learned")
    assert not hasattr(model, "encoder")
    ids = torch.randint(3, 40, (1, 10))
    changed = ids.clone()
    changed[0, 6:] = torch.randint(3, 40, (4,))
    a, b = model(ids), model(changed)
    assert a.shape == (1, 10, 40)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_encoder_without_positions_is_permutation_equivariant():
    model = build(architecture="encoder-only", positional="none")
    ids = torch.tensor([[5, 9, 12, 20]])
    permuted = ids[:, [2, 0, 3, 1]]
    # permutation-equivariant: the seed's 猫追狗 / 狗追猫 problem
    assert torch.allclose(model(ids)[:, [2, 0, 3, 1]], model(permuted), atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=30, n_heads=4), "divisible"),
        (dict(architecture="seq2seq"), "architecture"),
        (dict(positional="alibi"), "positional"),
        (dict(d_model=12, n_heads=4, positional="rotary"), "even head dimension"),
        (dict(dropout=1.0), "dropout"),
        (dict(n_heads=0), "must be positive"),
    ],
)
def test_invalid_configs_are_refused_with_a_reason(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config(**{**LLAMA, "rope_theta": 500.0})
    config.save(tmp_path / "config.json")
    assert ModelConfig.load(tmp_path / "config.json") == config
    with pytest.raises(ValueError, match="unknown fields"):
        ModelConfig.from_dict({**config.to_dict(), "alibi": True})
    with pytest.raises(ValueError, match="n_heads must be a multiple of n_kv_heads"):
        tiny_config(n_kv_heads=3)  # 4 query heads cannot share 3 key/value heads
    with pytest.raises(ValueError, match="tied embeddings need a decoder"):
        tiny_config(architecture="encoder-only", tie_embeddings=True)


def test_decoding_checks_the_encoder_memory_it_is_given():
    enc_dec = build()
    with pytest.raises(ValueError, match="encoder-decoder model needs encoder memory"):
        enc_dec.decode(torch.tensor([[1, 5]]))
    dec_only = build(architecture="decoder-only")
    with pytest.raises(ValueError, match="decoder-only model takes no encoder memory"):
        dec_only.decode(torch.tensor([[1, 5]]), memory=torch.zeros(1, 3, 32))


def test_a_model_built_for_loaded_weights_draws_no_random_numbers_and_others_still_do():
    """`init=False` skips the initialisers (the global RNG is left as it was), on its own
    thread only: a model built with its initialisation on another thread at the same time
    is initialised as ever (the untrained twins are built beside loaded models)."""
    import threading

    config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, max_seq_len=16)
    torch.manual_seed(0)
    expected = Transformer(config).state_dict()
    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    inside, done = threading.Event(), threading.Event()

    class Held(SkipInit):  # (its thread held inside the skipping mode until `done`)
        def __torch_function__(self, func, types, args=(), kwargs=None):
            inside.set()
            done.wait(30)
            return super().__torch_function__(func, types, args, kwargs)

    def loaded() -> None:
        with Held():
            Transformer(config, init=False)

    thread = threading.Thread(target=loaded)
    thread.start()
    assert inside.wait(30)
    torch.manual_seed(0)
    initialised = Transformer(config)  # (the other thread inside its mode all along)
    done.set()
    thread.join()
    for name, tensor in initialised.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    torch.manual_seed(1)
    Transformer(config, init=False)
    assert torch.equal(torch.random.get_rng_state(), before)
