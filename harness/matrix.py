"""The architecture matrix: every text architecture the installed transformers has, each as
a tiny random model (harness/architectures.py) read back by our loader as the server reads
a model of yours, and compared with the same model run by transformers: every head's
weights with its eager attention (`output_attentions=True`), its logits (or last hidden
state) with its default forward, its greedy continuation with its `generate`; its long
path, value norms and residual stream where it has them.

Used by tests/model/test_families.py and bench/bench_families.py (docs/architectures.md's
table, written by harness/matrix_table.py)."""

from __future__ import annotations

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
from attnviz.model.methods.lens import attribute, read_stream, stream_refusal
from attnviz.model.methods.value_norms import output_projection
from attnviz.model.pretrained.backends import choose
from attnviz.model.pretrained.sources import load_origin

from .architectures import build, interface_architectures, reference, stated

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"
CONTINUATION = 8


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
    # a decoder's residual stream (model/methods/lens.py: the logit lens, DLA, the graph): how far
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
