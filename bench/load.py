"""Load test: locust clients against a real uvicorn server, and /healthz probed meanwhile.

    .venv/bin/python bench/load.py [--clients 8 32 128] [--duration 60] [--json out.json]

Starts `attnviz serve` with its default settings (harness/serving.py), then for each number
of clients runs locust headless in its own process (bench/locustfile.py: analyze and
attention requests for `pronounce` and some for `minilm`, short and long texts, half of
them fresh) for `--duration` seconds, while a third process asks /healthz every 100 ms on
a new connection. Prints a table: requests served and per second, the documented 503s
(run queue full, with Retry-After) and any other error, the latency of the served model
requests, /healthz's latency, and the server's peak threads and resident memory. The
server's own log is read too: a 5xx other than a 503, or a line at error level, counts as
an error. Exits non-zero if there is any error or /healthz p99 passes `--healthz-limit-ms`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
from traffic import ROOT, Server, UsageSampler, percentile

LOCUST = Path(sys.executable).with_name("locust")


def probe_healthz(base: str, interval: float, stop, results) -> None:
    """Ask /healthz every `interval` seconds, each on a new connection (as a liveness
    probe does), until `stop` is set; put (latencies in ms, failures) on `results`."""
    url = urlsplit(base)
    latencies: list[float] = []
    failures: list[str] = []
    next_at = time.perf_counter()
    while not stop.is_set():
        started = time.perf_counter()
        try:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            connection.close()
            if response.status != 200:
                failures.append(f"status {response.status}")
        except OSError as exc:
            failures.append(repr(exc))
        latencies.append((time.perf_counter() - started) * 1000)
        next_at += interval
        if next_at < time.perf_counter():  # a slow answer: skip the ticks it missed
            next_at += (time.perf_counter() - next_at) // interval * interval + interval
        stop.wait(next_at - time.perf_counter())
    results.put((latencies, failures))


def warm_up(base: str) -> None:
    """One request per model and route, so the first level does not pay for first runs."""
    with httpx2.Client(base_url=base, timeout=120) as client:
        for model in ("pronounce", "minilm"):
            for text in ("行走在银行", "The quick brown fox jumps over the lazy dog."):
                client.post("/api/v1/analyze", json={"model": model, "text": text})
                client.post("/api/v1/attention", json={"model": model, "text": text + "!"})


def run_level(server: Server, clients: int, duration: int, seed: int, folder: Path) -> dict:
    samples_path = folder / f"samples-{clients}.json"
    env = {
        **os.environ,
        "ATTNVIZ_LOAD_SAMPLES": str(samples_path),
        "ATTNVIZ_LOAD_SEED": str(seed + clients),
    }
    command = [
        str(LOCUST),
        "-f",
        str(ROOT / "bench" / "locustfile.py"),
        "--headless",
        "-u",
        str(clients),
        "-r",
        str(clients),
        "-t",
        f"{duration}s",
        "--stop-timeout",
        "30",  # requests under way at the end finish and are counted
        "--host",
        server.base,
        "--csv",
        str(folder / f"locust-{clients}"),
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    prober = context.Process(target=probe_healthz, args=(server.base, 0.1, stop, results))
    statuses_before = server.status_counts()
    healthz_logged = len(server.healthz_ms)
    problems_before = len(server.problems)
    sampler = UsageSampler(server, interval=0.5)
    with open(folder / f"locust-{clients}.log", "w") as log:
        locust = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(2)  # locust's start-up; the probe measures the server under load
        prober.start()
        try:
            locust.wait(timeout=duration + 120)
        finally:
            if locust.poll() is None:
                locust.kill()
            stop.set()
    healthz, probe_failures = results.get(timeout=30)
    prober.join()
    sampler.stop()
    if not samples_path.exists():
        log_text = (folder / f"locust-{clients}.log").read_text()
        raise RuntimeError(f"locust wrote no samples (exit {locust.returncode}):\n{log_text}")
    samples = json.loads(samples_path.read_text())

    served = [s for s in samples if s[4] == "ok"]
    overload = [s for s in samples if s[4] == "overload"]
    errors = [s for s in samples if s[4] == "error"]
    window = max(s[1] + s[2] for s in samples) - min(s[1] for s in samples)
    latencies = [s[2] * 1000 for s in served]
    statuses = server.status_counts() - statuses_before
    server_errors = sum(n for status, n in statuses.items() if status >= 500 and status != 503)
    return {
        "clients": clients,
        "seconds": round(window, 1),
        "requests": len(samples),
        "served": len(served),
        "per_second": round(len(served) / window, 2),
        "overload_503": len(overload),
        "overload_share": round(len(overload) / len(samples), 4),
        "errors": len(errors),
        "error_examples": sorted({f"{s[0]}: {s[3]}" for s in errors})[:10],
        "server_5xx": server_errors,
        "server_log_problems": server.problems[problems_before:][:10],
        "server_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "by_name": {
            name: {
                "served": len(times),
                "p50_ms": round(percentile(times, 50), 1),
                "p99_ms": round(percentile(times, 99), 1),
            }
            for name in sorted({s[0] for s in served})
            for times in [[s[2] * 1000 for s in served if s[0] == name]]
        },
        "healthz_probes": len(healthz),
        "healthz_failures": probe_failures[:10],
        "healthz_p50_ms": round(percentile(healthz, 50), 1),
        "healthz_p99_ms": round(percentile(healthz, 99), 1),
        "healthz_max_ms": round(max(healthz, default=float("nan")), 1),
        # the part inside the app, from its access log (the rest: the event loop, the GIL)
        "healthz_in_app_p99_ms": round(percentile(server.healthz_ms[healthz_logged:], 99), 1),
        "server_threads_max": max((s[2] for s in sampler.samples), default=0),
        "server_rss_max_mib": round(max((s[1] for s in sampler.samples), default=0) / 2**20),
    }


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'clients':>7} {'requests':>8} {'served':>6} {'req/s':>6} {'busy':>5} {'busy %':>6} "
        f"{'errors':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
        f"{'healthz p50':>11} {'p99':>6} {'max':>6} {'in app':>6} {'threads':>7} {'RSS MiB':>7}"
    )
    print(header)
    for r in rows:
        errors = r["errors"] + r["server_5xx"] + len(r["server_log_problems"])
        errors += len(r["healthz_failures"])
        print(
            f"{r['clients']:>7} {r['requests']:>8} {r['served']:>6} {r['per_second']:>6.1f} "
            f"{r['overload_503']:>5} {r['overload_share'] * 100:>6.1f} {errors:>6} "
            f"{r['p50_ms']:>7.0f} {r['p95_ms']:>7.0f} {r['p99_ms']:>7.0f} "
            f"{r['healthz_p50_ms']:>11.1f} {r['healthz_p99_ms']:>6.1f} {r['healthz_max_ms']:>6.1f} "
            f"{r['healthz_in_app_p99_ms']:>6.1f} {r['server_threads_max']:>7} "
            f"{r['server_rss_max_mib']:>7}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--duration", type=int, default=60, help="seconds per level")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--healthz-limit-ms", type=float, default=100.0)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--out", default=str(ROOT / "out" / "load"), help="locust's CSVs, logs and samples"
    )
    args = parser.parse_args()
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)

    print(
        f"load: {args.duration} s per level, locust {args.clients} clients, one uvicorn "
        f"server (default settings), {os.cpu_count()} CPUs here",
        flush=True,
    )
    server = Server()
    rows = []
    try:
        warm_up(server.base)
        for i, clients in enumerate(args.clients):
            if i:
                time.sleep(3)  # let the queue drain between levels
            rows.append(run_level(server, clients, args.duration, args.seed, folder))
            r = rows[-1]
            print(
                f"  {clients} clients: {r['served']} served, {r['overload_503']} x 503, "
                f"{r['errors']} errors",
                flush=True,
            )
    finally:
        server.stop()
    print()
    print_table(rows)
    print(
        "served: 200s; busy: 503 (run queue full) or 429 (the one client's share spent: every "
        "user is on one address), each with Retry-After (documented); errors: "
        "any other status or connection error, a server 5xx or error line, a failed probe.\n"
        "p50/p95/p99: latency of served model requests; healthz: probed every 100 ms on a new "
        "connection (p50, p99, max; in app: p99 of the part the server's access log times);\n"
        "threads, RSS: the server's peak."
    )
    failures = []
    for r in rows:
        if r["errors"] or r["server_5xx"] or r["server_log_problems"] or r["healthz_failures"]:
            failures.append(f"{r['clients']} clients: errors")
            for line in r["error_examples"] + r["server_log_problems"] + r["healthz_failures"]:
                print(f"  {line}")
        if not r["healthz_p99_ms"] < args.healthz_limit_ms:
            failures.append(
                f"{r['clients']} clients: /healthz p99 {r['healthz_p99_ms']} ms "
                f">= {args.healthz_limit_ms} ms"
            )
    if server.problems and not any(r["server_log_problems"] for r in rows):
        failures.append("error lines in the server log outside the levels")
        for line in server.problems[:10]:
            print(f"  {line}")
    if args.json:
        result = {"rows": rows, "server_log_problems": server.problems[:50], "failures": failures}
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print("FAIL: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
