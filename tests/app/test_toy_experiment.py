"""A lab experiment registered from outside the app (tests/toy_experiment.py: a function,
its request and answer, one register line) gets its route, its OpenAPI description, its
place in the models' capabilities and its row in the docs' tables, with no other change."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.app.lab import EXPERIMENTS
from tests.docs_tables import experiments_table, routes_table

from .conftest import with_plugin

HEAD = {"type": "decoder.cross", "layer": 2, "head": 1}


@pytest.fixture(scope="module")
def toy():
    with with_plugin("tests.toy_experiment", EXPERIMENTS, ["pronounce"]) as client:
        yield client


def test_the_toy_is_served_and_listed(toy):
    models = toy.get("/api/v1/models").json()
    assert all("toy-strongest" in m["capabilities"]["experiments"] for m in models)
    asked = {"model": "pronounce", "text": "猫追狗", **HEAD}
    answer = toy.post("/api/v1/lab/toy-strongest", json=asked)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    # the head's weights as the attention route serves them: each row's strongest key
    block = toy.post(
        "/api/v1/attention",
        json={"model": "pronounce", "text": "猫追狗", "types": [HEAD["type"]], "layers": [2],
              "heads": [1], "encoding": "json"},
    ).json()["blocks"][0]  # fmt: skip
    weights = np.asarray(block["data"])[0]
    assert got["rows"] == block["rows"] and len(got["strongest"]) == weights.shape[0]
    np.testing.assert_allclose(got["weight"], weights.max(-1), atol=1e-6)
    assert got["strongest"] == [block["columns"][i] for i in weights.argmax(-1)]


def test_the_toys_bad_input_is_a_422_from_the_domain_error(toy):
    answer = toy.post(
        "/api/v1/lab/toy-strongest",
        json={"model": "pronounce", "text": "猫追狗", "type": "decoder.cross", "layer": 9},
    )
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("layer 9 out of range: decoder.cross has 0..")


def test_the_toy_is_in_openapi_and_the_docs_tables(toy):
    spec = toy.get("/openapi.json").json()
    operation = spec["paths"]["/api/v1/lab/toy-strongest"]["post"]
    assert operation["description"].startswith("The strongest key of each query row")
    assert operation["tags"] == ["lab"]
    said = "The strongest key of each query row of one head, and its weight."
    row = f"| `toy-strongest` | - | no | {said} |"
    assert row in experiments_table().splitlines()
    assert "| `POST /api/v1/lab/toy-strongest` |" in routes_table()
