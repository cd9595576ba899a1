"""Time `transcribe` on a 40-character sentence, with full capture and without.

    .venv/bin/python bench/bench_transcribe.py [--runs 30] [--threads 2] [--json out.json]

Both variants run interleaved in one process, so the ratio holds on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from attnviz.model.pronounce.pronouncer import Pronouncer

SENTENCE = "苹果公司发布了新款手机，它采用了最新的芯片。猫追狗，狗追猫；银行的人在街上行走"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pronouncer = Pronouncer.load()
    text = (SENTENCE * 2)[:40]
    assert len(text) == 40
    for _ in range(3):  # warm-up
        pronouncer.run(text)
    times: dict[str, list[float]] = {"full capture": [], "no capture": []}
    for _ in range(args.runs):
        for name, capture in (("full capture", True), ("no capture", False)):
            started = time.perf_counter()
            result = pronouncer.run(text, capture=capture)
            times[name].append((time.perf_counter() - started) * 1000)
    n_out = len(result.output_tokens)
    print(f"transcribe, {len(text)} characters -> {n_out} tokens, {args.threads} threads")
    print(f"{'variant':<14} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8}")
    summary = {}
    for name, values in times.items():
        q = statistics.quantiles(values, n=10)
        summary[name] = {"median_ms": statistics.median(values), "p10_ms": q[0], "p90_ms": q[-1]}
        print(f"{name:<14} {summary[name]['median_ms']:>10.1f} {q[0]:>8.1f} {q[-1]:>8.1f}")
    ratio = summary["full capture"]["median_ms"] / summary["no capture"]["median_ms"]
    print(f"capture costs x{ratio:.2f} of the plain transcription")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"text": text, "threads": args.threads, **summary}, f, indent=1)


if __name__ == "__main__":
    main()
