"""The memory of models of yours loaded on first use and freed past the bound.

    .venv/bin/python bench/bench_own_memory.py [--room 1]

Makes two random Llamas of 136M parameters (519 MB of float32 each, about 1 GB on disk in
a temporary folder) with transformers, serves them with `pronounce` by a real `attnviz
serve` whose ATTNVIZ_OWN_MODELS_BYTES holds `--room` of them, has each generate 2 tokens
in turn (a, b, a), and prints the server's resident memory after each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import psutil
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from harness.checkpoints import tokenizer
from harness.serving import start_server

SHAPE = dict(
    vocab_size=320, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
    num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=512,
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--room", type=int, default=1, help="models the bound holds")
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        params = 0
        for seed, name in enumerate("ab"):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(LlamaConfig(**SHAPE))
            params = sum(p.numel() for p in model.parameters())
            model.save_pretrained(root / name)
            tokenizer().save(str(root / name / "tokenizer.json"))
            del model
        env = {
            "ATTNVIZ_ZOO": '["pronounce"]',
            "ATTNVIZ_LOG_LEVEL": "warning",
            "ATTNVIZ_OWN_MODELS_BYTES": str(args.room * 4 * params + 1000),
            "ATTNVIZ_MODELS": json.dumps({name: str(root / name) for name in "ab"}),
        }
        proc, base = start_server(env, timeout=180)
        server = psutil.Process(proc.pid)
        try:
            mb = lambda: server.memory_info().rss / 2**20  # noqa: E731
            print(f"{params:,} parameters a model ({4 * params / 2**20:.0f} MB of float32); "
                  f"room for {args.room}")  # fmt: skip
            time.sleep(1)
            print(f"after start: {mb():.0f} MB")
            for name in "aba":
                body = {"model": name, "text": "The quick brown fox", "max_new_tokens": 2}
                answer = httpx2.post(f"{base}/api/v1/generate", json=body, timeout=300)
                assert answer.status_code == 200, answer.text
                time.sleep(1)
                print(f"after {name} generated: {mb():.0f} MB")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
