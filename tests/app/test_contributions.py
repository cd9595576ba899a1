"""The contribution experiments through the API (lens, dla, alti, graph): what each model
can run, the answers' invariants on the shipped models, and a clear 422 for what cannot be
answered. Their numbers are checked against references in tests/model/ (TransformerLens,
the authors' equations)."""

from __future__ import annotations

import pytest

TEXT = "The capital of France is"


def post(client, route: str, **body):
    return client.post(f"/api/v1/lab/{route}", json={"text": TEXT, **body})


def test_the_models_list_what_they_can_run(client):
    infos = {m["id"]: m["capabilities"]["experiments"] for m in client.get("/api/v1/models").json()}
    assert {"lens", "dla", "graph", "alti"} <= set(infos["smollm2"])
    assert "alti" in infos["minilm"] and not {"lens", "dla", "graph"} & set(infos["minilm"])
    answer = post(client, "lens", model="minilm")
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("the lens experiment cannot run on minilm: it ")


def test_the_lens_ends_on_the_models_own_prediction(client):
    r = post(client, "lens", model="smollm2", top=3).json()
    assert len(r["rows"]) == 31 and r["rows"][0]["label"] == "embeddings"
    last = r["rows"][-1]
    assert last["rank"] == 1 and last["top"][0]["id"] == r["predicted"]["id"]
    assert abs(last["probability"] - r["predicted"]["probability"]) <= 1e-6
    assert r["first"] == 0  # (at most 48 positions: all 5 of them)
    assert all(len(row["best"]) == len(r["tokens"]) and len(row["top"]) == 3 for row in r["rows"])


def test_dla_sums_to_the_logit_difference(client):
    r = post(client, "dla", model="smollm2", position=2).json()
    assert r["position"] == 2 and (r["target"]["id"], r["baseline"]["id"]) == (
        r["candidates"][0]["id"],
        r["candidates"][1]["id"],
    )
    assert abs(r["total"] - r["logit_diff"]) <= 1e-4 * max(1.0, abs(r["logit_diff"]))
    assert len(r["heads"]) == 30 and len(r["heads"][0]) == 9


def test_alti_rows_sum_to_one_and_a_decoders_future_is_empty(client):
    for model in ("minilm", "smollm2"):
        r = post(client, "alti", model=model, layer=1).json()
        for matrix in (r["composed"], r["layer_contributions"]):
            assert all(abs(sum(row) - 1) <= 1e-5 for row in matrix)
    assert all(v == 0 for i, row in enumerate(r["composed"]) for v in row[i + 1 :])


@pytest.mark.parametrize(
    ("route", "body", "said"),
    [
        ("lens", {"position": 99}, "position 99 out of range: the input has 0..4"),
        ("dla", {"target": 49152}, "target 49152 out of range: the vocabulary has 0..49151"),
        ("dla", {"target": 5, "baseline": 5}, "target and baseline are the same token"),
        ("alti", {"layer": 30}, "layer 30 out of range: decoder.self has 0..29"),
        ("graph", {"text": "word " * 200}, "the contribution graph of smollm2 reads at most 12"),
    ],
)
def test_what_cannot_be_answered_is_a_422_that_says_why(client, route, body, said):
    answer = post(client, route, model="smollm2", **body)
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"]


def test_alti_refuses_a_decoder_that_attends_to_an_encoder(client):
    answer = post(client, "alti", model="pronounce", text="猫追狗", type="decoder.self")
    assert answer.status_code == 422
    assert "attend to an encoder too" in answer.json()["detail"]
