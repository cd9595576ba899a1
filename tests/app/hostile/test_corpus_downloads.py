"""A corpus run's table is streamed: statistics.csv of a 20,000-line upload comes in pieces
(chunked, never built whole in the server's memory), while /healthz stays fast."""

from __future__ import annotations

import csv
import io
import time

from .conftest import client

MINILM_HEADS = 6 * 12


def test_the_statistics_of_a_20000_line_corpus_are_streamed(base, healthz):
    lines = "".join(f"Line {i} of a large corpus, read by MiniLM.\n" for i in range(20_000))
    with client(base, "127.0.0.61", timeout=120) as c:
        started = c.post(
            "/api/v1/corpus-runs/upload?model=minilm",
            content=lines.encode(),
            headers={"content-type": "text/plain"},
        )
        assert started.status_code == 202, started.text
        run = started.json()
        assert run["total"] == 20_000
        deadline = time.monotonic() + 90
        while c.get(f"/api/v1/corpus-runs/{run['id']}").json()["done"] < 300:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        token = {"X-Owner-Token": run["owner_token"]}
        assert c.post(f"/api/v1/corpus-runs/{run['id']}/cancel", headers=token).status_code == 200
        while (progress := c.get(f"/api/v1/corpus-runs/{run['id']}").json())["status"] != (
            "cancelled"
        ):
            time.sleep(0.2)
        with c.stream("GET", f"/api/v1/corpus-runs/{run['id']}/statistics.csv") as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/csv")
            assert "content-length" not in answer.headers  # streamed, in pieces
            pieces = [piece for piece in answer.iter_raw()]
    table = list(csv.reader(io.StringIO(b"".join(pieces).decode())))
    assert table[0][:4] == ["sentence", "type", "layer", "head"]
    assert len(table) - 1 == progress["done"] * MINILM_HEADS
    assert len(pieces) > 1
