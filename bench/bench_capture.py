"""The transformers backend's capture pass against transformers' own eager forward with
`output_attentions=True`, on the same model in the same run: GPT-2-small- and
SmolLM2-shaped random models (float32, CPU), every head captured, at 128 and 512 tokens.

    .venv/bin/python bench/bench_capture.py [--repeat 5] [--threads 2]

Ours: `HFTransformer.run_with_capture` with every hook point but the logits (the app's
default run: q, k, v, scores, mask, weights and context of every layer); theirs: the same
weights loaded with attn_implementation="eager". Median of --repeat runs each, after one
warm-up. Where .venv/ref holds TransformerLens 4.3 (`make ref-env` makes it), its
`run_with_cache` filtered to the attention patterns on the same saved folder is timed too
(bench/tl_peer.py, in that environment, one model at a time, the same threads).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.model.hf.capture import ATTENTION, register
from attnviz.model.hf.loading import quiet_transformers
from attnviz.model.hf.model import HFTransformer
from bench.bench_llm import median_time as timed_runs
from harness.references import PYTHON


def median_time(fn, repeat: int) -> float:
    """One warm-up, then bench_llm's median of `repeat` runs."""
    fn()
    return timed_runs(fn, repeat)


SHAPES = {  # random models shaped as the real ones (vocabulary cut to keep the logits small)
    "GPT-2 small": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                                 vocab_size=8192)),
    "SmolLM2-135M": ("llama", dict(hidden_size=576, intermediate_size=1536,
                                   num_hidden_layers=30, num_attention_heads=9,
                                   num_key_value_heads=3, max_position_embeddings=2048,
                                   vocab_size=8192, tie_word_embeddings=True)),
}  # fmt: skip


def timings(theirs, ours, vocab: int, length: int, repeat: int) -> tuple[float, float, float]:
    """(transformers' eager forward with output_attentions, our capture pass of every hook
    point, of the weights alone), seconds."""
    ids = torch.randint(0, vocab, (1, length))
    with torch.no_grad():
        t_theirs = median_time(lambda: theirs(ids, output_attentions=True), repeat)
        t_ours = median_time(
            lambda: ours.run_with_capture(ids, names_filter=lambda n: n != "hook_logits"), repeat
        )
        t_weights = median_time(
            lambda: ours.run_with_capture(ids, names_filter=lambda n: n.endswith("hook_weights")),
            repeat,
        )
    return t_theirs, t_ours, t_weights


PEER = PYTHON  # TransformerLens's environment (`make ref-env`)


def transformer_lens(folder: str, lengths: list[int], repeat: int, threads: int) -> dict:
    """TransformerLens's seconds by length on the saved folder, or {} without its venv."""
    if not PEER.exists():
        return {}
    script = Path(__file__).with_name("tl_peer.py")
    args = [str(PEER), str(script), folder, "--repeat", str(repeat), "--threads", str(threads),
            "--lengths", *map(str, lengths)]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=3600).stdout
    return {row["length"]: row["seconds"] for row in map(json.loads, out.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="*", default=[128, 512])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet_transformers()
    register()
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{args.threads} threads, median of {args.repeat}")  # fmt: skip
    if not PEER.exists():
        print("(TransformerLens not measured: .venv/ref is missing; make ref-env makes it)")
    print("| model | tokens | transformers eager + output_attentions, s | capture pass (every "
          "hook), s | ours / theirs | capture pass (weights), s | TransformerLens run_with_cache "
          "(patterns), s | ours (weights) / TL |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (model_type, shape) in SHAPES.items():
        config = transformers.AutoConfig.for_model(model_type, **shape)
        torch.manual_seed(0)
        made = transformers.AutoModelForCausalLM.from_config(config).eval()
        with tempfile.TemporaryDirectory() as root:
            made.save_pretrained(Path(root))
            theirs = transformers.AutoModelForCausalLM.from_pretrained(
                root, attn_implementation="eager"
            ).eval()
            hf = transformers.AutoModelForCausalLM.from_pretrained(
                root, attn_implementation=ATTENTION
            ).eval()
            ours = HFTransformer(hf)
            rows = [(n, *timings(theirs, ours, shape["vocab_size"], n, args.repeat))
                    for n in args.lengths]  # fmt: skip
            del theirs, ours, hf  # (TransformerLens gets the cores and the memory)
            lens = transformer_lens(root, args.lengths, args.repeat, args.threads)
        for length, t_theirs, t_ours, t_weights in rows:
            t_lens = lens.get(length)
            peer = f"{t_lens:.3f} | {t_weights / t_lens:.2f}" if t_lens else "- | -"
            print(f"| {name} | {length} | {t_theirs:.3f} | {t_ours:.3f} | "
                  f"{t_ours / t_theirs:.2f} | {t_weights:.3f} | {peer} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
