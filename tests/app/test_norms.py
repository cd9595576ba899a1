"""Value-weighted norms through the API (`kinds: ["norms"]`), against the formula
recomputed from transformers' BertModel modules (tests/model/test_value_norms.py's
reference), and the 422s where they are not served."""

from __future__ import annotations

import base64

import numpy as np
import torch

from attnviz.model.pretrained.bert import BertRunner
from tests.model.test_value_norms import bert_reference, reference

TEXT = "The animal didn't cross the street because it was too tired."


def test_minilms_norms_are_the_formula_on_transformers_modules(client):
    ids = torch.tensor([BertRunner.load().encode(TEXT).ids])
    weights, values, wo = bert_reference(ids)[2]
    expected = reference(weights, values, wo)
    info = {m["id"]: m for m in client.get("/api/v1/models").json()}
    assert info["minilm"]["capabilities"]["value_norms"] is True
    body = {"model": "minilm", "text": TEXT, "layers": [2], "kinds": ["norms"], "encoding": "f4"}
    answer = client.post("/api/v1/attention", json=body)
    assert answer.status_code == 200, answer.text
    block = answer.json()["blocks"][0]
    got = np.frombuffer(base64.b64decode(block["data"]["bdata"]), "<f4").reshape(block["shape"])
    assert block["kind"] == "norms" and block["shape"] == list(expected.shape)
    assert np.abs(got - expected.numpy()).max() <= 1e-5 * float(expected.abs().max())
    # not the weights: a weight on a small value vector counts for less
    assert not np.allclose(got / got.sum(-1, keepdims=True), weights.numpy(), atol=1e-3)


def test_norms_are_refused_in_u1_and_served_by_windows(client):
    body = {"model": "minilm", "text": TEXT, "kinds": ["norms"], "layers": [2]}
    answer = client.post("/api/v1/attention", json={**body, "encoding": "u1"})
    assert answer.status_code == 422
    assert "u1 holds values in [0, 1] only" in answer.json()["detail"], answer.text
    whole = client.post("/api/v1/attention", json=body).json()["blocks"][0]
    window = client.post("/api/v1/attention", json={**body, "rows": [2, 5], "pool": 3})
    assert window.status_code == 200, window.text
    block = window.json()["blocks"][0]
    assert block["row_edges"] == [2, 3, 4, 5] and len(block["column_edges"]) == 4
    # each pooled cell is the largest of the whole head's values it covers
    edges = block["column_edges"]
    for h in range(len(block["heads"])):
        for i in range(3):
            row = whole["data"][h][2 + i]
            for j in range(3):
                cell = max(row[edges[j] : edges[j + 1]])
                assert abs(block["data"][h][i][j] - cell) <= 1e-3 * max(row), (h, i, j)


def test_attention_vs_contribution_is_the_formula_on_transformers_modules(client):
    """The lab's contribution experiment: per head the mean total variation distance
    between each row's weights and its norm shares, and the chosen head's keys, from
    transformers' BertModel (value projection by a hook, weights by output_attentions)."""
    ids = torch.tensor([BertRunner.load().encode(TEXT).ids])
    distance, chosen = [], None
    for i, (weights, values, wo) in enumerate(bert_reference(ids)):
        norms = reference(weights, values, wo)
        share = norms / norms.sum(-1, keepdim=True)
        distance.append((0.5 * (weights.double() - share).abs().sum(-1).mean(-1)).tolist())
        if i == 3:
            chosen = weights[5].double().mean(0), share[5].mean(0)
    body = {"model": "minilm", "text": TEXT, "type": "encoder.self", "layer": 3, "head": 5}
    answer = client.post("/api/v1/lab/contribution", json=body)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert np.abs(np.array(got["distance"]) - np.array(distance)).max() <= 1e-5
    weight, share = chosen
    gaps = [abs(k["weight"] - k["norm_share"]) for k in got["keys"]]
    assert gaps == sorted(gaps, reverse=True) and len(gaps) == ids.size(1)
    for key in got["keys"]:
        assert abs(key["weight"] - float(weight[key["position"]])) <= 1e-5
        assert abs(key["norm_share"] - float(share[key["position"]])) <= 1e-5
