"""The architecture matrix (harness/matrix.py): every text architecture of the
installed transformers whose attention goes through its attention interface, as a tiny
random model read back by our loader, against transformers' own forward.

`make test` runs a short version: the architectures the tests name and every tenth of the
rest (about a quarter: two minutes of two cores become 40 s), each of its rows held to
the docs' table's line for its architecture (what the whole run found). The counts below
are the whole run's. `make test-architectures`
(ATTNVIZ_FULL_MATRIX=1) runs every one, with the counts below and the docs' table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnviz.model.pretrained.adapters import ADAPTERS
from harness.architectures import interface_architectures, text_architectures
from harness.matrix import compare, matrix
from harness.matrix_table import readme_section, readme_table

# Measured on transformers 5.24: 151 of the 165 are served and equal (the others: those
# whose heads change shape across layers, those whose encoder has its own sparse attention,
# those backends.REFUSED names, one whose own eager forward fails on a tiny model, and two
# whose own eager and default forwards differ by more than 1e-4). A change that serves
# fewer is a regression.
SERVED_AND_EQUAL_AT_LEAST = 151
NORMS_AT_LEAST = 134  # of the 151 served equal (measured on 5.24; 17 gate or normalize)
STREAM_AT_LEAST = 65  # of the 115 decoders served equal (measured on 5.24)
READ_LONG_AT_LEAST = 99  # of the 115 decoders served equal (measured on 5.24)


FULL = os.environ.get("ATTNVIZ_FULL_MATRIX") == "1"
# the architectures the tests below name: in the short version too
NAMED = {
    "qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox", "olmo2", "gpt_oss", "roberta",
    "distilbert", "modernbert", "llama", "gpt2", "t5", "bart", "marian", "mt5", "albert",
    "jamba", "recurrent_gemma", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "minimax",
    "bamba", "gemma3n_text", "bert-generation", "granite_swa", "qwen2", "mistral", "phi",
    "bert", "qwen3_next",
}  # fmt: skip


@pytest.fixture(scope="module")
def rows():
    return matrix(only=None if FULL else (lambda i, t: t in NAMED or i % 10 == 0))


def test_the_architectures_come_from_transformers_own_mappings():
    text, through = text_architectures(), interface_architectures()
    assert len(text) > 150 and set(through) <= set(text)
    for expected in ("llama", "qwen3", "gemma3_text", "phi3", "gpt_neox", "roberta", "t5"):
        assert expected in through
    assert "bloom" in text and "bloom" not in through  # its attention is its own code


def test_no_architecture_is_served_with_other_numbers_than_transformers(rows):
    for row in rows:
        if row.served:
            assert row.weights <= 1e-5, (row.model_type, row.weights)


def test_most_architectures_are_served_equal_and_the_rest_say_why(rows):
    equal = [r for r in rows if r.equal]
    assert not FULL or len(equal) >= SERVED_AND_EQUAL_AT_LEAST, len(equal)
    for row in rows:
        assert row.equal or row.reason or row.served, row.model_type
    by_type = {r.model_type: r for r in rows}
    for served in ("qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox", "olmo2", "gpt_oss",
                   "roberta", "distilbert", "modernbert", "llama", "gpt2", "t5", "bart",
                   "marian", "mt5", "albert", "jamba", "recurrent_gemma",
                   # DeepSeek's MLA and sparse top-k attention, hybrids, per-token sinks
                   "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "minimax", "bamba",
                   "gemma3n_text", "bert-generation"):  # fmt: skip
        assert by_type[served].equal, by_type[served]
    assert "sigmoid" in by_type["granite_swa"].reason  # refused: it would be wrong


def test_every_decoder_reads_long_prompts_equal_or_says_why(rows):
    """Past 512 tokens a decoder runs the long path (fused kernel; weights recomputed by
    windows): equal to transformers' eager weights, or kept to 512 with the reason."""
    decoders = [r for r in rows if r.equal and r.kind == "decoder-only"]
    reading = [r for r in decoders if not r.long_reason]
    for row in decoders:
        assert row.long_reason or row.long <= 1e-5, (row.model_type, row.long)
    assert not FULL or len(reading) >= READ_LONG_AT_LEAST, len(reading)
    by_type = {r.model_type: r for r in reading}
    for model_type in ("llama", "qwen2", "qwen3", "mistral", "phi3", "olmo2", "gpt_neox"):
        assert model_type in by_type, model_type
    capped = {r.model_type: r for r in decoders}["gemma2"]
    assert "soft-capping" in capped.long_reason


def test_value_weighted_norms_decompose_each_projections_output_or_say_why(rows):
    """Each head's value-weighted vectors α_hij f_h(x_j), summed over keys and heads with
    the bias, give back what the output projection made in transformers' forward pass (its
    output read by a forward hook): the heads are sliced as the projection reads them."""
    equal = [r for r in rows if r.equal]
    with_norms = [r for r in equal if not r.norms_reason]
    for row in with_norms:
        assert row.norms <= 1e-5, (row.model_type, row.norms)
    assert not FULL or len(with_norms) >= NORMS_AT_LEAST, len(with_norms)
    by_type = {r.model_type: r for r in equal}
    for model_type in ("llama", "gpt2", "bert", "t5", "bart", "albert", "roberta", "gemma2"):
        assert not by_type[model_type].norms_reason, by_type[model_type]
    assert "gated" in by_type["qwen3_next"].norms_reason


def test_most_decoders_residual_streams_are_read_or_say_why(rows):
    """The logit lens, DLA and the contribution graph read a decoder's residual stream
    (model/methods/lens.py; on transformers' code as its probe finds it): DLA's terms sum to the
    logit difference, or the row says why the stream is not read."""
    decoders = [r for r in rows if r.equal and r.kind == "decoder-only"]
    read = [r for r in decoders if not r.stream_reason]
    for row in read:
        assert row.stream <= 1e-4, (row.model_type, row.stream)
    assert not FULL or len(read) >= STREAM_AT_LEAST, len(read)
    by_type = {r.model_type: r for r in decoders}
    for model_type in ("llama", "gpt2", "qwen2", "qwen3", "mistral", "phi", "gpt_neox"):
        assert not by_type[model_type].stream_reason, by_type[model_type]
    assert "a norm after one of them" in by_type["gemma2"].stream_reason


def test_the_docs_table_is_the_matrix(rows):
    """The whole matrix is docs/architectures.md's table; the short one's every row is the
    table's line for its architecture (each verdict and reason as the whole run found)."""
    page = Path(__file__).resolve().parents[2] / "docs" / "architectures.md"
    documented = readme_section(page.read_text(encoding="utf-8"))
    if FULL:
        assert documented == readme_table(rows), (
            "docs/architectures.md's table differs from the matrix: "
            "run .venv/bin/python bench/bench_families.py --matrix --readme"
        )
    else:
        lines = set(documented.splitlines())
        for line in readme_table(rows).splitlines()[2:]:
            assert line in lines, f"unlike docs/architectures.md's line: {line}"


@pytest.mark.parametrize("model_type", sorted(ADAPTERS))
def test_our_families_are_equal_through_transformers_path_too(model_type):
    architecture = "encoder-only" if model_type == "bert" else "decoder-only"
    ours = compare(model_type, architecture)
    theirs = compare(model_type, architecture, backend="transformers")
    assert (ours.backend, theirs.backend) == ("ours", "transformers")
    assert ours.equal and theirs.equal, (ours, theirs)


@pytest.mark.parametrize("model_type", ["llama", "phi", "gpt_neox"])  # full, partial RoPE
def test_the_neuron_views_before_is_the_query_projection_itself(tmp_path, model_type):
    """q turned back by the captured angles (transformers' rotate_half layout) equals what
    the model's own query projection made, read by a forward hook on it."""
    import torch
    import transformers

    from attnviz.app.head_views.neuron import unrotate_half
    from attnviz.model.hf.capture import ATTENTION, register
    from attnviz.model.hf.model import HFTransformer
    from harness.architectures import build_model

    register()
    build_model(model_type, "decoder-only").save_pretrained(tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=ATTENTION)
    model = HFTransformer(hf)
    attention = next(m for n, m in hf.named_modules() if n.endswith(("0.self_attn", "0.attention")))
    projection = getattr(attention, "q_proj", None) or attention.query_key_value
    seen = {}
    hook = projection.register_forward_hook(lambda m, args, out: seen.update(q=out[0]))
    ids = torch.randint(0, 300, (1, 9))
    _, capture = model.run_with_capture(
        ids, names_filter=["decoder.0.self_attn.hook_q", "decoder.hook_pos"]
    )
    hook.remove()
    q = capture["decoder.0.self_attn.hook_q"][0]  # (H, T, d), after RoPE
    heads, length, width = q.shape
    raw = seen["q"].view(length, heads, -1)[..., :width]  # (NeoX: q, k, v per head)
    back = unrotate_half(q, capture["decoder.hook_pos"])
    assert (back - raw.transpose(0, 1)).abs().max() <= 1e-5


def test_per_token_sinks_are_computed_as_inkling2s_eager_attention():
    """Inkling 2 passes a sink logit per query and head (`sinks`, (B, H, Tq, 1)); its
    architecture is refused for its attention over layers, but the capture's sink path is
    checked against its own eager attention function."""
    import torch
    from torch import nn
    from transformers.models.inkling2.modeling_inkling2 import eager_attention_forward

    from attnviz.model.hf.capture import capturing_attention

    torch.manual_seed(0)
    module = nn.Module().eval()
    module.num_key_value_groups = 2
    q, k, v = torch.randn(1, 4, 7, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    causal = torch.full((7, 7), torch.finfo(torch.float32).min).triu(1)[None, None]
    sinks = torch.randn(1, 4, 7, 1) * 3
    theirs = eager_attention_forward(module, q, k, v, causal, 0.25, sinks=sinks)
    ours = capturing_attention(module, q, k, v, causal, 0.25, sinks=sinks)
    assert (ours[1] - theirs[1]).abs().max() <= 1e-6  # weights: the sink's share left out
    assert (ours[0] - theirs[0]).abs().max() <= 1e-6
    assert float(ours[1].sum(-1).max()) < 1.0


def test_a_decoder_whose_tokens_see_later_ones_is_refused(tmp_path):
    """BertGeneration with its config's is_decoder false attends in both directions: as
    a decoder-only model its continuation would not be what it computes, so it is
    refused when read, saying why."""
    import transformers

    from attnviz.model.checkpoints import CheckpointError
    from attnviz.model.pretrained.sources import load_origin
    from harness.architectures import tiny_config
    from harness.checkpoints import tokenizer

    config = tiny_config("bert-generation")
    config.is_decoder = False
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer().save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="attend to later tokens"):
        load_origin(tmp_path, "bidirectional")
