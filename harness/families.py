"""The architecture matrix: every text architecture the installed transformers has (from
its own auto mappings, not a hand list), each as a tiny random model made from its config
class (seeded), saved with `save_pretrained`, read back by our loader as the server reads a
model of yours, and compared with the same model run by transformers: every head's
weights with its eager attention (`output_attentions=True`), its logits (or last hidden
state) with its default forward, its greedy continuation with its `generate`.

Used by tests/model/test_families.py and bench/bench_families.py (docs/architectures.md's table)."""

from __future__ import annotations

import contextlib
import io
import math
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.lens import attribute, read_stream, stream_refusal
from attnviz.model.pretrained.backends import choose, uses_attention_interface
from attnviz.model.pretrained.sources import load_origin
from attnviz.model.value_norms import output_projection

VOCAB = 320  # harness/checkpoints.py's byte-level BPE tokenizer
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"
CONTINUATION = 8
SIZES = {  # what a tiny model has, by transformers' common attribute names
    "vocab_size": VOCAB, "hidden_size": 64, "d_model": 64, "n_embd": 64,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "num_attention_heads": 4,
    "n_head": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
    "ffn_dim": 96, "d_ff": 96, "max_position_embeddings": 256, "n_positions": 256,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "kv_lora_rank": 16,
    "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    # DeepSeek's sparse attention: each query's 4 keys (fewer than the prompt has)
    "index_topk": 4, "index_n_heads": 2, "index_head_dim": 16,
    "v_head_dim": 16, "rotary_dim": 8, "embedding_size": 64,
    "encoder_layers": 2, "decoder_layers": 2, "num_decoder_layers": 2,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_heads": 4, "d_kv": 16,
    "encoder_ffn_dim": 96, "decoder_ffn_dim": 96,
}  # fmt: skip
# What an architecture's default config needs besides SIZES to make a tiny model its own
# code accepts (a hybrid's attention layer where its default has none, sizes its
# validation ties together, a setting its forward pass requires)
OVERRIDES: dict[str, dict] = {
    "bamba": {"attn_layer_indices": [1]},  # (its default: state-space layers only)
    "bert-generation": {"is_decoder": True},  # (as its decoders' checkpoints state)
    "granitemoehybrid": {"layer_types": ["linear_attention", "attention"],
                         "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_chunk_size": 16},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}}},
    "qwen4_exp_text": {"indexer_budget": 8, "indexer_compress_ratio": 2, "indexer_n_heads": 2,
                       "indexer_kv_heads": 1, "indexer_head_dim": 16},
    "esmc": {"num_key_value_heads": 4},  # (no grouped-query attention)
    "zaya": {"num_experts_per_tok": 1},
    "xmod": {"default_language": "en_XX"},  # (its adapters' language)
    **{t: {"unpadded_vocab_size": VOCAB, "swa_num_attention_heads": 4, "swa_head_dim": 16,
           "swa_num_key_value_heads": 2}  # (as its full layers, as in its default)
       for t in ("inkling2_text", "inkling2_loop_text")},
    "gemma3n_text": {"vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 16,
                     "num_hidden_layers": 4, "num_kv_shared_layers": 2,
                     "layer_types": ["sliding_attention", "full_attention"] * 2},
}  # fmt: skip


@dataclass
class Row:
    """One architecture of the matrix: served and equal, or why not."""

    model_type: str
    kind: str  # decoder-only, encoder-only, encoder-decoder
    backend: str  # ours, transformers, or "-" where refused
    served: bool
    reason: str = ""
    weights: float = float("nan")  # largest difference of a head's weights
    output: float = float("nan")  # of the logits (last hidden state)
    greedy: bool | None = None  # the same greedy continuation
    ratio: float = float("nan")  # capture pass / transformers' eager with output_attentions
    eager: float = float("nan")  # of the logits from transformers' eager forward
    theirs: float = float("nan")  # between transformers' own eager and default forwards
    # a decoder's long path (fused kernel, windows recomputed; model/hf/long.py): the
    # largest difference of its weights from transformers' eager ones, or why it has none
    long: float = float("nan")
    long_reason: str = ""
    # value-weighted norms: each layer's heads' vectors Σ_j α_hij f_h(x_j) summed over heads
    # (with the projection's bias) against what its output projection gave in the forward
    # pass, relative to the largest output; or why the norms are not served
    norms: float = float("nan")
    norms_reason: str = ""
    # a decoder's residual stream (model/lens.py: the logit lens, DLA, the graph): how far
    # direct logit attribution's terms sum from the logit difference, or why it is not read
    stream: float = float("nan")
    stream_reason: str = ""

    @property
    def equal(self) -> bool:
        return (
            self.served
            and self.weights <= 1e-5
            and self.output <= 1e-4
            and self.greedy is not False
        )


def text_architectures() -> dict[str, str]:
    """model_type -> kind of every text architecture transformers' auto mappings name for
    language modelling (a config with sub-configs is multimodal and left out)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto as auto

    kinds: dict[str, str] = {}
    for model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        kinds[model_type] = "encoder-decoder"
    for model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        kinds.setdefault(model_type, "encoder-only")
    for model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        kinds.setdefault(model_type, "decoder-only")
    text = {}
    for model_type, kind in sorted(kinds.items()):
        try:
            config_class = CONFIG_MAPPING[model_type]
        except KeyError:
            continue
        if getattr(config_class, "sub_configs", None):
            continue  # multimodal (text_config, vision_config, ...)
        text[model_type] = kind
    return text


def interface_architectures() -> dict[str, str]:
    """The text architectures whose attention goes through the attention interface."""
    return {t: k for t, k in text_architectures().items() if uses_attention_interface(t)}


def stated(config, name: str):
    """A config's attribute, or None where it has none (or states it per layer only)."""
    try:
        return getattr(config, name, None)
    except Exception:  # (transformers' per-layer attributes raise their own error)
        return None


def has(config, name: str) -> bool:
    """Whether a config has an attribute stated for the whole model."""
    try:
        getattr(config, name)
    except Exception:  # missing, or per-layer only (transformers' own error)
        return False
    return True


def tiny_config(model_type: str, keep_layers: bool | int = False):
    """The architecture's default config made tiny: the sizes SIZES names that it has,
    passed to its constructor (so that what it derives from them, per-layer lists
    included, follows), no dropout, special ids within the vocabulary. `keep_layers`
    keeps its number of layers (a hybrid whose first layers have no attention, or one
    whose layer pattern is validated against it)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    sizes = {k: v for k, v in SIZES.items() if has(default, k)}
    if keep_layers:
        for name in ("num_hidden_layers", "num_layers", "n_layer"):
            sizes.pop(name, None)
    if "qk_rope_head_dim" in sizes and "head_dim" in sizes:  # MLA: head_dim is RoPE's part
        sizes["head_dim"] = sizes["qk_rope_head_dim"]
    if "kv_lora_rank" in sizes and "num_key_value_heads" in sizes:  # MLA: a key per head
        sizes["num_key_value_heads"] = sizes["num_attention_heads"]
    for value in vars(default).values():  # a hybrid's first attention layer kept
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            found = [i for i, v in enumerate(value) if "attention" in v and "linear" not in v]
            if found and found[0] >= sizes.get("num_hidden_layers", 2):
                sizes["num_hidden_layers"] = found[0] + 1
    sizes.update(OVERRIDES.get(model_type, {}))
    if stated(default, "sliding_window"):
        sizes["sliding_window"] = 6  # shorter than the prompt: the window hides keys
    for name, value in vars(default).items():
        if ("dropout" in name or name.endswith("_pdrop")) and isinstance(value, float):
            sizes[name] = 0.0
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = stated(default, name)
        if (isinstance(value, int) and value >= VOCAB) or isinstance(value, list):
            sizes[name] = 0
    try:
        return AutoConfig.for_model(model_type, **sizes)
    except Exception:  # sizes its validation refuses
        if keep_layers is not True:
            return tiny_config(model_type, keep_layers=True)
        raise


def reference(model_type: str, kind: str, folder: Path, eager: bool):

    from attnviz.model.hf.runners import model_class

    implementation = {"attn_implementation": "eager"} if eager else {}
    with contextlib.redirect_stderr(io.StringIO()):
        return model_class(kind).from_pretrained(folder, **implementation).eval()


def build_model(model_type: str, kind: str, keep_layers: bool | int = False):
    """A tiny seeded random model of the architecture (eager attention, float32)."""
    from attnviz.model.hf.runners import model_class, quiet_transformers

    quiet_transformers()
    config = tiny_config(model_type, keep_layers)
    torch.manual_seed(0)
    with contextlib.redirect_stderr(io.StringIO()):
        model = model_class(kind).from_config(config, attn_implementation="eager").eval()
    generation = getattr(model, "generation_config", None)
    if kind == "encoder-decoder" and generation and generation.decoder_start_token_id is None:
        generation.decoder_start_token_id = 0  # (T5's checkpoints state it there)
    with torch.no_grad():  # away from the initialisation's near-uniform attention
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "embed" not in name:
                p.normal_(0, 0.15)
    return model


def build(model_type: str, kind: str, folder: Path, keep_layers: bool | int = False) -> None:
    """A tiny seeded random model of the architecture, saved with its tokenizer."""
    from harness.checkpoints import tokenizer

    model = build_model(model_type, kind, keep_layers)
    model.save_pretrained(folder)
    tokenizer().save(str(folder / "tokenizer.json"))


def save_masked_roberta(folder: Path) -> Path:
    """A tiny RobertaForMaskedLM with a tokenizer that has RoBERTa's specials (<s> 0,
    <pad> 1, </s> 2, <mask>)."""
    from harness.checkpoints import tokenizer

    build_model("roberta", "masked-lm").save_pretrained(folder)
    tokenizer(("<s>", "<pad>", "</s>", "<mask>")).save(str(folder / "tokenizer.json"))
    return folder


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def compare(model_type: str, kind: str, backend: str | None = None, speed: bool = False) -> Row:
    """One architecture through the matrix (`backend="transformers"` forces that path)."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    try:
        chosen = choose(model_type, backend).backend
    except CheckpointError as exc:
        return Row(model_type, kind, "-", False, str(exc))
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / model_type
        try:
            build(model_type, kind, folder)
        except Exception as exc:  # (the matrix lists what it cannot build)
            return Row(
                model_type, kind, chosen, False, f"no tiny model: {type(exc).__name__}: {exc}"[:300]
            )
        try:
            try:
                runner, _ = load_origin(folder, model_type, backend=backend)  # type: ignore[arg-type]
            except CheckpointError as exc:
                if "nothing to capture" not in str(exc):
                    raise
                # a hybrid whose first layers hold no attention: 8 layers, tiny
                shutil.rmtree(folder)
                build(model_type, kind, folder, keep_layers=8)
                runner, _ = load_origin(folder, model_type, backend=backend)  # type: ignore[arg-type]
        except CheckpointError as exc:
            return Row(model_type, kind, chosen, False, str(exc).replace(str(folder), "<folder>"))
        except Exception as exc:  # (a rebuild that transformers refuses)
            return Row(
                model_type, kind, chosen, False, f"no tiny model: {type(exc).__name__}: {exc}"[:300]
            )
        try:
            return measured(model_type, kind, folder, runner, chosen, speed)
        except Exception as exc:  # (listed: transformers' own run fails too)
            return Row(
                model_type,
                kind,
                chosen,
                False,
                f"fails when run: {type(exc).__name__}: {exc}"[:300],
            )


def softmax_layers(config, layers: tuple) -> list:
    """The layers of transformers' `attentions` that are softmax weights: where a hybrid
    also returns its linear-attention layers' states there (MiniMax), the ones its
    `layer_types` names as linear are left out."""
    types = stated(config, "layer_types")
    if isinstance(types, list) and len(types) == len(layers):
        layers = tuple(a for a, t in zip(layers, types, strict=True) if "linear" not in str(t))
    return [a for a in layers if a is not None]


def weight_pairs(kind: str, expected, capture, config=None) -> list[float]:
    """The largest difference of each layer's weights, per attention type; inf where a
    layer transformers gives was not captured."""
    if kind == "encoder-decoder":
        theirs = {"encoder.{}.self_attn": expected.encoder_attentions,
                  "decoder.{}.self_attn": expected.decoder_attentions,
                  "decoder.{}.cross_attn": expected.cross_attentions}  # fmt: skip
    else:
        stack = "encoder" if kind == "encoder-only" else "decoder"
        theirs = {stack + ".{}.self_attn": expected.attentions}
    diffs = []
    for pattern, layers in theirs.items():
        for i, w in enumerate(softmax_layers(config, layers)):
            name = pattern.format(i) + ".hook_weights"
            diffs.append(
                (capture[name] - w).abs().max().item() if name in capture else float("inf")
            )
    return diffs


def measured(model_type: str, kind: str, folder: Path, runner, chosen: str, speed: bool) -> Row:
    """One architecture's differences and speed, read back by our loader as `runner`."""
    eager = reference(model_type, kind, folder, eager=True)
    default = reference(model_type, kind, folder, eager=False)
    ids, _ = runner.tokenize(PROMPT)
    batch = torch.tensor([ids])
    inputs: tuple = (batch,)
    theirs_inputs: dict = {}
    if kind == "encoder-decoder":  # the decoder fed what it decodes (at least 2 tokens)
        fed = runner.decode_piece(ids).target_ids
        target = torch.tensor([(fed * 2)[: max(2, len(fed))]])
        inputs, theirs_inputs = (batch, target), {"decoder_input_ids": target}
    with torch.no_grad():
        expected = eager(batch, **theirs_inputs, output_attentions=True)
        plain = default(batch, **theirs_inputs)
    with projections_seen(runner) as seen:
        out, capture = runner.model.run_with_capture(
            *inputs, names_filter=lambda n: n.endswith(("hook_weights", "hook_v"))
        )
    diffs = weight_pairs(kind, expected, capture, eager.config)

    def outputs(o):
        return o.last_hidden_state if kind == "encoder-only" else o.logits

    wanted, eager_out = outputs(plain), outputs(expected)
    row = Row(model_type, kind, chosen, True, weights=max(diffs),
              output=(out - wanted).abs().max().item(),
              eager=(out - eager_out).abs().max().item(),
              theirs=(eager_out - wanted).abs().max().item())  # fmt: skip
    captured = sum(spec.layers for spec in runner.attention)
    if len(diffs) != captured:
        row.reason = f"{len(diffs)} layers' weights from transformers, {captured} captured"
        row.weights = float("inf")
    with torch.no_grad():
        if kind == "decoder-only":
            theirs = default.generate(batch, max_new_tokens=CONTINUATION, do_sample=False)
            ours = [s.token_id for s in runner.generate(ids, CONTINUATION)]
            row.greedy = ours == theirs[0, len(ids) :].tolist()
        elif kind == "encoder-decoder":
            theirs = default.generate(batch, max_new_tokens=CONTINUATION, do_sample=False,
                                      num_beams=1)  # fmt: skip
            row.greedy = runner.model.greedy(batch, CONTINUATION) == theirs[0].tolist()
    row.norms, row.norms_reason = heads_sum_to_projection(runner, capture, seen)
    if kind == "decoder-only":
        row.stream, row.stream_reason = stream_sums(runner, batch, capture)
        long_path(row, runner, ids, expected, eager.config)
    if speed:
        with torch.no_grad():
            theirs_s = timed(lambda: eager(batch, **theirs_inputs, output_attentions=True))
        ours_s = timed(lambda: runner.model.run_with_capture(*inputs))
        row.ratio = ours_s / theirs_s
    return row


@contextmanager
def projections_seen(runner):
    """Within: each output projection's outputs as the model ran it, read by a forward
    hook, in the order of its calls (a module shared by every layer, ALBERT's: one a layer)."""
    seen: dict[int, list] = {}
    modules = {id(m): m for spec in runner.attention for layer in range(spec.layers)
               if (m := runner.model.projection_module(spec.type, layer)) is not None}  # fmt: skip
    hooks = [
        m.register_forward_hook(lambda m, a, out: seen.setdefault(id(m), []).append(out.detach()))
        for m in modules.values()
    ]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def heads_sum_to_projection(runner, capture, seen) -> tuple[float, str]:
    """The value-weighted vectors α_hij f_h(x_j) of every layer summed over keys and heads,
    plus the projection's bias, against the projection's output in the forward pass (the
    largest difference relative to the largest output); or why norms are not served."""
    worst = 0.0
    calls: dict[int, int] = {}  # a module's calls read so far
    for spec in runner.attention:
        for layer in range(spec.layers):
            try:
                wo = output_projection(runner.model, spec, layer).double()
            except ValueError as exc:
                return float("nan"), str(exc)
            module = runner.model.projection_module(spec.type, layer)
            weights = capture[spec.hook(layer, "hook_weights")][0].double()
            v = capture[spec.hook(layer, "hook_v")][0].double()
            heads, d = weights.size(0), v.size(-1)
            v = v.repeat_interleave(heads // v.size(0), dim=0)
            f = v @ wo.view(wo.size(0), heads, d).permute(1, 2, 0)  # (H, Tk, d_model)
            total = (weights @ f).sum(0)
            if getattr(module, "bias", None) is not None:
                total = total + module.bias.double()
            made = seen[id(module)][calls.setdefault(id(module), 0)][0].double()
            calls[id(module)] += 1
            worst = max(worst, ((total - made).abs().max() / made.abs().max()).item())
    return worst, ""


def stream_sums(runner, batch, capture) -> tuple[float, str]:
    """Direct logit attribution's terms at the last position, summed, against the logit
    difference of its top two tokens (relative to it, or 1); or why the stream is not read."""
    refusal = stream_refusal(runner.model)
    if refusal is not None:
        return float("nan"), refusal
    stream = read_stream(runner.model, (batch,))
    a, b = stream.logits[-1].topk(2).indices.tolist()
    made = attribute(runner.model, stream, capture, runner.attention[0], batch.size(1) - 1, a, b)
    return abs(made.total - made.logit_diff) / max(1.0, abs(made.logit_diff)), ""


def long_path(row: Row, runner, ids: list[int], expected, config) -> None:
    """A decoder's long pass over the prompt (at any length it is the same computation as
    past 512 tokens) against transformers' eager weights, or why it reads no long prompt."""
    from attnviz.model.long import heads_of

    refusal = runner.model.long_refusal
    if refusal is not None:
        row.long_reason = refusal
        return
    capture, _, _ = runner.model.long_pass(ids, len(ids) - 1)
    diffs = []
    for i, w in enumerate(softmax_layers(config, expected.attentions)):
        heads = heads_of(capture, f"decoder.{i}.self_attn")
        for h in range(heads.heads):
            got = heads.block("weights", h, 0, len(ids), 0, len(ids))
            diffs.append(float((got - w[0, h].float()).abs().max()))
    row.long = max(diffs)


def one_thread() -> None:
    torch.set_num_threads(1)


def compared(args: tuple[str, str, str | None]) -> Row:
    return compare(*args)


def matrix(
    backend: str | None = None,
    speed: bool = False,
    workers: int = 2,
    only: Callable[[int, str], bool] | None = None,
) -> list[Row]:
    """Every architecture's row (or those `only(index, model_type)` keeps), in the order of
    `interface_architectures`: on `workers` processes of one thread each (tiny models: each
    pass is mostly Python, one core's work), or one at a time where speed is measured."""
    types = [
        (t, k, backend)
        for i, (t, k) in enumerate(interface_architectures().items())
        if only is None or only(i, t)
    ]
    if speed or workers <= 1:
        return [compare(t, k, backend, speed) for t, k, _ in types]
    context = multiprocessing.get_context("spawn")  # (no forked torch threads)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=one_thread) as pool:
        return list(pool.map(compared, types, chunksize=4))


README_START = (
    "<!-- architecture matrix: generated by bench/bench_families.py --matrix --readme -->"
)
README_END = "<!-- end of the architecture matrix -->"


def readme_table(rows: list[Row]) -> str:
    """The docs' table of the matrix: each architecture, its kind, the code that reads
    it and whether it is served equal (or why not)."""
    lines = [
        "| architecture | kind | read by | served and equal to transformers "
        "| prompts past 512 tokens | value-weighted norms | residual stream |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def cell(text: str) -> str:
        text = " ".join(text.split()).replace("|", "/")
        return text if len(text) <= 140 else text[:139] + "…"

    for r in rows:
        said = cell("yes" if r.equal else "no: " + (r.reason or differs(r)))
        backend = {"ours": "model/", "transformers": "transformers", "-": "refused"}[r.backend]
        long = "—"
        if r.equal and r.kind == "decoder-only":
            long = cell("yes" if r.long <= 1e-5 else "no: " + (r.long_reason or "differs"))
        norms = "—"
        if r.equal:
            norms = cell("yes" if r.norms <= 1e-5 else "no: " + (r.norms_reason or "differs"))
        stream = "—"
        if r.equal and r.kind == "decoder-only":
            stream = cell("yes" if r.stream <= 1e-4 else "no: " + (r.stream_reason or "differs"))
        lines.append(
            f"| `{r.model_type}` | {r.kind} | {backend} | {said} | {long} | {norms} | {stream} |"
        )
    return "\n".join(lines)


def bound(x: float) -> str:
    """A difference as the power of ten it stays under: what it is to 2 digits depends on
    the machine's kernels (transformers' own sdpa and eager differ by 4.0e-04 on one CPU
    and 7.3e-04 on another)."""
    return "0" if x == 0 else f"under {10 ** math.ceil(math.log10(x)):.0e}"


def differs(r: Row) -> str:
    if r.weights > 1e-5:
        return f"weights differ by {r.weights:.1e}"
    if r.output > 1e-4:
        return (
            f"weights equal; output {bound(r.output)} from its default forward, "
            f"{bound(r.eager)} from eager (transformers' eager and default differ by "
            f"{bound(r.theirs)})"
        )
    return "weights equal; its greedy continuation differs"


def readme_section(readme: str) -> str:
    """The matrix's table as a page (docs/architectures.md) has it."""
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    return readme[start:end].strip()
