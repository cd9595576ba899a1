"""Shares under mixed costs: 32 honest clients on distinct addresses and one greedy client
against a real server (`make load`, after bench/load.py).

    .venv/bin/python bench/shares.py [--duration 120] [--json out.json]

The server loads pronounce, MiniLM and SmolLM2 with its default settings (each client's
share: ATTNVIZ_CLIENT_REQUESTS in flight, ATTNVIZ_CLIENT_COST_PER_MINUTE of requests and
as much of work). The honest clients, each from an address of its own (127.0.1.N; Linux
routes all of 127/8 to loopback), each one request at a time with a pause between:

- 28 `short`: the page's analyses and attention blocks (bench/traffic.py's mix), 4-12 s apart;
- 2 `generate`: 16 tokens after a fresh prompt of ~80 SmolLM2 tokens, 10 s apart;
- 1 `needle`: needle in a haystack on SmolLM2 at 1,024 tokens, 20 s apart;
- 1 `long`: a fresh prompt of ~7,800 SmolLM2 tokens (~40 s of this 2-core machine's run
  thread), once.

The mix is sized to what one run thread on 2 cores serves (about two thirds of it busy
with the honest clients' work): past that the server is full for everyone, and 503s are
its answer. An honest client that gets a 503 (the run queue full) waits its Retry-After
and sends again; its latency counts from its first try. The greedy client (127.0.2.1)
sends fresh ~600-token SmolLM2 prompts from 16 threads at once, never waiting for
Retry-After. /healthz is polled every 20 ms meanwhile (bench/hostile.py's poller).

Prints each class's requests, statuses and latency percentiles, each short client's p99,
and /healthz's. Exits non-zero where an honest client gets a 429 or an error, a request of
its is not served, the greedy client gets no 429, or a short client's p99 passes
`--short-p99-limit-s`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import httpx2
from hostile import PROMPT, Healthz
from traffic import EN_WORDS, Mix, Server, percentile

HONEST = {"short": 28, "generate": 2, "needle": 1, "long": 1}
PAUSE_S = {"short": (4, 12), "generate": (10, 10), "needle": (20, 20), "long": (10**6, 10**6)}
GREEDY_THREADS = 16
# The load runs on the server's own 2 cores: a greedy client that sent again at once after
# each refusal (1,600 429s a second) took a core from the server here, which a client on a
# machine of its own would not; so its threads pause this long after a refusal (still 160
# requests a second).
GREEDY_PAUSE_S = 0.1
RETRIES = 60  # an honest client's tries after a 503
SHORT_P99 = "short clients' p99_s"


@dataclass
class Served:
    kind: str
    client: str
    status: int
    seconds: float
    busy: int  # 503s before it was served


def fresh(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(EN_WORDS) for _ in range(words))


def request(kind: str, rng: random.Random, mix: Mix) -> tuple[str, dict]:
    if kind == "short":
        call = mix.model_call()
        return call.path, call.body or {}
    if kind == "generate":
        body = {"model": "smollm2", "text": fresh(rng, 60), "max_new_tokens": 16}
        return "/api/v1/generate", body
    if kind == "needle":
        body = {"model": "smollm2", "text": "-", "length": 1024, "seed": rng.randrange(10**6)}
        return "/api/v1/lab/needle", body
    if kind == "long":  # ~7,800 tokens, fresh (not the run cache's)
        return "/api/v1/analyze", {"model": "smollm2", "text": fresh(rng, 8) + PROMPT * 13}
    raise ValueError(kind)


def honest(base: str, kind: str, n: int, until: float, out: list[Served]) -> None:
    address = f"127.0.1.{n + 1}"
    rng, mix = random.Random(n), Mix(seed=n)
    transport = httpx2.HTTPTransport(local_address=address)
    with httpx2.Client(base_url=base, transport=transport, timeout=600) as c:
        while time.monotonic() < until:
            path, body = request(kind, rng, mix)
            began, busy = time.perf_counter(), 0
            while True:
                try:
                    answer = c.post(path, json=body)
                    status, wait = answer.status_code, answer.headers.get("retry-after")
                except httpx2.HTTPError:
                    status, wait = 0, None
                if status != 503 or busy >= RETRIES:
                    break
                busy += 1
                time.sleep(float(wait or 1))
            out.append(Served(kind, address, status, time.perf_counter() - began, busy))
            time.sleep(min(rng.uniform(*PAUSE_S[kind]), max(0, until - time.monotonic())))


def greedy(base: str, n: int, until: float, statuses: Counter) -> None:
    rng = random.Random(1000 + n)
    transport = httpx2.HTTPTransport(local_address="127.0.2.1")
    with httpx2.Client(base_url=base, transport=transport, timeout=600) as c:
        while time.monotonic() < until:
            body = {"model": "smollm2", "text": fresh(rng, 8) + PROMPT}
            try:
                status = c.post("/api/v1/analyze", json=body).status_code
            except httpx2.HTTPError:
                status = 0
            statuses[status] += 1
            if status != 200:  # (see GREEDY_PAUSE_S)
                time.sleep(GREEDY_PAUSE_S)


def row(name: str, served: list[Served]) -> dict:
    seconds = [s.seconds for s in served if s.status == 200]
    return {
        "class": name,
        "requests": len(served),
        "statuses": dict(Counter(s.status for s in served)),
        "served after a 503": sum(1 for s in served if s.busy and s.status == 200),
        "p50_s": round(percentile(seconds, 50), 2),
        "p99_s": round(percentile(seconds, 99), 2),
        "max_s": round(max(seconds, default=float("nan")), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=180, help="seconds of sending")
    parser.add_argument("--short-p99-limit-s", type=float, default=45.0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    zoo = json.dumps(["pronounce", "minilm", "smollm2"])
    server = Server({"ATTNVIZ_ZOO": zoo, "ATTNVIZ_LOG_FORMAT": "json"})
    try:
        with httpx2.Client(base_url=server.base, timeout=300) as c:  # first runs, once
            for model in ("pronounce", "minilm", "smollm2"):
                c.post("/api/v1/analyze", json={"model": model, "text": "A first request."})
        served: list[Served] = []
        greedy_statuses: Counter[int] = Counter()
        until = time.monotonic() + args.duration
        threads = [
            threading.Thread(target=honest, args=(server.base, kind, n, until, served))
            for n, kind in enumerate(k for k, count in HONEST.items() for _ in range(count))
        ]
        threads += [
            threading.Thread(target=greedy, args=(server.base, n, until, greedy_statuses))
            for n in range(GREEDY_THREADS)
        ]
        began = time.monotonic()
        with Healthz(server.base) as healthz:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        took = time.monotonic() - began
        problems = list(server.problems)
    finally:
        server.stop()

    rows = [row(kind, [s for s in served if s.kind == kind]) for kind in HONEST]
    rows.append(row("all honest", served))
    short_p99 = {
        client: percentile([s.seconds for s in mine if s.status == 200], 99)
        for client, mine in _by_client(s for s in served if s.kind == "short").items()
    }
    figures = {
        "seconds": round(took, 1),
        "classes": rows,
        SHORT_P99: {
            "best": round(min(short_p99.values()), 2),
            "median": round(percentile(list(short_p99.values()), 50), 2),
            "worst": round(max(short_p99.values()), 2),
        },
        "greedy statuses": dict(greedy_statuses),
        "healthz_ms": {
            "probes": healthz.probes,
            "p95": round(healthz.p95 * 1000, 1),
            "worst": round(healthz.worst * 1000, 1),
            "failures": healthz.failures,
        },
        "server errors logged": len(problems),
    }
    print(f"{len(served)} honest requests from 32 clients in {took:.0f} s\n")
    print(f"{'class':<12}{'requests':>9}  {'statuses':<28}{'p50 s':>7}{'p99 s':>8}{'max s':>8}")
    for r in rows:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
        print(
            f"{r['class']:<12}{r['requests']:>9}  {statuses:<28}"
            f"{r['p50_s']:>7}{r['p99_s']:>8}{r['max_s']:>8}"
        )
    print(f"\nshort clients' p99 (s): {figures[SHORT_P99]}")
    print(f"greedy client (127.0.2.1, {GREEDY_THREADS} threads): {dict(greedy_statuses)}")
    print(f"/healthz: {figures['healthz_ms']}")
    for line in problems[:5]:
        print("server:", line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)

    failures = []
    honest_bad = [s for s in served if s.status != 200]
    if honest_bad:
        failures.append(f"{len(honest_bad)} honest requests not served: {honest_bad[:3]}")
    if not greedy_statuses.get(429):
        failures.append("the greedy client got no 429")
    worst = max(short_p99.values())
    if worst > args.short_p99_limit_s:
        failures.append(f"a short client's p99 {worst:.1f} s > {args.short_p99_limit_s} s")
    if problems:
        failures.append(f"{len(problems)} error lines in the server's log")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


def _by_client(served) -> dict[str, list[Served]]:
    out: dict[str, list[Served]] = defaultdict(list)
    for s in served:
        out[s.client].append(s)
    return out


if __name__ == "__main__":
    sys.exit(main())
