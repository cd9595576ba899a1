"""SmolLM2-135M-Instruct on our model code against transformers, side by side.

    .venv/bin/python bench/bench_llm.py [--threads 2] [--quick]

One run, printed as tables:
  (a) at 16, 128 and 512 tokens: our bare forward pass against transformers'
      LlamaForCausalLM (eager attention, float32, the same GGUF file), and all 270 heads
      served as u1 by a real `attnviz serve` on loopback (run cache off: the model runs
      every time), in bytes per attention weight and as a multiple of our forward;
  (b) 64 generated tokens: tokens per second of our cached generation with and without
      every head's new rows captured, against transformers' `generate` (greedy, KV cache);
  (c) the server's resident memory with the zoo loaded, idle, and after a 512-token
      all-heads request.
Times are medians of a few runs; the ratios are the figures to read (absolute times on a
shared machine drift from day to day).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.model.pretrained.causal import CausalLM
from harness.references import smollm2
from harness.serving import start_server

TEXT = (
    "Attention lets every token look at every earlier one. In 2017 the Transformer replaced "
    "recurrence with it; def attend(q, k, v): return softmax(q @ k.T / 8) @ v  # 64 dims\n"
) * 40
HEADS = 30 * 9


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def prompt_of(lm: CausalLM, tokens: int) -> tuple[str, list[int]]:
    """A prefix of TEXT that is exactly `tokens` tokens, and its ids."""
    ids = lm.tokenizer.encode(TEXT).ids[:tokens]
    text = lm.tokenizer.decode(ids)
    again = lm.tokenize(text)[0]
    assert len(again) == tokens, (len(again), tokens)
    return text, again


def attention_request(base: str, text: str) -> tuple[float, int]:
    """(seconds, bytes) of one all-heads u1 request, read whole by http.client."""
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps(
        {"model": "smollm2", "text": text, "encoding": "u1",
         "repeat_tokens": False}
    )  # fmt: skip
    connection = http.client.HTTPConnection(host, int(port), timeout=600)
    start = time.perf_counter()
    connection.request("POST", "/api/v1/attention", body, {"content-type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - start
    connection.close()
    assert response.status == 200, data[:300]
    return elapsed, len(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="fewer runs and lengths (smoke)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = 1 if args.quick else 3
    lengths = [16] if args.quick else [16, 128, 512]
    new_tokens = 8 if args.quick else 64

    lm = CausalLM.load()
    ref = smollm2.model()  # (transformers' reading of the same GGUF file, kept)
    env = {
        "ATTNVIZ_ZOO": json.dumps(["smollm2"]),
        "ATTNVIZ_CACHE_BYTES": "0",
        "ATTNVIZ_TORCH_THREADS": str(args.threads),
        "ATTNVIZ_MAX_RESPONSE_BYTES": str(400_000_000),  # 512 tokens: 71 MB of u1
        "ATTNVIZ_LOG_LEVEL": "warning",
    }
    proc, base = start_server(env, timeout=180)
    server = psutil.Process(proc.pid)
    try:
        idle = server.memory_info().rss
        print(
            f"# SmolLM2-135M-Instruct, {args.threads} torch threads, load {os.getloadavg()[0]:.2f}"
        )
        print("\n## (a) forward and all heads as u1")
        columns = ["tokens", "ours fwd s", "HF fwd s", "ours/HF", "u1 s", "u1 bytes"]
        print("| " + " | ".join([*columns, "bytes/weight", "u1/ours"]) + " |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in lengths:
            text, ids = prompt_of(lm, n)
            batch = torch.tensor([ids])
            with torch.no_grad():
                lm.model(batch), ref(batch)  # warm
                ours = median_time(lambda b=batch: lm.model(b), runs)
                theirs = median_time(lambda b=batch: ref(b), runs)
            attention_request(base, text)  # warm
            served = [attention_request(base, text) for _ in range(runs)]
            seconds = statistics.median(s for s, _ in served)
            size = served[0][1]
            per_weight = size / (HEADS * n * n)
            print(
                f"| {n} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} | {seconds:.3f} | "
                f"{size:,} | {per_weight:.2f} | {seconds / ours:.2f} |"
            )
        after = server.memory_info().rss

        print(f"\n## (b) generating {new_tokens} tokens (greedy, KV cache)")
        print("| | tokens/s | vs HF generate |")
        print("|---|---:|---:|")
        _, ids = prompt_of(lm, 16)
        prompt = torch.tensor([ids])

        def ours_generate(rows: bool) -> None:
            made = list(lm.generate(ids, new_tokens, rows=rows, stop=False))
            assert len(made) == new_tokens, len(made)

        def hf_generate() -> None:
            ref.generate(
                prompt,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=2,
            )

        with torch.no_grad():
            hf = new_tokens / median_time(hf_generate, runs)
        plain = new_tokens / median_time(lambda: ours_generate(False), runs)
        captured = new_tokens / median_time(lambda: ours_generate(True), runs)
        print(f"| transformers generate | {hf:.1f} | 1.00 |")
        print(f"| ours, no capture | {plain:.1f} | {plain / hf:.2f} |")
        print(f"| ours, every head's rows captured | {captured:.1f} | {captured / hf:.2f} |")

        print("\n## (c) the server's resident memory (the smollm2 zoo: the model and its twin)")
        print(f"| idle | {idle / 2**20:.0f} MB |")
        print(f"| after the {lengths[-1]}-token all-heads requests | {after / 2**20:.0f} MB |")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
