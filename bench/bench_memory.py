"""A model of Llama-3.2-1B's shape stored in bfloat16, served from its folder on this CPU:
the server's memory against its weights' bytes, and its first pass at 512 tokens against
transformers' own bfloat16 forward, in the same run.

    .venv/bin/python bench/bench_memory.py [--layers 16] [--tokens 512]    (make bench-memory)

Makes the folder (random weights, normal(0, 0.02), written shard by shard as bfloat16
safetensors with a config stating `dtype: bfloat16`: about 2.5 GB in a temporary folder;
nothing is downloaded), then:
1. a real `attnviz serve` with the shipped `pronounce` only: its resident memory after
   start (the server's own baseline);
2. the same server with the folder as a model of yours (ATTNVIZ_MODELS, dtype and device
   `auto`): its peak resident memory (sampled every 20 ms, and the kernel's high-water mark)
   over start-up and a first /api/v1/attention of one head at `--tokens` tokens, against
   the baseline plus the weights' bfloat16 bytes (target: at most 1.3 x those bytes);
3. in this process, the model of yours read as the server reads it (`load_origin`) and
   transformers' own `LlamaForCausalLM` (its default sdpa attention) from the same folder:
   the first pass at `--tokens` tokens of each (ours captures every head's weights, scores,
   q, k and v), then the best of two more (target: ours at most 1.3 x transformers').
Run it on a quiet machine: the ratios are what it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import psutil
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from harness.checkpoints import tokenizer
from harness.serving import start_server

# meta-llama/Llama-3.2-1B's config.json
SHAPE = dict(
    vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
    rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
)  # fmt: skip
SHARD_BYTES = 1 << 30
GIB = 2**30


def make_folder(folder: Path, layers: int) -> int:
    """The random bfloat16 checkpoint, written a shard at a time; its weights' bytes."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**SHAPE, "num_hidden_layers": layers})
    config.dtype = torch.bfloat16
    with torch.device("meta"):
        shapes = {n: p.shape for n, p in LlamaForCausalLM(config).named_parameters()}
    folder.mkdir(parents=True)
    config.save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    weight_map, shard, size, total, index = {}, {}, 0, 0, 0

    def flush() -> None:
        nonlocal shard, size, index
        if shard:
            name = f"model-{index:05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard, size, index = {}, 0, index + 1

    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensor = (torch.randn(shape, dtype=torch.float32) * 0.02).to(torch.bfloat16)
        shard[name] = tensor
        size += tensor.numel() * 2
        total += tensor.numel() * 2
        if size >= SHARD_BYTES:
            flush()
    flush()
    index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index_file))
    return total


def text_of(tokens: int) -> str:
    """A text the folder's tokenizer reads as `tokens` tokens exactly."""
    made = tokenizer()
    words = ("The quick brown fox jumps over the lazy dog. " * tokens).split(" ")
    low, high = 1, len(words)
    while low < high:  # the fewest words that make `tokens` tokens
        middle = (low + high) // 2
        if len(made.encode(" ".join(words[:middle])).ids) < tokens:
            low = middle + 1
        else:
            high = middle
    text = " ".join(words[:low])
    while len(made.encode(text).ids) > tokens:
        text = text[:-1]
    assert len(made.encode(text).ids) == tokens
    return text


class Peak:
    """A process's peak resident memory, sampled every 20 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def high_water(pid: int) -> int:
    """The kernel's peak resident memory of a process (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def served(folder: Path | None, text: str) -> tuple[int, int, int, float]:
    """(resident bytes after start, after its weights were read (a 1-token request), the
    peak, seconds of the `text` attention request) of a real server, with the folder as a
    model of yours where given."""
    env = {"ATTNVIZ_ZOO": '["pronounce"]', "ATTNVIZ_LOG_LEVEL": "warning"}
    if folder is not None:
        env["ATTNVIZ_MODELS"] = json.dumps({"llama1b": str(folder)})
    proc, base = start_server(env, timeout=300)
    peak = Peak(proc.pid)
    try:
        time.sleep(1)
        started = read = psutil.Process(proc.pid).memory_info().rss
        took = 0.0
        if folder is not None:
            body = {"model": "llama1b", "text": "The", "encoding": "u1", "layers": [0],
                    "heads": [0]}  # fmt: skip
            answer = httpx2.post(f"{base}/api/v1/attention", json=body, timeout=900)
            assert answer.status_code == 200, answer.text
            time.sleep(1)
            read = psutil.Process(proc.pid).memory_info().rss
            body["text"] = text
            began = time.perf_counter()
            answer = httpx2.post(f"{base}/api/v1/attention", json=body, timeout=900)
            took = time.perf_counter() - began
            assert answer.status_code == 200, answer.text
            info = {m["id"]: m for m in httpx2.get(f"{base}/api/v1/models").json()}["llama1b"]
            print(f"  served as {info['dtype']} on {info['device']}, {info['weight_bytes']:,} "
                  f"bytes of weights; its pool: {info['memory']['budget_bytes']:,} bytes "
                  f"({info['memory']['source']})")  # fmt: skip
            time.sleep(1)
        return started, read, max(peak.stop(), high_water(proc.pid)), took
    finally:
        peak.stop()
        proc.terminate()
        proc.wait(timeout=60)


def timed(run, times: int = 3) -> tuple[float, float]:
    """(the first call's seconds, the best of the others)."""
    seconds = []
    for _ in range(times):
        began = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - began)
    return seconds[0], min(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=16, help="decoder layers (16: 1B)")
    parser.add_argument("--tokens", type=int, default=512, help="the prompt's tokens")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama-1b-bf16"
        began = time.perf_counter()
        weights = make_folder(folder, args.layers)
        print(f"Llama-3.2-1B's shape ({args.layers} layers): {weights:,} bytes of bfloat16 "
              f"weights ({weights / GIB:.2f} GiB), written in {time.perf_counter() - began:.0f} s; "
              f"{args.tokens} tokens; {threads} torch threads")  # fmt: skip
        text = text_of(args.tokens)

        base_start, _, _, _ = served(None, text)
        start, read, peak, request = served(folder, text)
        print("\n| server | resident | less the baseline | / bf16 bytes |")
        print("| --- | ---: | ---: | ---: |")
        print(f"| pronounce only: after start (the baseline) | {base_start / GIB:.2f} GiB | | |")
        rows = (
            ("with the 1B model: after start", start),
            ("its weights read (a 1-token request)", read),
            (f"peak, over a {args.tokens}-token request ({request:.1f} s)", peak),
        )
        for what, held in rows:
            over = held - base_start
            print(f"| {what} | {held / GIB:.2f} GiB | {over / GIB:.2f} GiB | "
                  f"{over / weights:.2f}x |")  # fmt: skip

        from transformers import LlamaForCausalLM

        from attnviz.model.pretrained.sources import load_origin

        runner, origin = load_origin(folder, "llama1b")
        assert (origin.dtype, origin.backend) == ("bfloat16", "transformers"), origin
        theirs = LlamaForCausalLM.from_pretrained(folder).eval()
        assert theirs.dtype == torch.bfloat16
        ids = torch.tensor([runner.tokenize(text)[0]])
        assert ids.size(1) == args.tokens

        def ours() -> None:  # (a runner keeps no cache: the server's run cache is the app's)
            runner.run(text)

        def transformers_forward() -> None:
            with torch.no_grad():
                theirs(ids)

        our_first, our_best = timed(ours)
        their_first, their_best = timed(transformers_forward)
        print(f"\n| {args.tokens} tokens, bfloat16, this CPU | first pass | best of two more |")
        print("| --- | ---: | ---: |")
        print(f"| transformers' forward (sdpa) | {their_first:.2f} s | {their_best:.2f} s |")
        print(f"| attnviz's run (every head captured) | {our_first:.2f} s | {our_best:.2f} s |")
        print(f"| ratio | {our_first / their_first:.2f}x | {our_best / their_best:.2f}x |")


if __name__ == "__main__":
    main()
