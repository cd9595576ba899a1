"""SmolLM2-135M-Instruct on our model code (RMSNorm, SwiGLU, grouped-query attention, RoPE,
tied embeddings), against transformers' LlamaForCausalLM loaded from the same GGUF file
(eager attention, float32): weights, every head's attention, logits, greedy generation,
cached decoding, and the tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the installed package

import numpy as np
import pytest
import torch

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.bytelevel import readable, visible
from attnviz.model.pretrained.causal import CausalLM, Sampling
from attnviz.model.pretrained.llama import map_llama_state, smollm2_path, unpermute
from harness.references import smollm2

try:
    PATH = smollm2_path()
except CheckpointError as missing:  # the project's install puts it there; say so if not
    pytest.skip(f"SmolLM2 is not installed: {missing}", allow_module_level=True)

LAYERS, HEADS, KV_HEADS = 30, 9, 3
SHORT = "The capital of France is"
# a long prompt: 512 tokens of prose, code and numbers
LONG_TEXT = (
    "Attention lets every token look at every earlier one. In 2017 the Transformer replaced "
    "recurrence with it; def attend(q, k, v): return softmax(q @ k.T / 8) @ v  # 64 dims\n"
) * 40
CORPUS = [
    SHORT,
    "他在银行工作，每天走路上班。苹果公司发布了新款手机。",
    "Emoji: 🤖🚀 and 👩‍💻 (a ZWJ sequence), café, naïve, Ελληνικά, русский.",
    "def f(x):\n    return x ** 2  # square\n\n\tindented\r\nwindows line",
    "runs   of    spaces,\u00a0a no-break space, trailing   ",
    "Numbers: 3.14159, 2,000,000, 1e-5, v2.0.1, 12:30, 2026-12-01",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "x**2  123456 and a  1 b   22",
]


@pytest.fixture(scope="module")
def lm() -> CausalLM:
    return CausalLM.load()


@pytest.fixture(scope="module")
def reference():
    return smollm2.model()  # (transformers' reading of the GGUF file, kept)


@pytest.fixture(scope="module")
def hf_tokenizer():
    return smollm2.tokenizer()


def test_the_configuration_is_smollm2s(lm):
    cfg = lm.model.config
    assert (cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_model, cfg.d_ff) == (30, 9, 3, 576, 1536)
    assert (cfg.norm, cfg.activation, cfg.gated_ffn, cfg.positional) == (
        "rmsnorm",
        "silu",
        True,
        "rotary",
    )
    assert cfg.rope_theta == 100000.0 and cfg.tie_embeddings and not cfg.bias
    assert lm.model.output.weight is lm.model.decoder.tok_embed.weight  # one matrix
    assert sum(p.numel() for p in lm.model.parameters()) == 134_515_008
    spec = lm.attention[0]
    assert (spec.type, spec.layers, spec.query_heads, spec.kv_heads) == ("decoder.self", 30, 9, 3)


def test_every_weight_equals_transformers_and_each_tensor_is_used_once(lm, reference):
    ours = lm.model.state_dict()
    theirs = reference.state_dict()
    pairs = {
        "model.embed_tokens.weight": "decoder.tok_embed.weight",
        "model.norm.weight": "decoder.final_norm.weight",
        "lm_head.weight": "output.weight",
    }
    names = {
        "self_attn.q_proj": "self_attn.wq", "self_attn.k_proj": "self_attn.wk",
        "self_attn.v_proj": "self_attn.wv", "self_attn.o_proj": "self_attn.wo",
        "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
        "mlp.down_proj": "feed_forward.w2", "input_layernorm": "self_attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }  # fmt: skip
    for i in range(LAYERS):
        for hf, us in names.items():
            pairs[f"model.layers.{i}.{hf}.weight"] = f"decoder.{i}.{us}.weight"
    assert set(pairs) == set(theirs) and set(pairs.values()) == set(ours)
    for hf, us in pairs.items():
        assert torch.equal(ours[us], theirs[hf]), hf  # Q and K rows un-permuted as theirs
    # the checked mapping refuses a tensor too many and a tensor missing
    tensors = {"token_embd.weight": ours["decoder.tok_embed.weight"]}
    with pytest.raises(CheckpointError, match="nothing fills"):
        map_llama_state(tensors, lm.model)
    with pytest.raises(CheckpointError, match=r"blk\.0\.attn_rot\.weight has no place"):
        map_llama_state({**tensors, "blk.0.attn_rot.weight": torch.zeros(1)}, lm.model)


def test_unpermute_undoes_llama_cpps_rotary_permutation():
    """llama.cpp's convert_hf_to_gguf.py `permute`, applied then undone."""
    weight = np.arange(576 * 8, dtype=np.float32).reshape(576, 8)
    for heads in (HEADS, KV_HEADS):
        rows = weight[: heads * 64]
        permuted = (
            rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:])
            .swapaxes(1, 2)
            .reshape(rows.shape)
        )
        assert not np.array_equal(permuted, rows)
        assert np.array_equal(unpermute(permuted, heads), rows)


@pytest.mark.parametrize("text", [SHORT, LONG_TEXT], ids=["short", "512"])
def test_every_heads_attention_and_the_logits_match_transformers(lm, reference, text):
    ids = lm.tokenize(text)[0]
    assert len(ids) == (5 if text == SHORT else 512)
    batch = torch.tensor([ids])
    with torch.no_grad():
        expected = reference(batch, output_attentions=True)
    logits, capture = lm.model.run_with_capture(batch, names_filter=lambda n: "weights" in n)
    worst = max(
        float((capture[f"decoder.{i}.self_attn.hook_weights"] - expected.attentions[i]).abs().max())
        for i in range(LAYERS)
    )
    assert capture["decoder.0.self_attn.hook_weights"].shape == (1, HEADS, len(ids), len(ids))
    assert worst <= 1e-4, worst
    assert float((logits - expected.logits).abs().max()) <= 1e-3


def test_a_greedy_continuation_is_transformers(lm, reference):
    ids = lm.tokenize(SHORT)[0]
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([ids]), max_new_tokens=32, do_sample=False, eos_token_id=None
        )[0, len(ids) :].tolist()
    ours = []
    for step in lm.generate(ids, 32):
        ours.append(step.token_id)
    stop = next((i for i, t in enumerate(expected) if t in lm.stop_ids), len(expected))
    assert ours == expected[: stop + 1]
    assert lm.tokenizer.decode(ours).startswith(" Paris")


def test_cached_decoding_equals_recomputing_everything(lm):
    ids = lm.tokenize("Grouped-query attention shares keys between heads, so")[0]
    steps = list(lm.generate(ids, 12, rows=True))
    generated = [s.token_id for s in steps]
    full = lm.result("", ids, generated)
    names = [f"decoder.{i}.self_attn.hook_weights" for i in range(LAYERS)]
    for step in steps:
        query = step.index - 1  # the position fed at that step
        for name in names:
            row = full.capture[name][:, :, query : query + 1, : query + 1]
            assert step.rows[name].shape == row.shape
            assert float((step.rows[name] - row).abs().max()) <= 1e-5
    with torch.no_grad():
        logits = lm.model(torch.tensor([[*ids, *generated]]))[0]
    for step in steps:
        probs = torch.softmax(logits[step.index - 1], -1)
        assert abs(float(probs[step.token_id]) - step.probability) <= 1e-5
        assert step.top[0][0] == int(probs.argmax())


def test_grouped_query_heads_read_their_shared_key_value_head(lm):
    ids = lm.tokenize(SHORT)[0]
    _, capture = lm.model.run_with_capture(torch.tensor([ids]))
    q = capture["decoder.3.self_attn.hook_q"]
    k = capture["decoder.3.self_attn.hook_k"]
    assert q.shape == (1, HEADS, 5, 64) and k.shape == (1, KV_HEADS, 5, 64)
    scores = capture["decoder.3.self_attn.hook_scores"]
    for h in range(HEADS):
        expected = q[0, h] @ k[0, h // 3].T / 8
        assert torch.allclose(scores[0, h], expected, atol=1e-5)


def test_sampling_is_seeded_and_cut_as_asked(lm):
    ids = lm.tokenize("Once upon a time")[0]
    warm = Sampling(temperature=0.9, top_k=40, top_p=0.9, seed=7)
    first = [s.token_id for s in lm.generate(ids, 12, warm)]
    again = [s.token_id for s in lm.generate(ids, 12, warm)]
    other = [s.token_id for s in lm.generate(ids, 12, Sampling(temperature=0.9, seed=8))]
    greedy = [s.token_id for s in lm.generate(ids, 12)]
    assert first == again and first != other
    assert [s.token_id for s in lm.generate(ids, 12, Sampling(temperature=1.0, top_k=1))] == greedy
    for step in lm.generate(ids, 4, Sampling(temperature=1.0, top_p=5e-324, seed=1)):
        assert step.token_id == step.top[0][0]  # top-p this small keeps the likeliest only
    for tiny in (1e-40, 1.6e-266, 5e-324):  # logits / T overflow: the likeliest, no NaN
        assert [s.token_id for s in lm.generate(ids, 3, Sampling(temperature=tiny))] == greedy[:3]


def test_the_tokenizer_is_transformers_with_smollms_digit_split(lm, hf_tokenizer):
    """transformers' GGUF tokenizer leaves out the file's 'smollm' pre-tokenizer (digits one
    by one before GPT-2's split, as llama.cpp and SmolLM2's own tokenizer.json do); with
    that split put back it is ours on every text, and as it is, on every text where the
    split changes nothing."""
    from tokenizers import Regex, pre_tokenizers

    differs = []
    for text in CORPUS:
        ours = lm.tokenizer.encode(text, add_special_tokens=False).ids
        theirs = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        if ours != theirs:
            differs.append(text)
    backend = hf_tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    for text in CORPUS:
        assert lm.tokenizer.encode(text).ids == backend.encode(text).ids, text
    assert differs == ["x**2  123456 and a  1 b   22"]  # spaces before digits only


def test_byte_level_tokens_read_as_text(lm):
    _, shown = lm.tokenize("他在 café 🤖\n  x")
    assert shown == [
        "‹他 1-2/3›", "‹他 3/3›", "在", "␣café", "␣‹🤖 1-2/4›", "‹🤖 3/4›", "‹🤖 4/4›", "↵␣", "␣x",
    ]  # fmt: skip
    assert readable(["<|im_start|>", "Ġhi"], lm.special_tokens) == ["<|im_start|>", "␣hi"]
    paris = lm.tokenizer.token_to_id("ĠParis")
    assert lm.target_vocabulary()[paris] == "␣Paris" and lm.piece(paris) == "ĠParis"


def test_invisible_characters_are_marked():
    """A space reads as ␣, a line break ↵, a tab ⇥; any other character that draws nothing
    (a no-break space, a zero-width joiner, a control) by its code point; never Ġ/Ċ/ĉ."""
    assert readable(["Ġthe", "Ċ", "ĉ", "č", "Âł", "âĢį", "Ā", "Ģ"]) == [
        "␣the", "↵", "⇥", "␍", "‹U+00A0›", "‹U+200D›", "‹U+0000›", "‹80›",
    ]  # fmt: skip
    assert visible(" ") == "␣" and visible("a b\n") == "a␣b↵" and visible("他") == "他"


def test_the_chat_template_makes_one_user_turn(lm):
    prompt = lm.chat_prompt("What is attention?")
    assert prompt.endswith(
        "<|im_start|>user\nWhat is attention?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = lm.tokenize(prompt)[0]
    assert ids.count(lm.tokenizer.token_to_id("<|im_start|>")) == 3


def test_both_backends_read_smollm2s_gguf_alike(lm):
    """The GGUF through transformers' own loader and modeling code (backend=transformers)
    captures what model/ does: every head's weights, the logits, a greedy continuation."""
    from attnviz.model.pretrained.sources import load_origin

    theirs, origin = load_origin(PATH, "smollm2-hf", backend="transformers")
    assert origin.backend == "transformers"
    assert (theirs.vocabulary, theirs.stop_ids) == (lm.vocabulary, lm.stop_ids)
    ids = lm.tokenize("The capital of France is Paris, and the capital of Spain is")[0]
    batch = torch.tensor([ids])
    names = lambda n: n.endswith("hook_weights")  # noqa: E731
    logits, capture = lm.model.run_with_capture(batch, names_filter=names)
    their_logits, their_capture = theirs.model.run_with_capture(batch, names_filter=names)
    assert set(capture) == set(their_capture) and len(capture) == LAYERS
    assert max(float((capture[n] - their_capture[n]).abs().max()) for n in capture) <= 1e-5
    assert float((logits - their_logits).abs().max()) <= 1e-4
    ours = [s.token_id for s in lm.generate(ids, 8)]
    assert [s.token_id for s in theirs.generate(ids, 8)] == ours


def test_our_gguf_reader_reads_what_the_gguf_librarys_own_reads():
    """GGUFFile only reads the metadata from a plain array instead of memmap slices: every
    field (its types, parts and data) and every tensor are the library's own."""
    from gguf import GGUFReader

    from attnviz.model.pretrained.gguf_file import GGUFFile

    ours, theirs = GGUFFile(str(PATH)), GGUFReader(str(PATH))
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.types, mine.data) == (field.offset, field.types, field.data)
        assert [bytes(p) for p in mine.parts] == [bytes(p) for p in field.parts], name
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, tensor in zip(ours.tensors, theirs.tensors, strict=True):
        assert (mine.tensor_type, mine.data_offset) == (tensor.tensor_type, tensor.data_offset)
        assert np.array_equal(mine.shape, tensor.shape)
        assert np.array_equal(mine.data, tensor.data)
