"""Answers that had no bound: a 149 MB positional table on a GET, a 478 MB export; each is
refused before it is built, with what to ask for instead, or is within the limit."""

from __future__ import annotations

import re
import time

from bench.hostile import PROMPT

from .conftest import SETTINGS, client

LIMIT = int(SETTINGS["ATTNVIZ_MAX_RESPONSE_BYTES"])
TABLE = "/api/v1/models/smollm2/positional-encoding"


def test_a_4096_position_table_is_refused_and_says_how_many_fit(base, healthz):
    with client(base, "127.0.0.31") as c:
        began = time.perf_counter()
        refused = c.get(TABLE, params={"positions": 4096, "dims": 8})
        assert time.perf_counter() - began < 2
        assert refused.status_code == 422
        detail = refused.json()["detail"]
        assert "ATTNVIZ_MAX_RESPONSE_BYTES" in detail
        most = int(re.search(r"at most (\d+) positions", detail).group(1))
        assert 500 < most < 4096
        fits = c.get(TABLE, params={"positions": most, "dims": 8})
    assert fits.status_code == 200
    assert len(fits.content) <= LIMIT
    body = fits.json()
    assert body["positions"] == most and len(body["similarity"]) == most


def test_an_export_of_a_long_prompt_is_refused_before_it_is_built(base, healthz):
    with client(base, "127.0.0.32", timeout=120) as c:
        began = time.perf_counter()
        refused = c.post("/api/v1/export", json={"model": "smollm2", "text": PROMPT})
        took = time.perf_counter() - began
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "ATTNVIZ_MAX_RESPONSE_BYTES" in detail and "layers" in detail
        body = {"model": "smollm2", "text": PROMPT[:1500], "layers": [0]}
        one = c.post("/api/v1/export", json=body)
    assert took < 60
    assert one.status_code == 200, one.text
    assert len(one.content) <= LIMIT
    assert one.headers["content-type"] == "application/octet-stream"


def test_the_kv_cache_answer_is_within_the_limit(base, healthz):
    short = PROMPT[: 45 * 50]  # 50 of its sentences: 500 tokens, the most the lab reads
    with client(base, "127.0.0.33", timeout=120) as c:
        answer = c.post("/api/v1/lab/kv-cache", json={"model": "smollm2", "text": short})
        longer = c.post("/api/v1/lab/kv-cache", json={"model": "smollm2", "text": PROMPT})
    if answer.status_code == 200:
        assert len(answer.content) <= LIMIT
    else:
        assert answer.status_code == 422, answer.text
        assert "layer" in answer.json()["detail"]
    # past 512 tokens the lab reads no whole head: refused before the model runs
    assert longer.status_code == 422
    assert "read whole heads: at most 512 tokens" in longer.json()["detail"]


def test_a_temperature_of_1e_40_is_greedy_not_a_500(base, healthz):
    body = {"model": "smollm2", "text": "Hi", "max_new_tokens": 2, "temperature": 1e-40}
    with client(base, "127.0.0.34", timeout=120) as c:
        sampled = c.post("/api/v1/generate", json=body)
        greedy = c.post("/api/v1/generate", json={**body, "temperature": 0})
    assert sampled.status_code == 200, sampled.text
    assert [s["id"] for s in sampled.json()["steps"]] == [s["id"] for s in greedy.json()["steps"]]
