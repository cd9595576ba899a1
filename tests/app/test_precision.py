"""Models of yours in bfloat16 and float16, run in the dtype they are stored in (ATTNVIZ_DTYPE
auto) or the one asked for: tiny random Llama, Qwen3, Gemma 3, GPT-2, BERT and T5 saved by
transformers in each dtype, served, and every attention weight sent equal to transformers'
own eager attention computed in the same dtype from the same folder (to the bit: the
capture rounds as eager attention does, and float32 on the wire holds every bfloat16 and
float16 value exactly); the long path's windows in bfloat16 equal a float32 recomputation
from the model's own q and k; and what /api/v1/models says of each model's precision,
device and bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnviz.app.main import create_app
from attnviz.app.settings import Settings
from harness.architectures import build_model
from harness.checkpoints import tokenizer
from tests.app.test_api import decode

ARCHITECTURES = {"llama": "decoder-only", "qwen3": "decoder-only",
                 "gemma3_text": "decoder-only", "gpt2": "decoder-only", "bert": "encoder-only",
                 "t5": "encoder-decoder"}  # fmt: skip
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TEXT = "The quick brown fox jumps over the lazy dog"


def save(model_type: str, dtype: torch.dtype, folder) -> None:
    model = build_model(model_type, ARCHITECTURES[model_type]).to(dtype)
    model.save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    models: dict = {}
    for model_type in ARCHITECTURES:
        for name, dtype in DTYPES.items():
            save(model_type, dtype, root / f"{model_type}-{name}")
            models[f"{model_type}-{name}"] = root / f"{model_type}-{name}"
    # a float32 folder asked for in bfloat16 (its own entry), and one asked for in float32
    save("llama", torch.float32, root / "llama-f32")
    models["llama-as-bf16"] = {"path": str(root / "llama-f32"), "dtype": "bfloat16"}
    models["llama-bf16-as-f32"] = {"path": str(root / "llama-bf16"), "dtype": "float32"}
    models["on-a-gpu"] = {"path": str(root / "llama-bf16"), "device": "cuda"}
    models["in-4-bits"] = {"path": str(root / "llama-bf16"), "quantize": "4bit", "device": "cpu"}
    settings = Settings(zoo=["pronounce"], torch_threads=1, models=models)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c, root


def reference(folder, model_type: str, dtype: torch.dtype):
    """transformers' own model of the folder, eager attention, in `dtype`."""
    from attnviz.model.hf.loading import model_class

    kind = ARCHITECTURES[model_type]
    return model_class(kind).from_pretrained(folder, attn_implementation="eager", dtype=dtype)


def ids_of(c, model_id: str) -> dict[str, list[int]]:
    """The ids the server's runner reads TEXT as (and an encoder-decoder's decoder input)."""
    run = c.post("/api/v1/analyze", json={"model": model_id, "text": TEXT})
    assert run.status_code == 200, run.text
    result = c.app.state.inference.zoo.models[model_id].runner.run(TEXT, capture=False)
    return {"source": result.source_ids, "target": result.target_ids}


def infos(c) -> dict[str, dict]:
    return {m["id"]: m for m in c.get("/api/v1/models").json()}


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("model_type", ARCHITECTURES)
def test_every_weight_sent_is_eager_attentions_in_the_models_own_dtype(client, model_type, name):
    c, root = client
    model_id, dtype = f"{model_type}-{name}", DTYPES[name]
    ids = ids_of(c, model_id)
    answer = c.post("/api/v1/attention", json={"model": model_id, "text": TEXT, "encoding": "f4"})
    assert answer.status_code == 200, answer.text
    theirs = reference(root / model_id, model_type, dtype)
    source = torch.tensor([ids["source"]])
    with torch.no_grad():
        if ARCHITECTURES[model_type] == "encoder-decoder":
            out = theirs(source, decoder_input_ids=torch.tensor([ids["target"]]),
                         output_attentions=True)  # fmt: skip
            by_type = {"encoder.self": out.encoder_attentions,
                       "decoder.self": out.decoder_attentions,
                       "decoder.cross": out.cross_attentions}  # fmt: skip
        else:
            out = theirs(source, output_attentions=True)
            kind = "encoder.self" if ARCHITECTURES[model_type] == "encoder-only" else "decoder.self"
            by_type = {kind: out.attentions}
    blocks = answer.json()["blocks"]
    assert {b["type"] for b in blocks} == set(by_type)
    for block in blocks:
        want = by_type[block["type"]][block["layer"]][0].float().numpy()
        got = decode(block["data"])
        assert np.array_equal(got, want), (block["type"], block["layer"], np.abs(got - want).max())
    info = infos(c)[model_id]
    stated = (info["dtype"], info["device"], info["stored_as"])
    assert stated == (str(dtype).removeprefix("torch."), "cpu", info["dtype"])
    held = sum(p.numel() * p.element_size() for p in theirs.parameters())
    held += sum(b.numel() * b.element_size() for b in theirs.buffers())
    assert info["weight_bytes"] == held  # (counted unread, on the meta device)


def test_a_dtype_asked_for_is_the_one_computed_in_and_float32_stays_on_our_code(client):
    c, root = client
    listed = infos(c)
    assert listed["llama-as-bf16"]["dtype"] == "bfloat16"
    assert listed["llama-as-bf16"]["stored_as"] == "float32"
    # model/ reads Llama in float32 on the CPU: asked for bfloat16, transformers' code does
    assert (
        "placed otherwise, it runs on transformers' own code"
        in listed["llama-as-bf16"]["description"]
    )
    assert listed["llama-bf16-as-f32"]["dtype"] == "float32"
    ids = ids_of(c, "llama-as-bf16")["source"]
    answer = c.post("/api/v1/attention", json={"model": "llama-as-bf16", "text": TEXT,
                                               "encoding": "f4"})  # fmt: skip
    theirs = reference(root / "llama-f32", "llama", torch.bfloat16)
    with torch.no_grad():
        want = theirs(torch.tensor([ids]), output_attentions=True).attentions
    for block in answer.json()["blocks"]:
        assert np.array_equal(decode(block["data"]), want[block["layer"]][0].float().numpy())
    # bytes in the dtype it runs in: half those of float32
    assert listed["llama-as-bf16"]["weight_bytes"] * 2 == pytest.approx(
        listed["llama-bf16-as-f32"]["weight_bytes"], rel=0.01
    )


def test_a_device_torch_does_not_see_is_refused_saying_so(client):
    c, _ = client
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    refused = infos(c)["on-a-gpu"]
    assert refused["status"] == "refused"
    assert "the device cuda was asked for, and torch sees no CUDA" in refused["reason"]


def test_weights_quantized_by_bitsandbytes_are_refused_off_cuda_saying_why(client):
    c, _ = client
    refused = infos(c)["in-4-bits"]
    assert refused["status"] == "refused"
    assert refused["reason"] == (
        "4bit weights (bitsandbytes) are computed by CUDA kernels: this model is placed on "
        "cpu; serve it unquantized there, or place it on a GPU"
    )


@pytest.mark.parametrize(
    "model_id", ["llama-bf16", "qwen3-fp16", "gemma3_text-fp16", "bert-bf16", "t5-bf16"]
)
def test_every_route_answers_for_a_model_in_half_precision(client, model_id):
    """Every view and experiment, the residual stream's too: its probes allow what the
    dtype rounds (a few units of it), not float32's 1e-4, which refused them in bfloat16."""
    c, _ = client
    c.post("/api/v1/analyze", json={"model": model_id, "text": TEXT})
    info = infos(c)[model_id]
    stream = {"lens", "dla", "graph", "alti", "contribution"}
    if model_id.startswith(("llama", "qwen3")):  # (Gemma 3's post-norms: in float32 too)
        assert stream <= set(info["capabilities"]["experiments"]), info["capabilities"]
    if model_id.startswith("bert"):
        assert "alti" in info["capabilities"]["experiments"]
    types = info["attention_types"]
    kinds = ["weights", "norms", "scores", "q", "k", "v"]
    calls = [("analyze", {}), ("attention", {}), ("export", {}), ("attention", {"kinds": kinds})]
    for kind in types:
        calls += [(p, {"type": kind, "layer": 1, "head": 3}) for p in ("neuron", "qk-space")]
    for experiment in info["capabilities"]["experiments"]:
        body = {"ablate": [{"type": types[0], "layer": 0, "head": 0}]}
        calls.append((f"lab/{experiment}", body if experiment == "ablation" else {}))
    if info["capabilities"]["generation"]:
        calls.append(("generate", {"max_new_tokens": 3}))
    failed = {}
    for path, body in calls:
        answer = c.post(f"/api/v1/{path}", json={"model": model_id, "text": TEXT, **body})
        if answer.status_code != 200 and not (
            answer.status_code == 422 and "soft-caps its scores" in answer.text
        ):
            failed[path] = answer.text[:300]
    assert not failed
    answer = c.get(f"/api/v1/models/{model_id}/positional-encoding?positions=8&dims=4")
    assert answer.status_code == 200, answer.text


def test_a_long_prompt_in_bfloat16_is_read_by_windows_equal_to_a_float32_recomputation(
    tmp_path,
):
    """A Qwen3 of 2,048 positions stored in bfloat16: a prompt past 512 tokens runs the long
    path; every window sent is the float32 softmax of the bfloat16 q and k of the model's
    own pass (recorded here by transformers' own forward with a hook on each attention
    call), and the answer says so."""
    import transformers

    from harness.architectures import tiny_config

    config = tiny_config("qwen3")
    config.max_position_embeddings = 2048
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).to(torch.bfloat16).eval().save_pretrained(tmp_path)
    tokenizer().save(str(tmp_path / "tokenizer.json"))
    settings = Settings(zoo=["pronounce"], torch_threads=1, models={"long": tmp_path})
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)
    with TestClient(create_app(settings)) as c:
        analysis = c.post("/api/v1/analyze", json={"model": "long", "text": text}).json()
        assert analysis["long"] and len(analysis["source_tokens"]) > 512
        n = len(analysis["source_tokens"])
        window = {"model": "long", "text": text, "encoding": "f4", "layers": [1], "heads": [2],
                  "rows": [n - 40, n], "columns": [0, n]}  # fmt: skip
        answer = c.post("/api/v1/attention", json=window).json()
    assert answer["computed_in"] == "float32"
    assert "from the q and k the model's pass made in bfloat16" in answer["precision"]
    got = decode(answer["blocks"][0]["data"])[0]
    # the reference: transformers' own model of the folder run by its sdpa attention (the
    # fused kernel a long pass runs: eager attention's layers would round otherwise in
    # bfloat16, and so make other q and k), recording each call's q (after RoPE) and k
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = []

    def recording(module, query, key, value, attention_mask, **kwargs):
        calls.append((query, key, kwargs.get("scaling")))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("recording", recording)
    from tokenizers import Tokenizer

    ids = torch.tensor([Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(text).ids])
    assert ids.size(1) == n
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(
        tmp_path, attn_implementation="recording"
    )
    assert theirs.dtype == torch.bfloat16
    with torch.no_grad():
        theirs(ids)
    query, key, scaling = calls[1]  # layer 1
    assert query.dtype == torch.bfloat16
    q = query[0, 2].double()  # head 2
    k = key[0, 2 // (query.size(1) // key.size(1))].double()
    scores = (q @ k.T) * scaling
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(scores, dim=-1)[n - 40 :].numpy()
    assert np.abs(got - want).max() <= 1e-5
    # and the model's own eager weights differ by its bfloat16 rounding only
    eager = torch.softmax(scores.to(torch.bfloat16).float(), dim=-1)[n - 40 :].numpy()
    assert np.abs(got - eager).max() <= 2 * torch.finfo(torch.bfloat16).eps


def test_the_server_says_at_start_up_what_torch_sees_and_where_models_of_yours_run(caplog):
    caplog.set_level("INFO", logger="attnviz")
    with TestClient(create_app(Settings(zoo=["pronounce"], torch_threads=1))):
        pass
    said = [r.getMessage() for r in caplog.records if "ATTNVIZ_DEVICE" in r.getMessage()]
    assert len(said) == 1, said
    if not torch.cuda.is_available():
        assert said[0].startswith(f"torch {torch.__version__}")
        assert said[0].endswith(
            "sees no CUDA device; ATTNVIZ_DEVICE auto: models of yours run on cpu"
        )
