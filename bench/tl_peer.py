"""Peer benchmark: TransformerLens 4.3 capturing attention patterns on a local HF model folder.

Measures the wall time of one ``TransformerBridge.run_with_cache`` call whose ``names_filter``
keeps only the attention-pattern hooks (``blocks.N.attn.hook_pattern``), on a batch of one
sequence of random token ids, under ``torch.no_grad()``. Per length: one warm-up run, then the
median of ``--repeat`` runs. Prints one JSON line per length:

    {"length": L, "seconds": median, "hooks": cached entries, "api": "TransformerBridge"}

The model is booted with ``TransformerBridge.boot_transformers(FOLDER)``, which loads the
``save_pretrained`` folder (GPT-2, Llama, ... architectures) with Hugging Face ``transformers``
and wraps it: the bridge computes each attention itself (eager matmul + softmax, GQA by repeating
K/V) around HF's projection and rotary modules. Nothing is fetched from a hub (HF_HUB_OFFLINE=1).
A folder without tokenizer files gets a one-token stand-in tokenizer: the ids are fed directly.

TransformerLens is not a dependency of the project; it lives in its own virtual environment:

    make ref-env  # .venv/ref: TransformerLens 4.3, pinned (harness/references/)
    .venv/ref/bin/python bench/tl_peer.py FOLDER --lengths 128 512 --repeat 5 --threads 2
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def stand_in_tokenizer():
    """A one-word tokenizer with no BOS token, so the bridge does not try to reload it."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    model = tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model), unk_token="<unk>")


def load(folder: Path):
    from transformer_lens.model_bridge import TransformerBridge

    has_tokenizer = any((folder / name).exists() for name in TOKENIZER_FILES)
    return TransformerBridge.boot_transformers(
        str(folder),
        device="cpu",
        dtype=torch.float32,
        tokenizer=None if has_tokenizer else stand_in_tokenizer(),
    )


def is_pattern(name: str) -> bool:
    return name.endswith("attn.hook_pattern")


def time_length(model, length: int, repeat: int, warmup: bool = True) -> tuple[float, int]:
    ids = torch.randint(0, model.cfg.d_vocab, (1, length))
    times = []
    with torch.no_grad():
        for i in range(repeat + int(warmup)):
            start = time.perf_counter()
            _, cache = model.run_with_cache(ids, names_filter=is_pattern)
            if i or not warmup:  # run 0 is the warm-up
                times.append(time.perf_counter() - start)
    patterns = [v for k, v in cache.items() if is_pattern(k)]
    if len(patterns) != model.cfg.n_layers or len(cache) != len(patterns):
        sys.exit(f"expected {model.cfg.n_layers} patterns, cached {sorted(cache.keys())}")
    if patterns[0].shape[-2:] != (length, length):
        sys.exit(f"pattern shape {tuple(patterns[0].shape)} for length {length}")
    return statistics.median(times), len(cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a save_pretrained model folder")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-warmup", action="store_true", help="time the first run too")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load(args.folder)
    for length in args.lengths:
        if length > model.cfg.n_ctx:
            sys.exit(f"length {length} is over the model's context of {model.cfg.n_ctx}")
        seconds, hooks = time_length(model, length, args.repeat, not args.no_warmup)
        record = {"length": length, "seconds": seconds, "hooks": hooks, "api": "TransformerBridge"}
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
