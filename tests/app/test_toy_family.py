"""A model family registered from outside the app (tests/toy_family.py: a runner and one
register line) is served by the model list, the API and the lab with no other change."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnviz.app.catalog.zoo import REGISTRY

from .conftest import with_plugin


@pytest.fixture(scope="module")
def toy():
    with with_plugin("tests.toy_family", REGISTRY, ["toy"]) as client:
        yield client


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
        "scaling", "metrics", "rollout", "flow", "alti", "contribution", "ablation", "compare"
    ]  # fmt: skip
    assert models[1]["title"] == "Toy decoder-only, untrained twin"
    assert toy.get("/healthz").json()["models"] == ["toy", "toy-untrained"]


def test_the_api_serves_the_toys_attention(toy):
    body = toy.post("/api/v1/analyze", json={"text": "hello"}).json()
    assert body["model"] == "toy" and body["source_tokens"] == list("hello")
    assert body["target_tokens"][:6] == ["<bos>", *"hello"] and len(body["output"]) == 4
    assert body["target_tokens"][6:] == body["output"]
    assert [(s["type"], s["layer"]) for s in body["summaries"]] == [("decoder.self", 0)] * 4
    answer = toy.post("/api/v1/attention", json={"text": "hello", "kinds": ["weights"]}).json()
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
    text = "abcabc"
    fed = toy.post("/api/v1/analyze", json={"text": text}).json()["target_tokens"]
    for name in toy.get("/api/v1/models").json()[0]["capabilities"]["experiments"]:
        body = {"text": text}
        if name == "ablation":
            body["ablate"] = [{"type": "decoder.self", "layer": 0, "head": h} for h in range(4)]
        answer = toy.post(f"/api/v1/lab/{name}", json=body)
        assert answer.status_code == 200, (name, answer.text)
        result = answer.json()
        if name == "scaling":  # the decoder's self-attention, the only type
            assert result["type"] == "decoder.self" and result["head_dim"] == 8
            assert result["matrices"]["rows"] == fed and len(result["head_stats"]) == 4
        elif name == "metrics":
            heads = [(r["type"], r["head"]) for r in result["rows"]]
            assert heads == [("decoder.self", h) for h in range(4)]
        elif name == "rollout":
            matrix = np.array(result["matrix"])
            assert result["tokens"] == fed and np.allclose(matrix.sum(-1), 1)
            assert np.allclose(np.triu(matrix, 1), 0)  # causal: nothing flows from the future
        elif name == "flow":  # the first position sees itself alone: nothing else flows in
            assert result["tokens"] == fed and result["flow"][0] > 0.99
            assert result["flow"][1:] == [0.0] * (len(fed) - 1)
        elif name == "ablation":  # the run again with every head off: its own continuation
            assert result["ablated"] == body["ablate"] and result["cosine"] is None
            assert result["output"] == fed[len(text) + 1 :] and len(result["ablated_output"]) == 4
        elif name == "contribution":  # every key of its one head, each head's distance
            assert sorted(k["position"] for k in result["keys"]) == list(range(len(fed)))
            assert len(result["distance"]) == 1 and len(result["distance"][0]) == 4
        elif name == "compare":  # the model against itself: no difference
            assert np.all(np.array(result["difference"]) == 0)
    for name, need in (("positions", "has no encoder"), ("kv-cache", "does not decode")):
        refused = toy.post(f"/api/v1/lab/{name}", json={"text": text})
        assert refused.status_code == 422
        assert (
            refused.json()["detail"].startswith(f"the {name} experiment cannot run on toy: it ")
            and need in refused.json()["detail"]
        )


def test_the_toy_is_in_the_docs_families_table(toy):
    from tests.docs_tables import families_table

    row = "| `toy` | Toy decoder-only | en | `toy-untrained` |"
    assert any(line.startswith(row) for line in families_table().splitlines())
