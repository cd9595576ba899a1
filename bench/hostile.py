"""A hostile client against a running server: each pattern of issue 27, its answer (status,
bytes, seconds) and the worst /healthz latency while it ran, polled every 20 ms from a
client of its own. Prints a table (or --json).

    python bench/hostile.py --url http://127.0.0.1:8000 [--patterns upload,positional]

The server should load SmolLM2 (the default zoo does). Patterns that take a client address
of their own bind to 127.0.0.2, 127.0.0.3, ... (Linux routes all of 127/8 to loopback)."""

from __future__ import annotations

import argparse
import contextlib
import json
import select
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator

import httpx2 as httpx

PROMPT = "The quick brown fox jumps over the lazy dog. " * 60  # ~600 SmolLM2 tokens


def combining_upload() -> bytes:
    """500 lines of 4000 combining marks each, in falling canonical class (4 MB): NFC
    reorders each run with an insertion sort, quadratic in its length."""
    marks = sorted(
        (chr(c) for c in range(0x300, 0x370) if unicodedata.combining(chr(c))),
        key=unicodedata.combining,
        reverse=True,
    )
    line = ("a" + "".join(marks * 100))[:4000]
    return ("\n".join([line] * 500)).encode()


class Healthz:
    """/healthz polled every 20 ms, from a process of its own (a client's own work, such as
    parsing a large answer, must not delay the polls), while a pattern runs; its worst
    latencies (worst, 95th percentile, the longest run of slow ones) and failures."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.worst = 0.0
        self.p95 = 0.0
        self.slow_run = 0  # the most probes in a row over SLOW_S
        self.failures = 0
        self.probes = 0

    def __enter__(self) -> Healthz:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--poll", self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self._proc.stdout.readline()  # its first poll is made: it is polling
        return self

    def __exit__(self, *exc: object) -> None:
        out, _ = self._proc.communicate("stop\n", timeout=60)
        found = json.loads(out.strip().splitlines()[-1])
        latencies = sorted(found["latencies"])
        self.failures, self.probes = found["failures"], len(latencies)
        self.worst = latencies[-1]
        self.p95 = latencies[int(0.95 * (len(latencies) - 1))]  # (of 20 or fewer: not the worst)
        self.slow_run = found["slow_run"]


SLOW_S = 0.1  # a probe slower than this is slow; several in a row are a stall


def poll(url: str) -> None:
    """The poller's process: polls until a line comes on stdin, then prints its figures."""
    latencies: list[float] = []
    failures = run = slow_run = 0
    transport = httpx.HTTPTransport(local_address="127.0.0.9")
    with httpx.Client(transport=transport, timeout=30) as c:
        while True:
            began = time.perf_counter()
            try:
                ok = c.get(f"{url}/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - began)
            run = run + 1 if latencies[-1] > SLOW_S else 0
            slow_run = max(slow_run, run)
            failures += not ok
            if len(latencies) == 1:
                print("polling", flush=True)
            if select.select([sys.stdin], [], [], 0.02)[0]:
                break
    said = {"latencies": latencies, "failures": failures, "slow_run": slow_run}
    print(json.dumps(said), flush=True)


def client(address: str = "127.0.0.2", timeout: float = 120) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=timeout)


def answer(response: httpx.Response) -> dict:
    return {"status": response.status_code, "bytes": len(response.content)}


def uploaded(url: str, content: bytes | Iterator[bytes]) -> dict:
    """A corpus run of one sentence of a text file sent as `content`."""
    with client() as c:
        return answer(
            c.post(
                f"{url}/api/v1/corpus-runs/upload?model=minilm&limit=1",
                content=content,
                headers={"content-type": "text/plain"},
            )
        )


def upload(url: str) -> dict:
    return uploaded(url, combining_upload())


def trickle(url: str) -> dict:
    """A 2 MB file of 20,000 lines sent in 2 kB pieces."""
    lines = "".join(f"sentence number {i} of a trickled file.{' ' * 64}\n" for i in range(20_000))
    body = lines.encode()[: 2 * 2**20]
    return uploaded(url, (body[at : at + 2048] for at in range(0, len(body), 2048)))


def positional(url: str) -> dict:
    with client() as c:
        return answer(
            c.get(f"{url}/api/v1/models/smollm2/positional-encoding?positions=4096&dims=8")
        )


def export(url: str) -> dict:
    with client() as c:
        return answer(c.post(f"{url}/api/v1/export", json={"model": "smollm2", "text": PROMPT}))


def kv_cache(url: str) -> dict:
    with client() as c:
        return answer(
            c.post(f"{url}/api/v1/lab/kv-cache", json={"model": "smollm2", "text": PROMPT})
        )


def never_reads(url: str) -> dict:
    """Three layers of a long SmolLM2 prompt asked for (16 MB), then nothing read for 60 s."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(
        {"model": "smollm2", "text": PROMPT[:1500], "layers": [0, 1, 2], "encoding": "f4"}
    ).encode()
    with socket.create_connection((host, int(port)), source_address=("127.0.0.3", 0)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(
            b"POST /api/v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        began = time.perf_counter()
        time.sleep(60)
        s.settimeout(5)
        got = 0
        try:
            while chunk := s.recv(65536):
                got += len(chunk)
        except (TimeoutError, ConnectionError):
            pass
    return {"status": "read after 60 s", "bytes": got, "waited": time.perf_counter() - began}


def corpus_runs(url: str) -> dict:
    """Five corpus runs from one client, then one from another client."""
    statuses = []
    with client("127.0.0.4") as c:
        for _ in range(5):
            statuses.append(
                c.post(
                    f"{url}/api/v1/corpus-runs", json={"model": "minilm", "corpus": "hsk-en"}
                ).status_code
            )
    with client("127.0.0.5") as c:
        other = c.post(
            f"{url}/api/v1/corpus-runs", json={"model": "minilm", "sentences": ["One more."]}
        )
    return {"status": f"first client {statuses}; another {other.status_code}", "bytes": 0}


def slow_requests(url: str) -> dict:
    """Seventeen exports (one layer of a 330-token prompt each) from one client at once,
    then another client's analyze."""
    results: list[int] = []

    def one() -> None:
        with client("127.0.0.6", timeout=300) as c, contextlib.suppress(httpx.HTTPError):
            results.append(
                c.post(
                    f"{url}/api/v1/export",
                    json={
                        "model": "smollm2",
                        "text": f"{time.time()} {PROMPT[:1500]}",
                        "layers": [0],
                    },
                ).status_code
            )

    threads = [threading.Thread(target=one) for _ in range(17)]
    for t in threads:
        t.start()
    time.sleep(1)
    began = time.perf_counter()
    with client("127.0.0.7", timeout=300) as c:
        other = c.post(f"{url}/api/v1/analyze", json={"model": "minilm", "text": "Hello there."})
    waited = time.perf_counter() - began
    for t in threads:
        t.join()
    counts = {s: results.count(s) for s in sorted(set(results))}
    counts["no answer"] = 17 - len(results)
    return {
        "status": f"17 from one: {counts}; another's analyze {other.status_code} in {waited:.1f} s",
        "bytes": len(other.content),
    }


def temperature(url: str) -> dict:
    with client() as c:
        return answer(
            c.post(
                f"{url}/api/v1/generate",
                json={"model": "smollm2", "text": "Hi", "max_new_tokens": 2, "temperature": 1e-40},
            )
        )


PATTERNS: dict[str, Callable[[str], dict]] = {
    "upload": upload,
    "trickle": trickle,
    "positional": positional,
    "export": export,
    "kv-cache": kv_cache,
    "never-reads": never_reads,
    "corpus-runs": corpus_runs,
    "slow-requests": slow_requests,
    "temperature": temperature,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--json")
    parser.add_argument("--poll", help=argparse.SUPPRESS)  # (the Healthz poller's process)
    args = parser.parse_args()
    if args.poll:
        poll(args.poll)
        return
    rows = []
    for name in args.patterns.split(","):
        began = time.perf_counter()
        with Healthz(args.url) as health:
            try:
                row = PATTERNS[name](args.url)
            except httpx.HTTPError as exc:
                row = {"status": f"{type(exc).__name__}: {exc}", "bytes": 0}
        row |= {
            "pattern": name,
            "seconds": round(time.perf_counter() - began, 2),
            "healthz_worst_ms": round(health.worst * 1000, 1),
            "healthz_p95_ms": round(health.p95 * 1000, 1),
            "healthz_failures": health.failures,
        }
        rows.append(row)
        print(
            f"| {name} | {row['status']} | {row['bytes']:,} | {row['seconds']} | "
            f"{row['healthz_worst_ms']} | {row['healthz_failures']} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
