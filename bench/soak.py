"""Soak test: 3,000 mixed requests against a real uvicorn server; its memory and threads.

    .venv/bin/python bench/soak.py [--requests 3000] [--warmup 1000] [--concurrency 4]

Starts `attnviz serve` with its default settings (harness/serving.py) and sends it, from
`--concurrency` client threads, the mix of bench/traffic.py: analyze and attention for
`pronounce` and `minilm` (half the texts fresh, 40 % of those long), exports, positional
tables, the page, health, and invalid input that must get its documented 4xx. Every
`--checkpoint` requests it lets the requests under way finish, waits a second, and reads the
server's resident memory (psutil) and thread count; a thread samples both every 250 ms
in between for the peaks. Passes when no request gets a status other than the one
expected, the server logs no error, RSS at the end is less than `--max-growth` % above RSS
after warm-up, and the thread count stays bounded: its peak after warm-up at most 4 above
its peak during warm-up. Exits non-zero on FAIL.

Why warm-up is the first 1,000 requests, with the default cache: the server keeps
captures of recent texts in a cache bounded at ATTNVIZ_CACHE_BYTES (1.5 GiB by default, what
an 8,192-token SmolLM2 prompt's views read from). Growing into that bound is by design, not a
leak, so "after warm-up" must come after the cache is full. A long `pronounce` text's
capture takes 10-15 MiB, a long `minilm` one 10-40 MiB; this mix's fresh long texts (0.8
model requests x 0.5 fresh x 0.4 long) fill it in about 1,000 requests (measured with 2,000
requests and a 200-request warm-up: RSS 2,123 MiB after 200, 3,232 MiB after 1,000, 3,253
after 2,000), and every route and the mix's largest shapes have run by then. So the
baseline is read with the cache full and evicting, and the growth after it is what the
server does at steady state, as deployed. A smaller cache would fill sooner but would hide
growth that only shows at the real size. To tell the cache, the allocator and
the request path apart, pass the server environment: `--env ATTNVIZ_CACHE_BYTES=0`,
`--env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
from traffic import Call, Mix, Server, UsageSampler, percentile

MIB = 2**20


class Client:
    """Sends calls from a thread pool, one HTTP connection per thread; records outcomes."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.local = threading.local()
        self.lock = threading.Lock()
        self.outcomes: Counter[tuple[str, int]] = Counter()
        self.unexpected: list[str] = []
        self.latencies: list[float] = []
        self.retries = 0

    def send(self, call: Call) -> None:
        if not hasattr(self.local, "client"):
            self.local.client = httpx2.Client(base_url=self.base, timeout=120)
        client = self.local.client
        # a 429 or 503 with Retry-After is retried, as a client should, for up to a minute:
        # the soak's threads share one address, whose budget of the minute the cheap
        # requests can keep spending while an export waits for its larger share
        deadline = time.perf_counter() + 60
        while True:
            started = time.perf_counter()
            try:
                if call.raw is not None:
                    headers = {"content-type": "application/json"}
                    response = client.request(
                        call.method, call.path, content=call.raw, headers=headers
                    )
                else:
                    response = client.request(call.method, call.path, json=call.body)
                status, detail = response.status_code, response.text[:200]
            except httpx2.HTTPError as exc:
                status, detail = 0, repr(exc)
            seconds = time.perf_counter() - started
            retry = status in (429, 503) and response.headers.get("retry-after")
            if retry and time.perf_counter() < deadline:
                with self.lock:
                    self.retries += 1
                time.sleep(float(response.headers["retry-after"]))
                continue
            break
        with self.lock:
            self.outcomes[(call.name, status)] += 1
            self.latencies.append(seconds * 1000)
            if status not in call.expect:
                self.unexpected.append(f"{call.name} {call.path}: {status} {detail}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=1000, help="requests before the baseline")
    parser.add_argument("--checkpoint", type=int, default=200, help="requests between readings")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument("--max-growth", type=float, default=10.0, help="%% RSS after warm-up")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the server, to tell causes apart: ATTNVIZ_CACHE_BYTES=0, "
        "MALLOC_MMAP_THRESHOLD_=131072 (repeatable)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)

    mix = Mix(seed=args.seed)
    calls = [mix.soak_call() for _ in range(args.requests)]
    # batches end at the warm-up boundary and every --checkpoint requests after it
    ends = sorted({args.warmup, *range(args.warmup, args.requests, args.checkpoint)})
    ends = [e for e in ends if 0 < e < args.requests] + [args.requests]
    print(
        f"soak: {args.requests} mixed requests from {args.concurrency} threads, warm-up "
        f"{args.warmup}, one uvicorn server ({env or 'default settings'})",
        flush=True,
    )
    server = Server(env)
    sampler = UsageSampler(server)
    client = Client(server.base)
    rows = []
    started = time.monotonic()
    warmup_end = started
    try:
        rss, threads = server.usage()
        rows.append({"requests": 0, "seconds": 0.0, "rss_mib": rss / MIB, "threads": threads})
        done = 0
        with ThreadPoolExecutor(args.concurrency) as pool:
            for end in ends:
                list(pool.map(client.send, calls[done:end]))
                done = end
                time.sleep(1)  # let the server settle before reading it
                rss, threads = server.usage()
                rows.append(
                    {
                        "requests": done,
                        "seconds": round(time.monotonic() - started, 1),
                        "rss_mib": rss / MIB,
                        "threads": threads,
                        "unexpected": len(client.unexpected),
                    }
                )
                if done == args.warmup:
                    warmup_end = time.monotonic()
                print(
                    f"  {done:>5} requests  {rows[-1]['seconds']:>6.1f} s  "
                    f"RSS {rss / MIB:7.1f} MiB  threads {threads:>3}  "
                    f"unexpected {len(client.unexpected)}",
                    flush=True,
                )
    finally:
        sampler.stop()
        server.stop()

    baseline = next(r for r in rows if r["requests"] == args.warmup)
    final = rows[-1]
    growth = (final["rss_mib"] - baseline["rss_mib"]) / baseline["rss_mib"] * 100
    during = [s for s in sampler.samples if s[0] < warmup_end]
    after = sampler.since(warmup_end)
    peak_after = max(s[1] for s in after) / MIB
    threads_warmup = max((s[2] for s in during), default=rows[0]["threads"])
    threads_after = max(s[2] for s in after)
    figures = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "server_env": env,
        "seconds": final["seconds"],
        "rss_start_mib": round(rows[0]["rss_mib"], 1),
        "rss_after_warmup_mib": round(baseline["rss_mib"], 1),
        "rss_end_mib": round(final["rss_mib"], 1),
        "rss_growth_percent": round(growth, 2),
        "rss_peak_after_warmup_mib": round(peak_after, 1),
        "threads_start": rows[0]["threads"],
        "threads_max_warmup": threads_warmup,
        "threads_max_after_warmup": threads_after,
        "threads_end": final["threads"],
        "retried_503": client.retries,
        "unexpected": client.unexpected[:20],
        "unexpected_count": len(client.unexpected),
        "server_log_problems": server.problems[:20],
        "server_statuses": {str(k): v for k, v in sorted(server.status_counts().items())},
        "latency_p50_ms": round(percentile(client.latencies, 50), 1),
        "latency_p99_ms": round(percentile(client.latencies, 99), 1),
        "outcomes": {
            f"{name} -> {status}": n for (name, status), n in sorted(client.outcomes.items())
        },
        "checkpoints": [{**r, "rss_mib": round(r["rss_mib"], 1)} for r in rows],
    }

    print()
    print(f"{'requests':>8} {'seconds':>8} {'RSS MiB':>8} {'vs warm-up':>10} {'threads':>7}")
    for r in rows:
        versus = (r["rss_mib"] / baseline["rss_mib"] - 1) * 100
        print(
            f"{r['requests']:>8} {r['seconds']:>8.1f} {r['rss_mib']:>8.1f} "
            f"{versus:>+9.1f}% {r['threads']:>7}"
        )
    print()
    print(
        f"RSS after warm-up ({args.warmup} requests) {baseline['rss_mib']:.1f} MiB, at the end "
        f"{final['rss_mib']:.1f} MiB: {growth:+.2f} % (limit {args.max_growth:g} %); peak after "
        f"warm-up {peak_after:.1f} MiB"
    )
    print(
        f"threads: {rows[0]['threads']} at start, peak {threads_warmup} during warm-up, "
        f"{threads_after} after, {final['threads']} at the end"
    )
    print(
        f"requests: {args.requests} in {final['seconds']:.0f} s, latency p50 "
        f"{figures['latency_p50_ms']:.0f} ms, p99 {figures['latency_p99_ms']:.0f} ms, "
        f"{client.retries} 429s and 503s retried; server statuses {figures['server_statuses']}"
    )
    failures = []
    if client.unexpected:
        failures.append(f"{len(client.unexpected)} unexpected statuses")
    if server.problems:
        failures.append(f"{len(server.problems)} error lines in the server log")
    if not growth < args.max_growth:
        failures.append(f"RSS grew {growth:.1f} % after warm-up")
    if threads_after > threads_warmup + 4:
        failures.append(f"threads grew from {threads_warmup} to {threads_after}")
    for line in client.unexpected[:10] + server.problems[:10]:
        print(f"  {line}")
    figures["failures"] = failures
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, ensure_ascii=False))
    print("FAIL: " + "; ".join(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
