"""`make scale-check`: replicas are interchangeable. Three `attnviz serve` processes on
loopback ports behind HAProxy (Debian's; round robin, health-checked on /healthz, a
request whose server died before answering retried on another), then:

1. every route answers identically through the balancer and through each replica (the
   same bytes: JSON, the capture's .npz);
2. under load, one replica killed (SIGKILL) mid-way and started again: every request the
   balancer could send again gets an answer or a documented 503, none a reset, and the
   restarted one serves again. (An answer already under way when its server is killed,
   its headers forwarded, cannot be sent again by any balancer: such answers are counted
   apart, as "cut mid-way".)
3. under load, a rolling restart (SIGTERM, wait, start) of all three: nothing lost, none
   cut.

    .venv/bin/python deploy/replicas.py [--requests 300] [--clients 4] [--models pronounce]

It shows that the server keeps no state a request depends on beyond its models; it cannot
show throughput: three processes on 2 cores share the same cores (a cluster's replicas
do not). Prints the counts; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.serving import free_port

HAPROXY = """
global
    maxconn 512
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 180s
    timeout server 180s
    timeout check 2s
    retries 3
    option redispatch 1
    # a request sent to a server that died (refused, closed without an answer or with half
    # of one) goes to another; the app's requests change nothing, so each may be sent
    # again. A request is buffered whole before it is sent, so that it can be: without
    # that, about one request in 90 of a replica killed mid-way was lost (measured)
    retry-on conn-failure empty-response junk-response response-timeout
    option http-buffer-request
frontend attnviz
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
    http-response set-header X-Served-By %s
{servers}
"""
# requests every replica must answer with the same bytes
SAME = [
    ("GET", "/api/v1/models", None),
    ("POST", "/api/v1/analyze", {"model": "pronounce", "text": "银行 行走"}),
    ("POST", "/api/v1/attention", {"model": "pronounce", "text": "银行 行走", "encoding": "f4"}),
    ("POST", "/api/v1/export", {"model": "pronounce", "text": "read the record"}),
    ("POST", "/api/v1/lab/scaling", {"model": "pronounce", "text": "银行", "layer": 1}),
    ("POST", "/api/v1/neuron", {"model": "pronounce", "text": "银行", "type": "decoder.cross"}),
    ("POST", "/api/v1/qk-space", {"model": "pronounce", "text": "银行 行走 read the record"}),
    ("GET", "/", None),
]
LOAD = [
    {"model": "pronounce", "text": f"银行 行走 {i}"} for i in range(12)
]  # distinct texts: the run cache answers a repeated one without the model


@dataclass
class Counts:
    answers: int = 0
    documented_503: int = 0
    resets: int = 0
    cut: int = 0  # answers cut in the middle by a SIGKILL (begun, so not retryable)
    other: Counter = field(default_factory=Counter)
    served_by: Counter = field(default_factory=Counter)
    reset_kinds: Counter = field(default_factory=Counter)

    def line(self) -> str:
        total = (
            self.answers + self.documented_503 + self.resets + self.cut + sum(self.other.values())
        )
        return (
            f"{total} requests: {self.answers} answers, {self.documented_503} documented "
            f"503s, {self.resets} resets{f' {dict(self.reset_kinds)}' if self.resets else ''} "
            f"(and {self.cut} answers cut mid-way by the kill), "
            f"other {dict(self.other) or 0}; served by "
            f"{dict(sorted(self.served_by.items()))}"
        )


class Cluster:
    def __init__(self, n: int, models: list[str]) -> None:
        self.env = {
            **os.environ,
            "ATTNVIZ_ZOO": json.dumps(models),
            "ATTNVIZ_LOG_LEVEL": "warning",
            "ATTNVIZ_TORCH_THREADS": "1",
        }
        self.ports = [free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen | None] = [None] * n
        self.lb_port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="attnviz-lb-"))
        self.haproxy: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    def replica(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> None:
        env = {**self.env, "ATTNVIZ_PORT": str(self.ports[i])}
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "attnviz.app.cli", "serve"], env=env
        )

    def healthy(self, url: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx2.get(f"{url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout} s")
            time.sleep(0.2)

    def up(self) -> None:
        for i in range(len(self.ports)):
            self.start(i)
        for i in range(len(self.ports)):
            self.healthy(self.replica(i))
        servers = "\n".join(
            f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(self.ports)
        )
        config = self.folder / "haproxy.cfg"
        config.write_text(HAPROXY.format(port=self.lb_port, servers=servers))
        self.log = open(self.folder / "haproxy.log", "w")  # noqa: SIM115  (its access log)
        self.haproxy = subprocess.Popen(["haproxy", "-f", str(config), "-db"], stdout=self.log)
        self.healthy(self.base, timeout=30)
        self.wait_serving({f"r{i}" for i in range(len(self.ports))})

    def wait_serving(self, names: set[str], timeout: float = 60) -> None:
        """Until the balancer has sent a request to each of `names`."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while not names <= seen:
            seen.add(httpx2.get(f"{self.base}/healthz", timeout=5).headers.get("x-served-by", ""))
            if time.monotonic() > deadline:
                raise RuntimeError(f"the balancer did not send to {names - seen}")

    def down(self) -> None:
        for proc in [*self.procs, self.haproxy]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def ask(client: httpx2.Client, method: str, url: str, body) -> httpx2.Response:
    return client.request(method, url, json=body, timeout=180)


def same_everywhere(cluster: Cluster) -> list[str]:
    """Each SAME request through the balancer and each replica: (route, same?) lines."""
    lines, failed = [], False
    with httpx2.Client() as client:
        for method, path, body in SAME:
            answers = [ask(client, method, f"{cluster.base}{path}", body)]
            answers += [
                ask(client, method, f"{cluster.replica(i)}{path}", body)
                for i in range(len(cluster.ports))
            ]
            statuses = {a.status_code for a in answers}
            same = len({a.content for a in answers}) == 1 and statuses == {200}
            failed |= not same
            lines.append(
                f"{'ok  ' if same else 'FAIL'} {method} {path}: {len(answers)} answers, "
                f"{len(answers[0].content)} bytes, {'identical' if same else 'differ'}"
            )
    return lines


def load(cluster: Cluster, requests: int, clients: int, during) -> Counts:
    """`requests` analyze requests from `clients` threads through the balancer, `during`
    (a function of the count done so far) run alongside."""
    counts = Counts()
    lock = threading.Lock()
    sent = iter(range(requests))
    done = [0]

    def client_loop() -> None:
        with httpx2.Client() as client:
            for n in sent:
                try:
                    answer = client.post(
                        f"{cluster.base}/api/v1/analyze", json=LOAD[n % len(LOAD)], timeout=180
                    )
                    status = answer.status_code
                    key = "answers" if status == 200 else None
                    if status == 503 and answer.headers.get("retry-after"):
                        key = "documented_503"
                    with lock:
                        if key:
                            setattr(counts, key, getattr(counts, key) + 1)
                        else:
                            counts.other[f"HTTP {status}"] += 1
                        counts.served_by[answer.headers.get("x-served-by", "?")] += 1
                except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.ConnectError) as exc:
                    with lock:
                        if "without sending complete message body" in str(exc):
                            # the answer had begun (its headers forwarded) when its server
                            # was killed: no balancer can send such a request again
                            counts.cut += 1
                        else:
                            counts.resets += 1
                            counts.reset_kinds[f"{type(exc).__name__}: {exc}"[:120]] += 1
                except httpx2.HTTPError as exc:
                    with lock:
                        counts.other[type(exc).__name__] += 1
                with lock:
                    done[0] += 1

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for t in threads:
        t.start()
    during(lambda: done[0])
    for t in threads:
        t.join()
    return counts


def wait_until(count, n: int) -> None:
    while count() < n:
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--models", nargs="*", default=["pronounce"])
    args = parser.parse_args(argv)
    cluster = Cluster(3, args.models)
    ok = True
    try:
        started = time.monotonic()
        cluster.up()
        print(f"3 replicas and HAProxy {cluster.base} up in {time.monotonic() - started:.1f} s")
        lines = same_everywhere(cluster)
        print("\n".join(lines))
        ok &= not any(line.startswith("FAIL") for line in lines)

        def kill_one(count) -> None:
            wait_until(count, args.requests // 3)
            cluster.procs[1].send_signal(signal.SIGKILL)
            cluster.procs[1].wait()
            wait_until(count, args.requests // 2)
            cluster.start(1)
            cluster.healthy(cluster.replica(1))

        killed = load(cluster, args.requests, args.clients, kill_one)
        cluster.wait_serving({"r1"})  # it rejoined
        print(f"replica r1 killed (SIGKILL) and started again under load: {killed.line()}")
        ok &= killed.resets == 0 and not killed.other and killed.served_by.get("r1", 0) > 0

        def rolling(count) -> None:
            for i in range(3):
                wait_until(count, (i + 1) * args.requests // 5)
                cluster.procs[i].send_signal(signal.SIGTERM)
                cluster.procs[i].wait(timeout=60)
                cluster.start(i)
                cluster.healthy(cluster.replica(i))

        rolled = load(cluster, args.requests, args.clients, rolling)
        cluster.wait_serving({"r0", "r1", "r2"})
        print(f"rolling restart (SIGTERM, start) of all three under load: {rolled.line()}")
        ok &= rolled.resets == 0 and rolled.cut == 0 and not rolled.other
    finally:
        cluster.down()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
