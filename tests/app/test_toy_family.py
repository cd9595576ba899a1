"""A model family registered from outside the app (tests/toy_family.py: a runner and one
register line) is served by the model list, the API and the lab with no other change."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.zoo import REGISTRY


@pytest.fixture(scope="module")
def toy():
    saved = dict(REGISTRY)
    settings = Settings(torch_threads=1, plugins=["tests.toy_family"], zoo=["toy"])
    with TestClient(create_app(settings)) as client:
        yield client
    REGISTRY.clear()
    REGISTRY.update(saved)  # the other tests' app sees the shipped families only


def test_the_model_list_states_the_toy(toy):
    models = toy.get("/api/v1/models").json()
    assert [m["id"] for m in models] == ["toy", "toy-untrained"]  # the twin from the registry
    info = models[0]
    assert info["default"] and info["architecture"] == "decoder-only"
    assert info["attention"] == [
        {"type": "decoder.self", "layers": 1, "query_heads": 4, "kv_heads": 4, "head_dim": 8,
         "rows": "target", "columns": "target"}
    ]  # fmt: skip
    assert (info["output"], info["token_unit"], info["max_tokens"]) == (
        "continuation",
        "characters",
        64,
    )
    assert info["capabilities"]["experiments"] == [
        "scaling", "metrics", "rollout", "ablation", "compare"
    ]  # fmt: skip
    assert models[1]["title"] == "Toy decoder-only, untrained twin"
    assert toy.get("/healthz").json()["models"] == ["toy", "toy-untrained"]


def test_the_api_serves_the_toys_attention(toy):
    body = toy.post("/api/v1/analyze", json={"text": "hello"}).json()
    assert body["model"] == "toy" and body["source_tokens"] == list("hello")
    assert body["target_tokens"][:6] == ["<bos>", *"hello"] and len(body["output"]) == 4
    assert body["target_tokens"][6:] == body["output"]
    assert [(s["type"], s["layer"]) for s in body["summaries"]] == [("decoder.self", 0)] * 4
    answer = toy.post(
        "/api/v1/attention", json={"text": "hello", "kinds": ["weights"], "legacy_items": False}
    ).json()
    [block] = answer["blocks"]
    n = len(body["target_tokens"])
    assert block["type"] == "decoder.self" and block["shape"] == [4, n, n]
    assert block["rows"] == block["columns"] == body["target_tokens"]

    # the weights against the formula, computed here from the model's own parameters
    runner = toy.app.state.inference.zoo.models["toy"].runner
    ids = torch.tensor([runner.run("hello", capture=False).target_ids])
    decoder, attn = runner.model.decoder, runner.model.decoder.get_submodule("0.self_attn")
    x = decoder.tok_embed(ids) * math.sqrt(32) + decoder.pos.pe[: ids.size(1)]
    q = attn.wq(x).view(1, n, 4, 8).transpose(1, 2)
    k = attn.wk(x).view(1, n, 4, 8).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")
    )
    expected = scores.softmax(-1)[0].detach().numpy()
    assert np.abs(np.array(block["data"]) - expected).max() < 1e-5


def test_the_lab_runs_what_the_toy_can_and_says_why_not_the_rest(toy):
    metrics = toy.post("/api/v1/lab/metrics", json={"text": "abcabc"}).json()
    assert len(metrics["rows"]) == 4 and metrics["rows"][0]["type"] == "decoder.self"
    heads = [{"type": "decoder.self", "layer": 0, "head": h} for h in range(4)]
    ablated = toy.post("/api/v1/lab/ablation", json={"text": "abcabc", "ablate": heads})
    assert ablated.status_code == 200 and ablated.json()["cosine"] is None
    refused = toy.post("/api/v1/lab/positions", json={"text": "abcabc"})
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "the positions experiment cannot run on toy: it has no encoder"
    )
