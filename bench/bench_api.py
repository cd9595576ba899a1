"""Server time of the API against the bare model, for texts of 16 to 128 source tokens.

    .venv/bin/python bench/bench_api.py [--runs 5] [--threads 2] [--json out.json]

In one process: each route through the app (no cache, so every call runs the model), and
beside it the bare forward pass and the plain transcription of the same text.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from fastapi.testclient import TestClient

from attnviz.app.main import create_app
from attnviz.app.settings import Settings

SEED_TEXT = "苹果公司发布了新款手机，它采用了最新的芯片。猫追狗，狗追猫；银行的人在街上行走。"


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(client: TestClient, n: int, runs: int) -> dict:
    pronouncer = client.app.state.inference.zoo.models["pronounce"].runner
    text = (SEED_TEXT * 4)[:n]
    result = pronouncer.run(text, capture=False)
    source = torch.tensor([result.source_ids])
    target = torch.tensor([result.target_ids])
    with torch.no_grad():
        forward = median_ms(lambda: pronouncer.model(source, target), runs)
    row = {"tokens": n, "output_tokens": len(result.output_tokens), "forward_ms": forward}
    row["transcribe_ms"] = median_ms(lambda: pronouncer.run(text, capture=False), runs)
    row["analyze_ms"] = median_ms(lambda: client.post("/api/v1/analyze", json={"text": text}), runs)
    for encoding in ("json", "u1"):
        body = {"text": text, "encoding": encoding}
        response = client.post("/api/v1/attention", json=body)
        entries = sum(math.prod(b["shape"]) for b in response.json()["blocks"])
        row[f"{encoding}_ms"] = median_ms(
            lambda body=body: client.post("/api/v1/attention", json=body), runs
        )
        row[f"{encoding}_bytes_per_entry"] = len(response.content) / entries
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    settings = Settings(torch_threads=args.threads, cache_bytes=0)
    rows = []
    with TestClient(create_app(settings)) as client:
        print(f"default model, {args.threads} threads, median of {args.runs}; times in ms")
        print(
            f"{'tokens':>6} {'out':>4} {'forward':>8} {'transcr.':>8} {'analyze':>8} "
            f"{'json ms':>8} {'u1 ms':>8} {'json B/entry':>12} {'u1 B/entry':>10}"
        )
        for n in (16, 32, 64, 128):
            row = measure(client, n, args.runs)
            rows.append(row)
            print(
                f"{n:>6} {row['output_tokens']:>4} {row['forward_ms']:>8.1f} "
                f"{row['transcribe_ms']:>8.1f} {row['analyze_ms']:>8.1f} "
                f"{row['json_ms']:>8.1f} {row['u1_ms']:>8.1f} "
                f"{row['json_bytes_per_entry']:>12.2f} {row['u1_bytes_per_entry']:>10.2f}"
            )
    print("forward: one bare forward pass over source and output; transcr.: greedy decoding")
    print("through the KV cache, no capture; the routes add capture, summaries and encoding.")
    print("The model reads at most 128 source tokens: longer text is truncated.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
