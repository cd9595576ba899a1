"""Models run by transformers' own code through every route: an encoder-decoder (T5, with
its relative position bias; BART), a decoder-only model model/ does not read (Qwen3,
Gemma 2's soft-capping) and an encoder (RoBERTa), each a tiny random model made with
transformers' classes; every view, inspection and lab experiment answers, and the
numbers are transformers' own."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from harness.architectures import build, save_masked_roberta
from tests.app.test_api import decode

ARCHITECTURES = {"t5": "encoder-decoder", "bart": "encoder-decoder", "qwen3": "decoder-only",
                 "gemma2": "decoder-only", "roberta": "encoder-only",
                 "gemma3_text": "decoder-only", "phi": "decoder-only",
                 "qwen3_next": "decoder-only"}  # fmt: skip
TEXT = "The quick brown fox jumps"
CAPPED_OR_BIASED = {"t5", "gemma2"}  # T5's relative bias, Gemma 2's soft-capping


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    for model_type, kind in ARCHITECTURES.items():
        build(model_type, kind, root / model_type)
    masked = save_masked_roberta(root / "roberta-mlm")  # its tokenizer's <mask> included
    models = {m: root / m for m in ARCHITECTURES} | {"bad-id": "org/a--b"}  # not a repo id
    models["roberta-mlm"] = masked
    models["qwen3-long"] = save_long_qwen3(root / "qwen3-long")
    settings = Settings(zoo=["pronounce"], torch_threads=1, models=models)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c, root


LONG_CONTEXT = 2048


def save_long_qwen3(folder):
    """A tiny Qwen3 (transformers' code: model/ does not read it) with a 2,048-token
    context: a prompt past 512 tokens runs the long path."""
    import transformers

    from harness.architectures import tiny_config
    from harness.checkpoints import tokenizer

    config = tiny_config("qwen3")
    config.max_position_embeddings = LONG_CONTEXT
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).eval().save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def reference(root, model_type: str):
    from harness.architectures import reference as made

    return made(model_type, ARCHITECTURES[model_type], root / model_type, eager=True)


def test_a_name_that_is_no_repo_id_is_refused_and_the_rest_served(client):
    c, _ = client
    infos = {m["id"]: m for m in c.get("/api/v1/models").json()}
    assert infos["bad-id"]["status"] == "refused" and "org/a--b" in infos["bad-id"]["reason"]
    assert all(infos[m]["status"] == "served" for m in ARCHITECTURES)


def test_a_hybrid_says_its_attention_layers_are_numbered_among_themselves(client):
    c, _ = client
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["qwen3_next"]
    assert info["attention"][0]["layers"] == 1  # of its 4: 3 linear-attention layers
    assert "Only 1 of its 4 layers attends" in info["description"]
    assert "its attention layer is numbered 0" in info["description"]


@pytest.mark.parametrize("model_type", ["roberta", "bart"])
def test_padding_is_masked_in_an_encoder_on_transformers_code(client, model_type):
    c, _ = client
    body = {"model": model_type, "text": TEXT, "type": "encoder.self", "layer": 1, "head": 2}
    padded = c.post("/api/v1/lab/masks", json=body).json()["padding"]
    assert padded["pad_weight"] == 0.0
    assert padded["max_abs_diff_alone"] <= 1e-5


def test_per_layer_type_and_partial_rope_are_shown_as_the_model_turns(client):
    """Gemma 3's full-attention frequencies, and Phi's partial rotary (fewer pairs than a
    head has), as the models' own rotary embeddings hold them."""
    c, root = client
    for model_type in ("gemma3_text", "phi"):
        theirs = reference(root, model_type)
        held = dict(theirs.model.rotary_emb.named_buffers())
        # (Gemma 3: one per layer type; the full-attention layers' where it has them)
        buffer = next(n for n in ("full_attention_inv_freq", "sliding_attention_inv_freq",
                                  "inv_freq") if n in held)  # fmt: skip
        width = {m["id"]: m for m in c.get("/api/v1/models").json()}[model_type]["attention"][0]
        asked = width["head_dim"] // 2
        answer = c.get(f"/api/v1/models/{model_type}/positional-encoding?positions=6&dims={asked}")
        assert answer.status_code == 200, answer.text
        answer = answer.json()
        frequencies = held[buffer]
        assert answer["kind"] == "rotary" and answer["dims"] == min(asked, frequencies.numel())
        angles = torch.arange(6.0)[:, None] * frequencies[None, : answer["dims"]]
        wrapped = torch.atan2(torch.sin(angles), torch.cos(angles))
        assert np.abs(np.array(answer["table"]) - wrapped.numpy()).max() <= 1e-5


@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_every_route_answers_for_a_model_on_transformers_code(client, model_type):
    c, _ = client
    # (read first: what a model of yours can do is known once its weights are read)
    c.post("/api/v1/analyze", json={"model": model_type, "text": TEXT})
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}[model_type]
    assert info["status"] == "served" and "transformers' own modeling code" in info["description"]
    types = info["attention_types"]
    calls = [("analyze", {}), ("attention", {}), ("export", {})]
    layers = {a["type"]: a["layers"] for a in info["attention"]}
    for kind in types:
        head = {"type": kind, "layer": min(1, layers[kind] - 1), "head": 3}
        calls += [(p, head) for p in ("neuron", "qk-space")]
    if ARCHITECTURES[model_type] == "encoder-only":  # (post-norm: its blocks found by a probe)
        assert "alti" in info["capabilities"]["experiments"]
    for experiment in info["capabilities"]["experiments"]:
        body = {"ablate": [{"type": types[0], "layer": 0, "head": 0}]}
        calls.append((f"lab/{experiment}", body if experiment == "ablation" else {}))
    for path, body in calls:
        answer = c.post(f"/api/v1/{path}", json={"model": model_type, "text": TEXT, **body})
        if path in ("lab/scaling", "neuron") and model_type in CAPPED_OR_BIASED:
            assert answer.status_code == 422, answer.text  # q·k times one factor is not
            assert "soft-caps its scores or adds a position bias" in answer.json()["detail"]
            continue
        assert answer.status_code == 200, (path, answer.text)
    answer = c.get(f"/api/v1/models/{model_type}/positional-encoding?positions=8&dims=4")
    assert answer.status_code == 200, answer.text


def test_an_encoder_decoders_output_and_every_attention_are_transformers_own(client):
    c, root = client
    theirs = reference(root, "t5")
    run = c.post("/api/v1/analyze", json={"model": "t5", "text": TEXT}).json()
    blocks = c.post("/api/v1/attention", json={"model": "t5", "text": TEXT, "encoding": "f4"})
    blocks = blocks.json()["blocks"]
    ids = theirs_ids(c, "t5")
    assert len(run["target_tokens"]) == len(ids["target"])
    source, target = torch.tensor([ids["source"]]), torch.tensor([ids["target"]])
    with torch.no_grad():
        greedy = theirs.generate(source, max_new_tokens=len(ids["target"]) + 4, do_sample=False,
                                 num_beams=1)[0].tolist()  # fmt: skip
        expected = theirs(source, decoder_input_ids=target, output_attentions=True)
    assert greedy[: len(ids["target"])] == ids["target"]  # the decoder was fed its greedy output
    by_type = {"encoder.self": expected.encoder_attentions,
               "decoder.self": expected.decoder_attentions,
               "decoder.cross": expected.cross_attentions}  # fmt: skip
    assert {b["type"] for b in blocks} == set(by_type)
    for block in blocks:
        want = by_type[block["type"]][block["layer"]][0].numpy()
        assert np.abs(decode(block["data"]) - want).max() <= 1e-5


def theirs_ids(c, model_type: str) -> dict[str, list[int]]:
    """The source ids and the decoder's input of a run (the same folder read again)."""
    from attnviz.model.hf.loading import load_transformers

    entry_root = c.app.state.inference.zoo.models[model_type].runner.path
    runner = load_transformers(entry_root, model_type)
    result = runner.run(TEXT, capture=False)
    return {"source": result.source_ids, "target": result.target_ids}


def test_t5s_relative_bias_is_shown_as_transformers_computes_it(client):
    c, root = client
    theirs = reference(root, "t5")
    answer = c.get("/api/v1/models/t5/positional-encoding?positions=8&dims=4").json()
    assert answer["kind"] == "relative" and "T5's relative attention" in answer["formula"]
    block = theirs.encoder.block[0].layer[0].SelfAttention
    with torch.no_grad():
        bias = block.compute_bias(8, 8)[0, :, :, 0].T  # (distance, head)
    assert np.abs(np.array(answer["table"]) - bias[:, :4].numpy()).max() <= 1e-5
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["t5"]
    assert "positions" in info["capabilities"]["experiments"]  # its bias can be switched off


def test_t5_without_its_relative_bias_is_t5_with_that_table_zeroed(client):
    """The positions experiment on T5 switches its relative bias off: its encoder's
    weights are then transformers' own with the bias table zeroed, and a permuted input's
    weights are the permuted weights."""
    c, root = client
    answer = c.post("/api/v1/lab/positions", json={"model": "t5", "text": TEXT, "layer": 1,
                    "head": 2}).json()  # fmt: skip
    theirs = reference(root, "t5")
    ids = torch.tensor([c.app.state.inference.zoo.models["t5"].runner.tokenize(TEXT)[0]])
    with torch.no_grad():
        theirs.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.zero_()
        weights = theirs.encoder(ids, output_attentions=True).attentions[1][0, 2]
    got = np.array(answer["without_positions"]["original"])
    assert np.abs(got - weights.numpy()).max() <= 1e-5
    assert answer["without_positions"]["max_abs_diff"] <= 1e-5
    assert answer["with_positions"]["max_abs_diff"] > 1e-3


def test_without_the_scaling_a_transformers_model_divides_by_its_own(client):
    """Qwen3's scores without their scaling are q·kᵀ itself, as transformers' eager
    attention computes them with scaling=1 in every layer (checked on one head)."""
    c, root = client
    answer = c.post("/api/v1/lab/scaling", json={"model": "qwen3", "text": TEXT, "layer": 1,
                    "head": 2}).json()  # fmt: skip
    theirs = reference(root, "qwen3")
    ids = torch.tensor([c.app.state.inference.zoo.models["qwen3"].runner.tokenize(TEXT)[0]])
    for layer in theirs.model.layers:  # the experiment unscales every layer at once
        layer.self_attn.scaling = 1.0  # eager attention with scaling 1: softmax of q·kᵀ
    with torch.no_grad():
        unscaled = theirs(ids, output_attentions=True).attentions[1][0, 2]
    got = np.array(answer["matrices"]["second"])
    assert np.abs(got - unscaled.numpy()).max() <= 1e-5


def test_the_kv_cache_replays_an_encoder_decoder_exactly(client):
    c, _ = client
    answer = c.post("/api/v1/lab/kv-cache", json={"model": "bart", "text": TEXT}).json()
    assert answer["steps"] and max(s["max_abs_diff"] for s in answer["steps"]) <= 1e-5
    assert all(s["cache_bytes"][0] > 0 for s in answer["steps"])


def test_a_masked_lm_on_transformers_code_predicts_each_mask_as_transformers_does(client):
    """A RobertaForMaskedLM folder: its head's predictions at each <mask> (RoBERTa's mask
    token, which the page and the examples name) are transformers' own."""
    import transformers

    c, root = client
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["roberta-mlm"]
    assert (info["output"], info["mask_token"], info["architecture"]) == (
        "masked", "<mask>", "encoder-only")  # fmt: skip
    assert (
        all("<mask>" in e for e in info["examples"])
        and "written as <mask>" in (info["description"])
    )
    text = "The quick <mask> fox jumps over the <mask> dog"
    body = c.post("/api/v1/analyze", json={"model": "roberta-mlm", "text": text}).json()
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(
        root / "roberta-mlm", attn_implementation="eager"
    ).eval()
    ids = torch.tensor([c.app.state.inference.zoo.models["roberta-mlm"].runner.tokenize(text)[0]])
    with torch.no_grad():
        probs = torch.softmax(theirs(ids).logits[0], dim=-1)
    masks = [i for i, t in enumerate(ids[0].tolist()) if t == tokenizer_mask_id(root)]
    assert len(masks) == 2 and [m["position"] for m in body["masked"]] == masks
    for m in body["masked"]:
        top = probs[m["position"]].topk(5)
        assert [a["id"] for a in m["top"]] == top.indices.tolist()
        got = np.array([a["probability"] for a in m["top"]])
        assert np.abs(got - top.values.numpy()).max() <= 1e-5
    assert body["output"] == [m["top"][0]["token"] for m in body["masked"]]
    from tokenizers import Tokenizer

    bpe = Tokenizer.from_file(str(root / "roberta-mlm" / "tokenizer.json"))
    # as the page shows every byte-level token: ␣, ↵, ⇥, another invisible one as ‹U+0015›
    shown = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
    invisible = {"Zs", "Zl", "Zp", "Cc", "Cf"}
    for m in body["masked"]:  # its text, not its bytes' alphabet (no mojibake)
        for a in m["top"]:
            said = bpe.decode([a["id"]], skip_special_tokens=False)
            if "\ufffd" in said:  # part of a character: its bytes named
                assert a["token"].startswith("‹"), a
            else:
                marked = [
                    shown.get(c)
                    or (f"‹U+{ord(c):04X}›" if unicodedata.category(c) in invisible else c)
                    for c in said
                ]
                assert a["token"] == "".join(marked), a
            assert a["raw"] == bpe.id_to_token(a["id"]), a  # its piece, as the tokenizer spells it
    plain = c.post("/api/v1/analyze", json={"model": "roberta", "text": text}).json()
    assert plain.get("embedding") and not plain.get("masked"), plain  # its encoder alone


def tokenizer_mask_id(root) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(root / "roberta-mlm" / "tokenizer.json")).token_to_id("<mask>")


def test_a_long_prompt_on_transformers_code_is_read_whole_by_windows(client):
    """Past 512 tokens, the long path (fused kernel; no N x N matrix kept): the pooled
    overview and an exact window are transformers' eager weights."""
    c, root = client
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["qwen3-long"]
    assert info["max_tokens"] == LONG_CONTEXT
    text = "The quick brown fox jumps over the lazy dog. " * 50
    analysis = c.post("/api/v1/analyze", json={"model": "qwen3-long", "text": text}).json()
    n = len(analysis["source_tokens"])
    assert 512 < n <= LONG_CONTEXT and analysis["long"] and not analysis["truncated"]
    import transformers

    theirs = transformers.Qwen3ForCausalLM.from_pretrained(
        root / "qwen3-long", attn_implementation="eager"
    ).eval()
    ids = c.app.state.inference.entry("qwen3-long").runner.encode(text)[0]
    assert len(ids) == n
    with torch.no_grad():
        expected = theirs(torch.tensor([ids]), output_attentions=True).attentions[1][0, 3]
    body = {"model": "qwen3-long", "text": text, "layers": [1], "heads": [3], "encoding": "f4"}
    pooled = c.post("/api/v1/attention", json={**body, "pool": 50}).json()["blocks"][0]
    rows, cols = pooled["row_edges"], pooled["column_edges"]
    got = decode(pooled["data"])[0]
    for i in range(len(rows) - 1):
        for j in range(len(cols) - 1):
            cell = expected[rows[i] : rows[i + 1], cols[j] : cols[j + 1]].max()
            assert abs(got[i, j] - float(cell)) <= 1e-5
    window = {**body, "rows": [n - 40, n], "columns": [0, n]}
    exact = c.post("/api/v1/attention", json=window).json()["blocks"][0]
    assert np.abs(decode(exact["data"])[0] - expected[n - 40 :].numpy()).max() <= 1e-5


# where each architecture keeps its layers, value projection and output projection: the
# test reads transformers' own modules by name, not the projection our trace found
NAMED = {
    "qwen3": ("layers", "self_attn.v_proj", "self_attn.o_proj"),
    "phi": ("layers", "self_attn.v_proj", "self_attn.dense"),
    "roberta": ("encoder.layer", "attention.self.value", "attention.output.dense"),
}


@pytest.mark.parametrize("model_type", sorted(NAMED))
def test_value_weighted_norms_on_transformers_code_equal_its_modules(client, model_type):
    """‖α_hij (v_j^h W_O^h)‖ recomputed in float64 from the value vectors a forward hook
    reads off the value projection and the output projection's weight sliced per head."""
    c, root = client
    theirs = reference(root, model_type)
    stack, value_name, output_name = NAMED[model_type]
    layers = next(m for n, m in theirs.named_modules() if n.endswith(stack))
    config = theirs.config
    heads, width = config.num_attention_heads, config.hidden_size
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or width // heads
    values = {}
    hooks = [
        layer.get_submodule(value_name).register_forward_hook(
            lambda m, a, out, i=i: values.__setitem__(i, out.detach())
        )
        for i, layer in enumerate(layers)
    ]
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}[model_type]
    atype = info["attention"][0]["type"]
    body = {"model": model_type, "text": TEXT, "kinds": ["norms"], "encoding": "f4"}
    answer = c.post("/api/v1/attention", json=body)
    assert answer.status_code == 200, answer.text
    ids = c.app.state.inference.zoo.models[model_type].runner.tokenize(TEXT)[0]
    with torch.no_grad():
        attentions = theirs(torch.tensor([ids]), output_attentions=True).attentions
    for hook in hooks:
        hook.remove()
    assert info["capabilities"]["value_norms"] is True
    for block in answer.json()["blocks"]:
        i = block["layer"]
        v = values[i][0].double().view(len(ids), kv_heads, head_dim).transpose(0, 1)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        wo = layers[i].get_submodule(output_name).weight.double()  # (d_model, H * d)
        f = torch.einsum("hjd,hde->hje", v, wo.view(wo.size(0), heads, head_dim).permute(1, 2, 0))
        expected = attentions[i][0].double() * f.norm(dim=-1)[:, None, :]
        got = torch.from_numpy(decode(block["data"]).copy()).double()
        assert block["type"] == atype
        assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_value_weighted_norms_are_refused_where_a_gate_comes_between(client):
    """Qwen3-Next multiplies its attention's output by a gate before the output projection:
    what a head adds is no linear map of its values, and the API says so."""
    c, _ = client
    body = {"model": "qwen3_next", "text": TEXT, "kinds": ["norms"]}
    answer = c.post("/api/v1/attention", json=body)
    info = {m["id"]: m for m in c.get("/api/v1/models").json()}["qwen3_next"]
    assert info["capabilities"]["value_norms"] is False  # the page does not offer them
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == (
        "qwen3_next: its attention's output is changed (gated or normalized) before a "
        "projection reads it: what each head adds is not one linear map of its values"
    )
