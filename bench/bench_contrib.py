"""What the contribution measures cost, against the passes they qualify, in one run.

    .venv/bin/python bench/bench_contrib.py [--threads 2] [--tokens 512] [--repeat 3]

On SmolLM2-135M (our model code; its transformers twin from the same GGUF file) and MiniLM
at `--tokens` tokens, medians of `--repeat` runs:
  - the capture pass (every head's weights), and the same pass plus the value-weighted
    norms of every head of every layer (Kobayashi et al. 2020): the issue's bound is 1.5×;
  - our bare forward pass and transformers' eager forward (the peer), and ALTI of every
    layer, composed (its own forward pass included): the bound is 3× a forward pass;
  - SmolLM2's logit lens (every depth, every position) and direct logit attribution.
The ratios are the figures to read: absolute times here drift 2× between days.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.model.methods.alti import alti
from attnviz.model.methods.lens import attribute, lens_logits, read_stream
from attnviz.model.methods.value_norms import layer_norms
from attnviz.model.pretrained.bert import BertRunner, package_dir
from attnviz.model.pretrained.causal import CausalLM
from attnviz.model.pretrained.llama import smollm2_path
from bench.bench_llm import TEXT
from bench.bench_llm import median_time as timed


def median_time(fn, runs: int) -> float:
    """bench_llm's median, after one warm-up run."""
    fn()
    return timed(fn, runs)


def measure(name, model, inputs, spec, theirs, theirs_inputs, repeat) -> list[tuple]:
    """(what, seconds, ratio, bound) rows of one model."""
    names = [spec.hook(i, p) for i in range(spec.layers) for p in ("hook_weights", "hook_v")]
    with torch.no_grad():

        def weights():
            return model.run_with_capture(*inputs, names_filter=names)

        def norms():
            _, capture = weights()
            return [layer_norms(model, capture, spec, i) for i in range(spec.layers)]

        t_weights = median_time(weights, repeat)
        t_norms = median_time(norms, repeat)
        t_forward = median_time(lambda: model(*inputs), repeat)
        t_theirs = median_time(lambda: theirs(**theirs_inputs), repeat)
        t_alti = median_time(lambda: alti(model, inputs, spec), repeat)
    return [
        (f"{name}: capture pass, every head's weights", t_weights, 1.0, ""),
        (f"{name}: the same and every head's value-weighted norms", t_norms,
         t_norms / t_weights, "≤ 1.5× the weights"),
        (f"{name}: our forward pass (no capture)", t_forward, 1.0, ""),
        (f"{name}: transformers' eager forward (the peer)", t_theirs, t_theirs / t_forward, ""),
        (f"{name}: ALTI of every layer, composed", t_alti, t_alti / t_forward,
         "≤ 3× a forward pass"),
        (f"{name}: ALTI against transformers' forward", t_alti, t_alti / t_theirs, ""),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, BertModel

    rows = []
    lm = CausalLM.load()
    ids = lm.tokenizer.encode(TEXT).ids[: args.tokens]
    batch = torch.tensor([ids])
    path = smollm2_path()
    theirs = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    spec = lm.attention[0]
    rows += measure("SmolLM2", lm.model, (batch,), spec, theirs, {"input_ids": batch},
                    args.repeat)  # fmt: skip
    with torch.no_grad():
        stream = read_stream(lm.model, (batch,))
        _, capture = lm.model.run_with_capture(batch)
    depths = len(stream.pre) + 1
    t_lens = median_time(
        lambda: [torch.softmax(lens_logits(stream, d), -1).max(-1) for d in range(depths)],
        args.repeat,
    )
    t_stream = median_time(lambda: read_stream(lm.model, (batch,)), args.repeat)
    top = stream.logits[-1].topk(2).indices.tolist()
    t_dla = median_time(
        lambda: attribute(lm.model, stream, capture, spec, len(ids) - 1, *top), args.repeat
    )
    forward = rows[2][1]
    rows += [
        ("SmolLM2: reading the residual stream (a forward pass)", t_stream, t_stream / forward,
         ""),
        (f"SmolLM2: logit lens, {depths} depths × {len(ids)} positions", t_lens,
         t_lens / forward, ""),
        ("SmolLM2: direct logit attribution at the last position", t_dla, t_dla / forward, ""),
    ]  # fmt: skip
    del theirs
    minilm = BertRunner.load()
    ids = minilm.encode(TEXT).ids[: min(args.tokens, 512)]
    source = torch.tensor([ids])
    bert = BertModel.from_pretrained(str(package_dir()), attn_implementation="eager").eval()
    rows += measure("MiniLM", minilm.model, (source,), minilm.attention[0], bert,
                    {"input_ids": source}, args.repeat)  # fmt: skip
    print(f"{len(ids)} tokens (MiniLM), {args.tokens} (SmolLM2); {args.threads} threads; "
          f"median of {args.repeat}")  # fmt: skip
    print(f"| {'what':<60} | {'seconds':>8} | {'ratio':>6} | bound |")
    print(f"| {'-' * 60} | {'-' * 8} | {'-' * 6} | --- |")
    for what, seconds, ratio, bound in rows:
        print(f"| {what:<60} | {seconds:8.3f} | {ratio:6.2f} | {bound} |")


if __name__ == "__main__":
    main()
