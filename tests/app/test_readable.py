"""What the API gives the page to read: the neuron view's row without a query named (the
most spread, not row 0 of a causal decoder's one key) and the shipped corpora in Chinese."""

from __future__ import annotations

import re

import numpy as np

PROMPT = "The capital of France is Paris, and the capital of Italy is Rome."


def post(client, path: str, status: int = 200, **body) -> dict:
    response = client.post(f"/api/v1/{path}", json=body)
    assert response.status_code == status, response.text
    return response.json()


def test_the_neuron_view_opens_on_the_most_spread_row(client):
    head = {"model": "smollm2", "text": PROMPT, "type": "decoder.self", "layer": 4, "head": 7}
    body = post(client, "neuron", **head)
    block = post(client, "attention", model="smollm2", text=PROMPT, types=["decoder.self"],
                 layers=[4], encoding="json")["blocks"][0]  # fmt: skip
    weights = np.array(block["data"], dtype=np.float64)[7]
    entropy = -(weights * np.log(np.clip(weights, 1e-30, None))).sum(-1)
    assert body["query"] != 0 and entropy[body["query"]] >= entropy.max() - 1e-4
    assert body["query_token"] == block["rows"][body["query"]]
    assert len(body["weights"]) == len(block["columns"])  # the whole row
    # a query named is the one read, row 0 included
    assert post(client, "neuron", **head, query=0)["query"] == 0


def test_the_shipped_corpora_have_chinese_titles_and_sources(client):
    corpora = {c["id"]: c for c in client.get("/api/v1/corpora").json()}
    assert set(corpora) == {"hsk-zh", "hsk-en"}
    for c in corpora.values():
        for field in ("title_zh", "source_zh"):
            assert re.search(r"[\u4e00-\u9fff]", c[field]), (c["id"], field, c[field])
        assert c["title_zh"] != c["title"]
    assert corpora["hsk-zh"]["title_zh"] != corpora["hsk-en"]["title_zh"]
