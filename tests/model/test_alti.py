"""ALTI (model/methods/alti.py) against an independent float64 implementation written from the
paper and the authors' code (harness/references/contributions.py, fed by transformers' own
modules, with the L1 distance's eps at 0 as ours): MiniLM (post-norm, as BertModel) and
tiny GPT-2, Llama and Qwen2 decoders (pre-norm). Each block's terms sum back to what the
block gave in the forward pass, and each row of contributions sums to 1."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from attnviz.model.methods.alti import alti, alti_refusal, block_terms, head_values
from attnviz.model.methods.value_norms import output_projection
from attnviz.model.pretrained.bert import BertRunner, package_dir
from harness.architectures import build_model
from harness.checkpoints import PROMPTS, read_back, saved, tiny
from harness.references.contributions import alti as reference_encoder
from harness.references.contributions import alti_decoder as reference_decoder
from harness.references.contributions import kobayashi2021

TEXT = "The animal didn't cross the street because it was too tired."


def close(ours, theirs, tolerance=1e-5):
    assert (ours.double() - torch.as_tensor(theirs).double()).abs().max() <= tolerance


def check_sums_back(model, spec, inputs):
    """Each layer's terms Σ_j T_i(x_j) plus the biases' share give the block's output as
    the model computed it: a post-norm block's layer norm output, a pre-norm block's
    residual after attention (what its feed-forward norm reads), read by hooks."""
    stack = getattr(model, spec.stack)
    seen: dict[str, list] = {"x": [], "out": [], "normed_in": []}
    hooks = []
    for layer in stack.layers():
        hooks.append(layer.register_forward_pre_hook(lambda m, a: seen["x"].append(a[0][0])))
        if layer.pre_norm:  # the residual after attention is what the next norm reads
            hooks.append(layer.ffn_norm.register_forward_pre_hook(
                lambda m, a: seen["out"].append(a[0][0])
            ))  # fmt: skip
        else:
            norm = layer.self_attn_norm
            hooks.append(norm.register_forward_hook(lambda m, a, o: seen["out"].append(o[0])))
            hooks.append(norm.register_forward_pre_hook(
                lambda m, a: seen["normed_in"].append(a[0][0])
            ))  # fmt: skip
    with torch.no_grad():
        _, capture = model.run_with_capture(*inputs)
    for hook in hooks:
        hook.remove()
    for i, layer in enumerate(stack.layers()):
        bias = model.projection_module(spec.type, i).bias
        norm = None if layer.pre_norm else layer.self_attn_norm
        weights = capture[spec.hook(i, "hook_weights")][0].double()
        v = capture[spec.hook(i, "hook_v")][0].double()
        f = head_values(v, output_projection(model, spec, i).double(), weights.size(0))
        own = bias.double() if bias is not None else None
        x = seen["x"][i].double()
        y = torch.bmm(weights, f).sum(0) + x  # every key's terms, with the bias below
        if own is not None:
            y = y + own
        terms, whole = block_terms(x, weights.permute(2, 1, 0), f.transpose(0, 1), y, norm)
        made = seen["out"][i].double()
        assert (whole - made).abs().max() <= 1e-5 * made.abs().max()
        share = bias.double() if bias is not None else torch.zeros_like(whole)
        if norm is not None:  # the biases through the norm, at each row's own scale
            y = seen["normed_in"][i].double()
            scale = torch.sqrt(y.var(-1, keepdim=True, unbiased=False) + norm.eps)
            share = norm.gamma.double() * (share - share.mean()) / scale + norm.beta.double()
        assert (terms.sum(0) + share - made).abs().max() <= 1e-5 * made.abs().max()


@pytest.mark.parametrize("backend", ["ours", "transformers"])
def test_minilms_alti_equals_the_reference_on_bertmodel(backend):
    """On our model code, and on transformers' (its post-norm blocks found by a probe:
    model/hf/stream.py's `encoder_blocks`)."""
    from transformers import BertModel

    minilm = BertRunner.load()
    ids = torch.tensor([minilm.encode(TEXT).ids])
    runner = minilm if backend == "ours" else read_back(package_dir(), "transformers")
    ours = alti(runner.model, (ids,), runner.attention[0], norms_of=3)
    theirs_model = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager")
    theirs = reference_encoder(theirs_model.eval(), ids[0].tolist(), eps=0.0)
    for i, layer in enumerate(ours.layers):
        close(layer, theirs["per_layer"][i])
        close(layer.sum(-1), torch.ones(ids.size(1)), 1e-12)
    close(ours.composed, theirs["composed"])
    expected = torch.as_tensor(kobayashi2021(theirs_model, ids[0].tolist())["attn_res_ln"][3])
    assert (ours.norms - expected).abs().max() <= 1e-5 * expected.abs().max()
    if backend == "ours":  # (the hooks name our layers' norms)
        check_sums_back(minilm.model, minilm.attention[0], (ids,))


def test_a_pre_norm_encoder_on_transformers_code_equals_alti_from_its_modules(tmp_path):
    """ModernBERT's blocks are pre-norm (found by the probe): each layer's ALTI equals ALTI
    recomputed here in float64 from its modules' outputs (its input and Wo's output by
    hooks, the values from Wqkv's, the weights from `output_attentions`); a pre-norm
    RoBERTa, whose feed-forward output adds the residual inside it, is refused."""
    theirs = build_model("modernbert", "encoder-only")
    runner = read_back(saved(tmp_path, theirs), "transformers")
    ids, _ = runner.tokenize(PROMPTS[0] + " jumps over the lazy dog")
    batch = torch.tensor([ids])
    seen: dict[str, list] = {"x": [], "a": [], "v": []}
    heads = theirs.config.num_attention_heads
    hooks = []
    for layer in theirs.layers:
        hooks += [
            layer.register_forward_pre_hook(lambda m, a: seen["x"].append(a[0][0].double())),
            layer.attn.Wo.register_forward_hook(lambda m, a, o: seen["a"].append(o[0].double())),
            layer.attn.Wqkv.register_forward_hook(lambda m, a, o: seen["v"].append(
                o[0].view(o.size(1), 3, heads, -1)[:, 2].transpose(0, 1).double()
            )),
        ]  # fmt: skip
    with torch.no_grad():
        weights = theirs(batch, output_attentions=True).attentions
    for hook in hooks:
        hook.remove()
    ours = alti(runner.model, (batch,), runner.attention[0])
    composed = torch.eye(len(ids), dtype=torch.float64)
    for i, layer in enumerate(theirs.layers):
        w = layer.attn.Wo.weight.double()  # (d_model, H * d): head h's columns
        f = torch.einsum(
            "htd,hde->hte", seen["v"][i], w.view(w.size(0), heads, -1).permute(1, 2, 0)
        )
        terms = torch.einsum("hij,hje->ije", weights[i][0].double(), f)  # (Tq, Tk, d)
        terms += torch.diag_embed(seen["x"][i].t()).permute(1, 2, 0)  # the residual: j = i
        whole = seen["x"][i] + seen["a"][i]
        size = whole.abs().sum(-1, keepdim=True)
        c = (size - (whole[:, None] - terms).abs().sum(-1)).clamp_min(0)
        c = c / c.sum(-1, keepdim=True)
        close(ours.layers[i], c)
        composed = c @ composed
    close(ours.composed, composed)
    prelayernorm = build_model("roberta-prelayernorm", "encoder-only")
    runner = read_back(saved(tmp_path / "roberta", prelayernorm), "transformers")
    reason = alti_refusal(runner.model, runner.attention[0])
    assert reason is not None and "is neither post-norm" in reason, reason


def test_minilms_norms_with_residual_and_layer_norm_equal_kobayashi_2021():
    """‖γ ⊙ (Σ_h α_hij f_h(x_j) + δ_ij x_i − mean) / s_i‖: their ATTN+RES+LN norms."""
    from transformers import BertModel

    minilm = BertRunner.load()
    ids = torch.tensor([minilm.encode(TEXT).ids])
    theirs_model = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager")
    theirs = kobayashi2021(theirs_model.eval(), ids[0].tolist())["attn_res_ln"]
    for layer in (0, 3):
        ours = alti(minilm.model, (ids,), minilm.attention[0], norms_of=layer).norms
        expected = torch.as_tensor(theirs[layer]).double()
        assert (ours - expected).abs().max() <= 1e-5 * expected.abs().max()


@pytest.mark.parametrize("backend", ["ours", "transformers"])
@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_a_decoders_alti_equals_the_reference(tmp_path, kind, backend):
    theirs_model = tiny(kind)
    folder = saved(tmp_path, theirs_model)
    runner = read_back(folder, backend)
    ids, _ = runner.tokenize(PROMPTS[0] + " jumps over the lazy dog")
    batch = torch.tensor([ids])
    ours = alti(runner.model, (batch,), runner.attention[0])
    theirs = reference_decoder(theirs_model, ids, eps=0.0)
    for i, layer in enumerate(ours.layers):
        close(layer, theirs["per_layer"][i])
        assert layer.triu(1).abs().max() == 0  # no contribution from a later token
    close(ours.composed, theirs["composed"])
    close(ours.composed.sum(-1), torch.ones(len(ids)), 1e-12)
    if backend == "ours":  # (the hooks name our layers' norms)
        check_sums_back(runner.model, runner.attention[0], (batch,))
