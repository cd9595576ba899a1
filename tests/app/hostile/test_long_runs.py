"""A long run (issue 28) says how far it has read, by the id of the request that runs it,
and stops at its next layer once that request's client goes away: its run slot is free
again in a layer's time, not after the whole pass. Between two of its layers it gives way
to other clients' short runs (issue 43)."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx2

from .conftest import client

# ~2,400 SmolLM2 tokens: a pass of several seconds, each layer a fraction of one
TEXT = "Every head of a long prompt is read a block of rows at a time, layer by layer. " * 140
REQUEST_ID = "long-run-under-test"


def progress(c: httpx2.Client, request_id: str = REQUEST_ID) -> dict | None:
    answer = c.get(f"/api/v1/progress/{request_id}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_long_run_reports_its_layers_and_stops_when_its_client_goes_away(base, healthz):
    # the request sent by hand on a socket of its own, so that closing it is the client
    # going away (as the page's Cancel aborts its fetch)
    address = urlsplit(base)
    body = json.dumps({"model": "smollm2", "text": TEXT}).encode()
    head = (
        f"POST /api/v1/analyze HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Request-ID: {REQUEST_ID}\r\n\r\n"
    ).encode()
    # (from the address of the client that polls: a run's progress is its client's alone)
    sock = socket.create_connection(
        (address.hostname, address.port), source_address=("127.0.0.71", 0)
    )
    sock.sendall(head + body)
    with client(base, "127.0.0.72") as stranger:
        time.sleep(1.0)
        assert stranger.get(f"/api/v1/progress/{REQUEST_ID}").status_code == 404
    with client(base, "127.0.0.71") as c:
        deadline = time.monotonic() + 60
        while (seen := progress(c)) is None or seen["layers_done"] < 3:
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
        assert seen["layers"] == 30 and 2000 < seen["tokens"] < 3000
        assert not seen["finished"] and seen["left_s"] > 0 and seen["elapsed_s"] > 0
        sock.close()
        time.sleep(1.0)  # the disconnect seen, the run stopped at its next layer
        stopped = progress(c)
        time.sleep(1.5)
        later = progress(c)
        assert stopped is not None and later is not None
        assert not later["finished"] and later["layers_done"] == stopped["layers_done"] < 30
        # its slot is free: a short run is answered now
        began = time.perf_counter()
        short = c.post("/api/v1/analyze", json={"model": "smollm2", "text": "A short one."})
        assert short.status_code == 200 and time.perf_counter() - began < 5
        assert c.get("/api/v1/progress/never-sent").status_code == 404


def test_a_long_pass_gives_way_between_layers_to_short_runs_only(base, healthz):
    """A long SmolLM2 pass lends its turn, between two layers, to another client's short
    run (answered in a layer's time, as a run of its own gives it) but not to a run that is
    not short (MiniLM's 500 tokens: ~280 MB estimated, past ATTNVIZ_TURN_BYTES), which
    waits for the pass to end."""
    from sentence_transformers import SentenceTransformer

    from attnviz.model.pretrained.bert import package_dir

    finished: dict[str, float] = {}
    answers: dict[str, httpx2.Response] = {}

    def send(name: str, address: str, body: dict, request_id: str | None = None) -> None:
        headers = {"X-Request-ID": request_id} if request_id else {}
        with client(base, address, timeout=300) as c:
            answers[name] = c.post("/api/v1/analyze", json=body, headers=headers)
        finished[name] = time.perf_counter()

    text = "Each client is served in its turn, between two layers of another's pass. " * 160
    long = threading.Thread(
        target=send,
        args=("long", "127.0.0.73", {"model": "smollm2", "text": text}, "giving-way"),
    )
    long.start()
    with client(base, "127.0.0.73") as c:
        deadline = time.monotonic() + 60
        while (seen := progress(c, "giving-way")) is None or seen["layers_done"] < 2:
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
    sentence = "A short sentence, read between two layers of a long pass."
    big = threading.Thread(
        target=send,
        args=("big", "127.0.0.75", {"model": "minilm", "text": "word " * 500}),
    )
    big.start()
    asked = time.perf_counter()
    send("short", "127.0.0.74", {"model": "minilm", "text": sentence})
    with client(base, "127.0.0.73") as c:
        during = progress(c, "giving-way")
    long.join()
    big.join()
    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 200)
    assert during is not None and not during["finished"] and during["layers_done"] < 30
    assert finished["short"] - asked < 5, finished["short"] - asked
    assert finished["short"] < finished["long"] < finished["big"]
    # what it read in that turn is the model's own reading (sentence-transformers')
    reference = SentenceTransformer(str(package_dir()), device="cpu").encode([sentence])[0]
    embedding = answers["short"].json()["embedding"]
    assert max(abs(a - b) for a, b in zip(embedding, reference, strict=True)) < 1e-5
    assert answers["long"].json()["source_length"] > 2000
