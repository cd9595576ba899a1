"""MiniLM attention for all heads: our server against transformers + BertViz's payload.

    .venv/bin/python bench/bench_minilm.py [--threads 2]

One run, side by side, for 16 to 512 tokens: (a) our server's all-heads attention request
(a real `attnviz serve` on loopback, run cache off so the model runs every time, read by
http.client: the server's answer, not a client library's parsing) in json and u1; (b) transformers'
BertModel with output_attentions=True and BertViz's head_view payload (format_attention +
json.dumps); (c) each bare forward pass. Times are medians of a few runs (one for BertViz
past 128 tokens); bytes are of the response body or the JSON string.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.app.catalog.zoo import load_zoo
from attnviz.app.settings import Settings
from attnviz.model.pretrained.bert import package_dir
from harness.serving import start_server

WORDS = [
    *(
        [
            "the",
            "quick",
            "brown",
            "fox",
            "jumps",
            "over",
            "the",
            "lazy",
            "dog",
            "while",
            "attention",
            "heads",
            "look",
            "back",
        ]
    ),
    *(
        [
            "at",
            "every",
            "token",
            "they",
            "have",
            "seen",
            "before",
            "and",
            "decide",
            "what",
            "matters",
            "next",
        ]
    ),
]


def text_of(minilm, n: int) -> str:
    words: list[str] = []
    while len(minilm.encode(" ".join(words)).ids) < n:
        words.append(WORDS[len(words) % len(WORDS)])
    return " ".join(words)


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def paired(ours, theirs, runs: int = 7) -> tuple[float, float]:
    """Median seconds of two functions run in turn, after a warm-up of each: alternating,
    so that a slow spell of this shared machine falls on both alike."""
    ours(), theirs()
    a, b = [], []
    for _ in range(runs):
        for fn, times in ((ours, a), (theirs, b)):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(a), statistics.median(b)


def row(address: str, minilm, reference, format_attention, n: int) -> str:
    text = text_of(minilm, n)
    ids = torch.tensor([minilm.encode(text).ids])
    tokens = ids.size(1)
    weights = 6 * 12 * tokens * tokens
    runs = 5 if tokens <= 128 else 3
    with torch.no_grad():
        ours_fwd, hf_fwd = paired(
            lambda: minilm.model(ids), lambda: reference(input_ids=ids), 15 if tokens <= 128 else 9
        )

    def ours(encoding: str) -> bytes | None:
        body = {"model": "minilm", "text": text, "encoding": encoding}
        headers = {"Content-Type": "application/json"}
        # a connection per request: uvicorn closes idle ones after 5 s
        server = http.client.HTTPConnection(address, timeout=120)
        try:
            server.request("POST", "/api/v1/attention", json.dumps(body), headers)
            response = server.getresponse()
            content = response.read()
        finally:
            server.close()
        return content if response.status == 200 else None

    def bertviz() -> str:
        tokenized = minilm.tokenizer.encode(text)
        with torch.no_grad():
            attentions = reference(input_ids=ids, output_attentions=True).attentions
        attention = format_attention(attentions, list(range(6)))
        left = right = tokenized.tokens
        payload = [
            {"name": None, "attn": attention.tolist(), "left_text": left, "right_text": right}
        ]
        return json.dumps(payload)

    ours("u1")  # a warm-up, as the forward passes have: the server's first run at a length
    json_s, json_body = timed(lambda: ours("json"), runs)
    u1_s, u1_body = timed(lambda: ours("u1"), runs)
    bv_s, bv_body = timed(bertviz, runs)
    json_cells = (
        f"{json_s:>7.3f} {len(json_body) / weights:>8.2f}"
        if json_body
        else f"{'422: over the limit':>16}"
    )
    return (
        f"{tokens:>6} {ours_fwd:>8.3f} {hf_fwd:>7.3f} {ours_fwd / hf_fwd:>7.2f} {json_cells} "
        f"{u1_s:>6.3f} {len(u1_body) / weights:>7.2f} {u1_s / hf_fwd:>6.2f} {bv_s:>9.2f} "
        f"{len(bv_body) / weights:>11.2f} {bv_s / u1_s:>7.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from bertviz.util import format_attention
    from transformers import BertModel

    torch.set_num_threads(args.threads)
    reference = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager").eval()
    minilm = load_zoo(Settings(zoo=["minilm"], default_model="minilm")).models["minilm"].runner
    env = {
        "ATTNVIZ_ZOO": '["minilm"]',
        "ATTNVIZ_DEFAULT_MODEL": "minilm",
        "ATTNVIZ_CACHE_BYTES": "0",
        "ATTNVIZ_TORCH_THREADS": str(args.threads),
        "ATTNVIZ_LOG_LEVEL": "warning",
    }
    process, base = start_server(env)
    try:
        print(f"all-MiniLM-L6-v2, 6 layers x 12 heads, {args.threads} threads; s = seconds")
        print(
            f"{'tokens':>6} {'fwd ours':>8} {'fwd HF':>7} {'ours/HF':>7} {'json s':>7} "
            f"{'json B/w':>8} {'u1 s':>6} {'u1 B/w':>7} {'u1/HF':>6} {'BertViz s':>9} "
            f"{'BertViz B/w':>11} "
            f"{'BV/u1 s':>7}"
        )
        for n in (16, 64, 128, 256, 512):
            print(row(base.removeprefix("http://"), minilm, reference, format_attention, n))
    finally:
        process.terminate()
        process.wait(30)
    print("ours/HF: our bare forward pass over transformers' (eager), paired runs in turn;")
    print("B/w: bytes on the wire per attention weight; u1/HF: our all-heads u1 request over")
    print(
        "transformers' bare forward; BV/u1: BertViz's pipeline time over ours (u1). json past the"
    )
    print("response limit (ATTNVIZ_MAX_RESPONSE_BYTES, 50 MB) is refused with a 422.")


if __name__ == "__main__":
    main()
