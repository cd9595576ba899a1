"""One client cannot starve the others: its corpus runs past its share and its requests
past its share in flight get 429s with Retry-After, while another client is served."""

from __future__ import annotations

import threading
import time

import httpx2

from bench.hostile import PROMPT

from .conftest import SETTINGS, client

AT_ONCE = int(SETTINGS["ATTNVIZ_CLIENT_REQUESTS"])
RUNS = "/api/v1/corpus-runs"


def short_request_among(
    threads: list[threading.Thread], base: str, address: str
) -> tuple[httpx2.Response, float]:
    """Another client's short request (MiniLM) a second after `threads` start sending, its
    answer and how long it waited; then the threads joined."""
    for t in threads:
        t.start()
    time.sleep(1.0)
    with client(base, address, timeout=300) as other:
        asked = time.perf_counter()
        theirs = other.post("/api/v1/analyze", json={"model": "minilm", "text": "My turn."})
        waited = time.perf_counter() - asked
    for t in threads:
        t.join()
    return theirs, waited


def test_one_clients_five_corpus_runs_leave_room_for_another_clients(base, healthz):
    started, refused = [], []
    with client(base, "127.0.0.51") as c:
        for _ in range(5):
            # (1,000 sentences: ~350 units of work each, within the client's 1,200)
            answer = c.post(RUNS, json={"model": "minilm", "corpus": "hsk-en", "limit": 1000})
            (started if answer.status_code == 202 else refused).append(answer)
    assert len(started) == 2 and len(refused) == 3
    assert {r.status_code for r in refused} == {429}
    assert int(refused[0].headers["retry-after"]) >= 1
    assert "ATTNVIZ_CORPUS_RUNS_PER_CLIENT" in refused[0].json()["detail"]
    with client(base, "127.0.0.52") as other:
        theirs = other.post(RUNS, json={"model": "minilm", "sentences": ["One more."]})
        assert theirs.status_code == 202, theirs.text
        # a run is cancelled by its owner only
        run = started[0].json()
        stranger = other.post(f"{RUNS}/{run['id']}/cancel")
        assert stranger.status_code == 403
    with client(base, "127.0.0.51") as c:
        for answer in started:
            token = {"X-Owner-Token": answer.json()["owner_token"]}
            cancelled = c.post(f"{RUNS}/{answer.json()['id']}/cancel", headers=token)
            assert cancelled.status_code == 200
    deadline = time.monotonic() + 60
    while httpx2.get(f"{base}{RUNS}/{theirs.json()['id']}").json()["status"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_seventeen_slow_requests_from_one_client_leave_room_for_another(base, healthz):
    statuses: list[int] = []

    def slow(i: int) -> None:
        body = {"model": "smollm2", "text": f"{i} {PROMPT[:1500]}", "layers": [0]}
        with client(base, "127.0.0.53", timeout=300) as c:
            statuses.append(c.post(f"{base}/api/v1/export", json=body).status_code)

    threads = [threading.Thread(target=slow, args=(i,)) for i in range(17)]
    theirs, waited = short_request_among(threads, base, "127.0.0.54")
    assert theirs.status_code == 200, theirs.text
    assert statuses.count(429) == 17 - AT_ONCE and statuses.count(200) == AT_ONCE, statuses
    # the clients take the tensor thread in turn: behind the one export running, not all
    # of that client's (each takes seconds here)
    assert waited < 15, waited


def test_x_forwarded_for_is_not_believed_from_a_peer_that_is_no_trusted_proxy(base, healthz):
    lies = [{"X-Forwarded-For": f"10.0.0.{i}"} for i in range(2 * AT_ONCE)]
    statuses: list[int] = []

    def one(headers: dict[str, str]) -> None:
        body = {"model": "smollm2", "text": f"{headers} {PROMPT[:1500]}", "layers": [0]}
        with client(base, "127.0.0.55", timeout=300) as c:
            statuses.append(c.post("/api/v1/export", json=body, headers=headers).status_code)

    threads = [threading.Thread(target=one, args=(h,)) for h in lies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses.count(429) == AT_ONCE, statuses


def test_three_clients_needles_take_the_run_slot_a_step_at_a_time(base, healthz):
    """Needle in a haystack runs the model many times (three prompt passes, a token a
    step): held whole, three clients' needles kept a fourth client's short request
    waiting behind all three (13.9 s for three needles of 1,024 tokens here; 119 s for
    2,000 tokens in the issue); a slot a step, it waits for one step."""
    answers: list[httpx2.Response] = []

    def needle(seed: int) -> None:
        body = {"model": "smollm2", "text": "-", "length": 512, "seed": seed}
        with client(base, f"127.0.0.{80 + seed}", timeout=300) as c:
            answers.append(c.post("/api/v1/lab/needle", json=body))

    threads = [threading.Thread(target=needle, args=(seed,)) for seed in range(3)]
    began = time.perf_counter()
    theirs, waited = short_request_among(threads, base, "127.0.0.83")
    took = time.perf_counter() - began
    assert theirs.status_code == 200, theirs.text
    assert [a.status_code for a in answers] == [200] * 3, [a.text[:200] for a in answers]
    assert all(a.json()["answer"]["recalled"] for a in answers)
    # one step of another client's (a 512-token pass: ~1 s here) and its own run, not the
    # three needles (each ~2.5 s here)
    assert waited < min(3.0, took / 2), (waited, took)
