"""Each family a model of yours may be, against transformers: the largest difference of
every layer's per-head attention and of the logits (the last hidden state for BertModel),
and whether the greedy continuation is the same.

    .venv/bin/python bench/bench_families.py [--families llama gpt2 ...]

Makes each tiny random model with transformers' own classes (2 layers, d_model 64, 4
heads, 2 key/value heads for the GQA families; eager attention, float32), saves it with
`save_pretrained` and a tokenizer trained with `tokenizers` (or writes a .gguf with the
`gguf` library), reads it with `load_origin` as the server does, and compares on three
prompts (a third of 42 tokens, longer than Mistral's window of 5).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from attnviz.model.pretrained.sources import load_origin
from harness.checkpoints import PROMPTS, saved, saved_masked_lm, tiny, wordpiece, write_gguf

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # fmt: skip
CAUSAL = {
    "llama": ("llama", {}, {}),
    "llama, tied": ("llama", {"tie_word_embeddings": True}, {}),
    "llama, bf16 in 40 KB shards": ("llama", {}, {"bf16": True, "max_shard_size": "40KB"}),
    "llama, linear RoPE x4": (
        "llama",
        {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
        {},
    ),
    "llama, llama3 RoPE": ("llama", {"rope_scaling": LLAMA3}, {}),
    "llama (GGUF)": ("llama", {}, {"gguf": True}),
    "qwen2 (Q/K/V biases)": ("qwen2", {}, {}),
    "mistral (window 5)": ("mistral", {"sliding_window": 5}, {}),
    "gpt2": ("gpt2", {}, {}),
}
ENCODERS = ("bert (BertModel)", "bert (BertForMaskedLM)")
BERT_TEXTS = ["The quick brown fox", "The quick [MASK] fox jumps over the [MASK] dog."]


def causal_row(root: Path, kind: str, extra: dict, how: dict) -> tuple[float, float, str]:
    theirs = tiny(kind, **extra)
    if how.get("gguf"):
        where = root / "tiny.gguf"
        write_gguf(theirs, where)
    else:
        stored = theirs.to(torch.bfloat16) if how.get("bf16") else theirs
        shards = {"max_shard_size": how["max_shard_size"]} if "max_shard_size" in how else {}
        where = saved(root, stored, **shards)
        theirs = stored.float()
    ours, _ = load_origin(where, "mine")
    attention = logits = 0.0
    same = []
    for prompt in PROMPTS:
        ids, _ = ours.tokenize(prompt)
        batch = torch.tensor([ids])
        with torch.no_grad():
            expected = theirs(batch, output_attentions=True)
            made = theirs.generate(batch, max_new_tokens=8, do_sample=False, eos_token_id=None,
                                   pad_token_id=0)[0, len(ids):].tolist()  # fmt: skip
        got, capture = ours.model.run_with_capture(batch)
        logits = max(logits, (got - expected.logits).abs().max().item())
        for i, weights in enumerate(expected.attentions):
            diff = capture[f"decoder.{i}.self_attn.hook_weights"] - weights
            attention = max(attention, diff.abs().max().item())
        same.append([s.token_id for s in ours.generate(ids, 8, stop=False)] == made)
    return attention, logits, f"{sum(same)}/{len(same)} identical"


def encoder_row(root: Path, name: str) -> tuple[float, float, str]:
    import transformers

    if "MaskedLM" in name:
        theirs = saved_masked_lm(root / "mlm")
        folder = root / "mlm"
    else:
        config = transformers.BertConfig(
            vocab_size=wordpiece().get_vocab_size(), hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=96, max_position_embeddings=128,
            attn_implementation="eager",
        )  # fmt: skip
        torch.manual_seed(0)
        theirs = transformers.BertModel(config).eval()
        folder = root / "bert"
        theirs.save_pretrained(folder)
        wordpiece().save(str(folder / "tokenizer.json"))
    ours, _ = load_origin(folder, "mine")
    attention = output = 0.0
    tops = []
    for text in BERT_TEXTS:
        result = ours.run(text)
        batch = torch.tensor([result.source_ids])
        with torch.no_grad():
            expected = theirs(batch, output_attentions=True)
        for i, weights in enumerate(expected.attentions):
            diff = result.capture[f"encoder.{i}.self_attn.hook_weights"] - weights
            attention = max(attention, diff.abs().max().item())
        if "MaskedLM" in name:
            output = max(output, (ours.logits(batch) - expected.logits).abs().max().item())
            probs = expected.logits[0].softmax(-1)
            for position, top in result.masked.items():
                tops.append([i for i, _ in top] == probs[position].topk(5).indices.tolist())
        else:
            hidden = ours.model(batch)
            output = max(output, (hidden - expected.last_hidden_state).abs().max().item())
    said = f"top 5 at {sum(tops)}/{len(tops)} [MASK]s identical" if tops else "(no generation)"
    return attention, output, said


def write_readme() -> None:
    """The docs' architecture table (docs/architectures.md), made anew from the matrix."""
    from harness.matrix import matrix
    from harness.matrix_table import README_END, README_START, readme_table

    path = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"
    readme = path.read_text(encoding="utf-8")
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    table = readme_table(matrix())
    path.write_text(readme[:start] + "\n" + table + "\n" + readme[end:], encoding="utf-8")
    print(f"{path.name}: the table of {table.count(chr(10)) - 1} architectures written")


def print_matrix(backend: str | None) -> None:
    """The architecture matrix (harness/matrix.py) as a table, with the capture
    pass's time over transformers' eager forward with output_attentions (best of 3)."""
    from harness.matrix import matrix

    rows = matrix(backend, speed=True)
    print("| architecture | kind | backend | served | weights, max abs diff | output vs its "
          "default forward | vs its eager one | greedy | capture / eager | reason |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        said = "equal" if r.equal else ("served, differs" if r.served else "no")
        greedy = "-" if r.greedy is None else ("same" if r.greedy else "differs")
        reason = r.reason.replace("|", "/").replace("\n", " ")[:160]
        print(f"| {r.model_type} | {r.kind} | {r.backend} | {said} | {r.weights:.1e} | "
              f"{r.output:.1e} | {r.eager:.1e} | {greedy} | {r.ratio:.2f} | {reason} |",
              flush=True)  # fmt: skip
    equal = sum(r.equal for r in rows)
    print(
        f"\n{equal} of {len(rows)} architectures through the attention interface served and equal"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", nargs="*", help="row names to run (default: all)")
    parser.add_argument("--matrix", action="store_true", help="every architecture transformers has")
    parser.add_argument("--backend", choices=["transformers"], help="with --matrix: force it")
    parser.add_argument("--readme", action="store_true", help="with --matrix: write docs' table")
    args = parser.parse_args()
    if args.matrix and args.readme:
        write_readme()
        return
    if args.matrix:
        print_matrix(args.backend)
        return
    rows = [*CAUSAL, *ENCODERS]
    chosen = [r for r in rows if not args.families or any(f in r for f in args.families)]
    print(f"torch {torch.__version__}; tiny random models, float32, eager attention")
    print(
        "| family | attention, max abs diff | logits (BertModel: hidden), max abs diff | greedy |"
    )
    print("| --- | --- | --- | --- |")
    for name in chosen:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            if name in CAUSAL:
                attention, output, said = causal_row(root, *CAUSAL[name])
            else:
                attention, output, said = encoder_row(root, name)
        print(f"| {name} | {attention:.1e} | {output:.1e} | {said} |", flush=True)


if __name__ == "__main__":
    main()
