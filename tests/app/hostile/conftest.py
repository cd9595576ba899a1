"""One real uvicorn server for the hostile-client tests (issue 27), with MiniLM and
SmolLM2, short timeouts and small per-client shares, so that each pattern is seen in
seconds; and /healthz polled from a client of its own while a pattern runs."""

from __future__ import annotations

import json

import httpx2
import pytest

from bench.hostile import Healthz
from harness.serving import start_server

SETTINGS = {
    "ATTNVIZ_ZOO": json.dumps(["minilm", "smollm2"]),
    "ATTNVIZ_DEFAULT_MODEL": "minilm",
    "ATTNVIZ_LOG_FORMAT": "text",
    "ATTNVIZ_SEND_TIMEOUT_S": "3",
    "ATTNVIZ_LEAST_READ_RATE": str(2**20),  # (a slow reader seen in seconds, not minutes)
    "ATTNVIZ_CLIENT_REQUESTS": "4",
    "ATTNVIZ_CORPUS_RUNS_PER_CLIENT": "2",
    "ATTNVIZ_MAX_RESPONSE_BYTES": "20000000",
}
# /healthz while a pattern runs: its 95th percentile under HEALTHZ_MS, no two probes in a
# row over 100 ms, and none over STALL_MS. A blocked event loop or run thread (the faults
# these patterns look for) delays every probe while it lasts, so it fails all three; one
# probe delayed by a busy machine (a CI neighbour, the OS scheduler: 148 ms once in a run
# where every other probe took a few ms) fails none.
HEALTHZ_MS = 100
STALL_MS = 500


@pytest.fixture(scope="package")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    with log.open("w") as out:
        proc, base = start_server(SETTINGS, stdout=out)
    # each route's first use once (lazy imports, first compilations): the patterns' bounds
    # are for a server that has served before
    with httpx2.Client(base_url=base, timeout=120) as c:
        c.get("/api/v1/models/smollm2/positional-encoding", params={"positions": 64})
        for model in ("minilm", "smollm2"):
            c.post("/api/v1/analyze", json={"model": model, "text": "A first request."})
    yield base, log
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def base(server) -> str:
    return server[0]


@pytest.fixture
def healthz(base):
    """/healthz polled every 20 ms while the test runs; its worst latency must stay under
    HEALTHZ_MS, and a normal request be answered after."""
    with Healthz(base) as poll:
        yield poll
    said = (
        f"/healthz over {poll.probes} probes: 95th percentile {poll.p95 * 1000:.0f} ms, "
        f"worst {poll.worst * 1000:.0f} ms, {poll.slow_run} slow in a row"
    )
    print(said)
    assert poll.failures == 0
    assert poll.p95 * 1000 < HEALTHZ_MS and poll.slow_run < 2, said
    assert poll.worst * 1000 < STALL_MS, said
    normal = httpx2.post(f"{base}/api/v1/analyze", json={"text": "A normal request."}, timeout=60)
    assert normal.status_code == 200, normal.text


def client(base: str, address: str, timeout: float = 60) -> httpx2.Client:
    """A client of the server at `base` from an address of its own (Linux routes all of
    127/8 to loopback)."""
    transport = httpx2.HTTPTransport(local_address=address)
    return httpx2.Client(base_url=base, transport=transport, timeout=timeout)
