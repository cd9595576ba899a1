"""Uploads that used to hold the event loop: 4 MB of combining marks (NFC reorders each
run quadratically: 12 s of /healthz silence before), and a body trickled in 2 kB pieces."""

from __future__ import annotations

import time
from collections.abc import Iterator

from bench.hostile import combining_upload

from .conftest import client

UPLOAD = "/api/v1/corpus-runs/upload?model=minilm&limit=1"


def test_an_upload_of_combining_marks_is_read_off_the_event_loop(base, healthz):
    body = combining_upload()
    assert len(body) > 3_900_000
    with client(base, "127.0.0.21") as c:
        began = time.perf_counter()
        answer = c.post(UPLOAD, content=body, headers={"content-type": "text/plain"})
    assert answer.status_code == 202, answer.text
    run = answer.json()
    assert (run["total"], run["source"]) == (1, "yours")
    assert time.perf_counter() - began < 60
    with client(base, "127.0.0.21") as c:  # (its one sentence cancelled: the next tests' room)
        c.post(f"/api/v1/corpus-runs/{run['id']}/cancel", headers=owner(run))


def test_a_trickled_upload_is_collected_in_linear_time(base, healthz):
    lines = "".join(f"sentence number {i} of a trickled file.\n" for i in range(20_000))
    body = lines.encode()[: 2 * 2**20]

    def pieces() -> Iterator[bytes]:
        for at in range(0, len(body), 2048):
            yield body[at : at + 2048]

    with client(base, "127.0.0.22") as c:
        began = time.perf_counter()
        answer = c.post(UPLOAD, content=pieces(), headers={"content-type": "text/plain"})
        took = time.perf_counter() - began
        assert answer.status_code == 202, answer.text
        assert answer.json()["total"] == 1
        c.post(f"/api/v1/corpus-runs/{answer.json()['id']}/cancel", headers=owner(answer.json()))
    assert took < 20, f"{len(body) // 2048} pieces took {took:.1f} s"


def owner(run: dict) -> dict[str, str]:
    return {"X-Owner-Token": run["owner_token"]}
