"""The GPU check (`make gpu-check`): on a machine with one CUDA GPU and no network, the
model layer (model/, which imports nothing of the server) reads a randomly initialised
model of Llama-3.1-8B's shape in bfloat16, made on the GPU (nothing downloaded):

1. every head of a 32,768-token prompt by the long path (q and k of every head of every
   layer kept, no N x N matrix): the first pass's time against transformers' own sdpa
   forward in the same run, and the peak GPU memory against the weights' bytes;
2. a window (the last 64 rows, every key) and a pooled overview (256 x 256 cells, max) of
   three heads, against a float32 recomputation from the model's own q and k (the whole
   head's softmax at once, on the GPU);
3. transformers' eager attention with `output_attentions=True` at the longest length where
   it fits (tried from 16,384 down), for comparison;
4. SmolLM2-135M's and all-MiniLM-L6-v2's shapes (their configs; random weights, seeded:
   their files, 94 MB and 87 MB, are over what travels to the machine) on CUDA equal to
   the same folders on the CPU (model/'s code): 1e-5 in float32, and in bfloat16 to CUDA's
   bfloat16 rounding (1e-3 after softmax, the issue's figure).

It needs python3 with torch (a CUDA build), transformers, accelerate, tokenizers,
safetensors, numpy, jinja2 and pyyaml (transformers brings the last five) and gguf (the
model layer reads GGUF files), and says which is missing; nothing of FastAPI or the server.
`make gpu-carry` puts gguf's wheel (118 KB) in .gpu-carry/ here; `make gpu-check` there
installs it beside the check (`pip --target`, no network) where the machine lacks it.
`--smoke` runs the same steps on the CPU at toy sizes (tests/model/test_gpu_check.py), so
that the script is known to run before a GPU is lent. It prints a table a step, and is
sized to end within 8 minutes on an H100 (not yet run on one).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEEDED = ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "numpy", "jinja2",
          "yaml", "gguf")  # fmt: skip
# meta-llama/Llama-3.1-8B's config.json
LLAMA_8B = dict(
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128,
    max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
)  # fmt: skip
TOY = dict(
    vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
    rms_norm_eps=1e-5, tie_word_embeddings=False,
)  # fmt: skip
# HuggingFaceTB/SmolLM2-135M-Instruct (the GGUF's metadata) and all-MiniLM-L6-v2
SMOLLM2 = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
    rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=100000.0,
)  # fmt: skip
MINILM = dict(
    vocab_size=30522, hidden_size=384, intermediate_size=1536, num_hidden_layers=6,
    num_attention_heads=12, max_position_embeddings=512, type_vocab_size=2,
)  # fmt: skip


CODE = {"ours": "model/'s code", "transformers": "transformers' code"}


def missing() -> list[str]:
    found = []
    for name in NEEDED:
        try:
            importlib.import_module(name)
        except ImportError:
            found.append(name)
    return found


def say(line: str = "") -> None:
    print(line, flush=True)


class Clock:
    """Seconds of GPU work (synchronised before and after)."""

    def __init__(self, device) -> None:
        self.device = device

    def __enter__(self):
        self._sync()
        self.began = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self.began

    def _sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def peak_reset(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak(device) -> int:
    import torch

    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def made_model(shape: dict, device, dtype):
    """A randomly initialised Llama of `shape`, made on `device` in `dtype`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval().requires_grad_(False)


def long_read(args, device) -> None:
    """Steps 1-3 on the 8B shape (the toy shape with --smoke)."""
    import torch

    from attnviz.model.hf.memory import from_memory
    from attnviz.model.long import heads_of
    from harness.checkpoints import tokenizer

    shape, length = (TOY, 1024) if args.smoke else (LLAMA_8B, args.tokens)
    hf = made_model(shape, device, torch.bfloat16)
    weights = sum(p.numel() * p.element_size() for p in hf.parameters())
    say(f"## 1. Llama-3.1-8B's shape{' (toy: --smoke)' if args.smoke else ''}: "
        f"{gib(weights)} of bfloat16 weights on {device}, {length:,} tokens")  # fmt: skip
    torch.manual_seed(1)
    ids = torch.randint(0, shape["vocab_size"], (1, length), device=device)
    peak_reset(device)
    with torch.no_grad(), Clock(device) as theirs:
        hf(input_ids=ids, use_cache=False, logits_to_keep=1)
    their_peak = peak(device)
    runner = from_memory(hf, tokenizer(), "llama-8b")  # (shares hf's tensors: no copy)
    model = runner.model
    refusal = model.long_refusal
    assert refusal is None, refusal
    last = length - 64
    peak_reset(device)
    with Clock(device) as ours:
        capture, _, _ = model.long_pass(ids[0].tolist(), last)
    our_peak = peak(device)
    kept = capture.stored_bytes
    say("| pass | seconds | peak GPU memory | over the weights |")
    say("| --- | ---: | ---: | ---: |")
    say(f"| transformers' sdpa forward (last logits) | {theirs.seconds:.2f} | "
        f"{gib(their_peak)} | {gib(their_peak - weights)} |")  # fmt: skip
    say(
        f"| attnviz's long pass (q, k of every head kept: {gib(kept)}; last 64 rows' "
        f"logits) | {ours.seconds:.2f} | {gib(our_peak)} | {gib(our_peak - weights)} |"
    )
    say(f"ratio of the passes: {ours.seconds / theirs.seconds:.2f}x")
    say()

    say("## 2. windows and pooled overviews against a float32 recomputation")
    say("| head | window (64 rows x every key): max abs diff | pooled 256 x 256 (max): "
        "max abs diff | seconds (window, pooled) |")  # fmt: skip
    say("| --- | ---: | ---: | ---: |")
    layers = shape["num_hidden_layers"]
    for layer, head in ((0, 0), (layers // 2, 7 % shape["num_attention_heads"]),
                        (layers - 1, shape["num_attention_heads"] - 1)):  # fmt: skip
        prefix = f"decoder.{layer}.self_attn"
        heads = heads_of(capture, prefix)
        q = capture[f"{prefix}.hook_q"][0, head].float()
        groups = shape["num_attention_heads"] // shape["num_key_value_heads"]
        k = capture[f"{prefix}.hook_k"][0, head // groups].float()
        scores = (q @ k.T) * shape["head_dim"] ** -0.5
        hidden = torch.ones(length, length, dtype=torch.bool, device=device).triu(1)
        full = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        del scores, hidden
        with Clock(device) as window_clock:
            window, _, _ = heads.window("weights", head, (last, length), (0, length))
        cells = 256
        with Clock(device) as pool_clock:
            pooled, rows, columns = heads.window(
                "weights", head, (0, length), (0, length), pool=cells, reduce="max"
            )
        want_window = full[last:].cpu()
        side = length // cells
        want_pooled = full.view(cells, side, cells, side).amax(dim=(1, 3)).cpu()
        assert rows == columns == list(range(0, length + 1, side)), (rows[:3], columns[:3])
        window_diff = float((window - want_window).abs().max())
        pooled_diff = float((pooled - want_pooled).abs().max())
        say(f"| layer {layer}, head {head} | {window_diff:.2e} | {pooled_diff:.2e} | "
            f"{window_clock.seconds:.2f}, {pool_clock.seconds:.2f} |")  # fmt: skip
        assert window_diff <= 1e-5 and pooled_diff <= 1e-5, (window_diff, pooled_diff)
        del full
    del capture
    say()

    say("## 3. transformers' eager attention with output_attentions, for comparison")
    say("| tokens | seconds | peak GPU memory | |")
    say("| ---: | ---: | ---: | --- |")
    hf.set_attn_implementation("eager")
    for tokens in (512, 256, 128) if args.smoke else (16384, 12288, 8192, 6144, 4096, 2048):
        peak_reset(device)
        try:
            with torch.no_grad(), Clock(device) as eager:
                out = hf(input_ids=ids[:, :tokens], use_cache=False, logits_to_keep=1,
                         output_attentions=True)  # fmt: skip
            held = sum(a.numel() * a.element_size() for a in out.attentions)
            del out
            say(f"| {tokens:,} | {eager.seconds:.2f} | {gib(peak(device))} | its weights: "
                f"{gib(held)} |")  # fmt: skip
            break
        except torch.OutOfMemoryError:
            say(f"| {tokens:,} | | | out of memory |")
    del hf, runner, model
    peak_reset(device)
    say()


def small_models(args, device) -> None:
    """Step 4: SmolLM2's and MiniLM's shapes, on the device against the CPU."""
    import torch
    import transformers

    from attnviz.model.placement import Placement
    from attnviz.model.pretrained.sources import load_origin
    from harness.checkpoints import tokenizer

    say("## 4. SmolLM2's and MiniLM's shapes (random weights) on the device and on the CPU")
    say("| model | dtype | on the CPU | on the device | max abs diff of every weight |")
    say("| --- | --- | --- | --- | ---: |")
    smol = {**SMOLLM2, "num_hidden_layers": 2} if args.smoke else SMOLLM2
    mini = {**MINILM, "num_hidden_layers": 2} if args.smoke else MINILM
    text = "The quick brown fox jumps over the lazy dog. " * 8
    where = "cpu" if args.smoke else str(device)
    with tempfile.TemporaryDirectory() as tmp:
        made = {
            "SmolLM2-135M": transformers.LlamaForCausalLM(transformers.LlamaConfig(**smol)),
            "all-MiniLM-L6-v2": transformers.BertModel(transformers.BertConfig(**mini)),
        }
        for name, model in made.items():
            folder = Path(tmp) / name
            torch.manual_seed(0)
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0, 0.1)
            model.save_pretrained(folder)
            tokenizer().save(str(folder / "tokenizer.json"))
            for dtype, tolerance in (("float32", 1e-5), ("bfloat16", 1e-3)):
                cpu, cpu_origin = load_origin(folder, placement=Placement("cpu", dtype))
                gpu, gpu_origin = load_origin(folder, placement=Placement(where, dtype))
                on_cpu = cpu.run(text).capture
                on_gpu = gpu.run(text).capture
                names = [n for n in on_cpu if n.endswith("hook_weights")]
                assert names and set(names) <= set(on_gpu)
                diff = max(
                    float((on_cpu[n].float() - on_gpu[n].float().cpu()).abs().max()) for n in names
                )
                say(
                    f"| {name} | {dtype} | {CODE[cpu_origin.backend]} | "
                    f"{CODE[gpu_origin.backend]} on {gpu_origin.device} | {diff:.2e} |"
                )
                assert diff <= tolerance, (name, dtype, diff)
    say()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="toy sizes on the CPU")
    parser.add_argument("--tokens", type=int, default=32768, help="the long prompt's tokens")
    args = parser.parse_args()
    absent = missing()
    if absent:
        say(f"the GPU check needs {', '.join(absent)}: install them (pip install "
            f"{' '.join(absent)}) or carry their wheels")  # fmt: skip
        return 2
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))  # attnviz.model (which imports nothing of the server)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.utils.logging.set_verbosity_error()
    if args.smoke:
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        say(f"no CUDA device: torch {torch.__version__} sees none (--smoke runs on the CPU)")
        return 2
    else:
        device = torch.device("cuda:0")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    say(f"# attnviz GPU check: {name}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}, python {platform.python_version()}")  # fmt: skip
    began = time.perf_counter()
    long_read(args, device)
    small_models(args, device)
    say(f"done in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
