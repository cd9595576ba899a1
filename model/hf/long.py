"""A transformers decoder's pass over a long prompt, as model/long/reading.py's
`long_pass` is our model code's: each attention call by torch's fused kernel (see
capture.py), its queries and keys kept with its mask described and its scaling, the
final hidden states read from the base model's output, and the logits a chunk at a time
(only the positions asked for come out of the model's own head, with whatever it does to
them: soft-capping, scaling).

Whether a model reads long prompts at all is checked once (`long_refusal`): a decoder-only
model whose attention adds nothing but its scaling and its mask to the scores, whose
forward takes `logits_to_keep`, and whose long pass over a short probe gives, at 1e-5, the
weights, the predictions and the logits of its own eager forward."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import fused
from ..hooks import hooked
from ..long import LongCapture, heads_of, long_names
from ..long.reading import LOGIT_CHUNK
from .capture import current

PROBE = 16  # tokens of the check's probe
TOLERANCE = 1e-5
# in bfloat16 or float16 the fused kernel and eager attention round differently: the probe
# allows a few of the dtype's units of rounding (its eps) where float32 allows 1e-4 and 1e-5
LOW_PRECISION_UNITS = 4


def tolerances(dtype: torch.dtype, scale: float) -> tuple[float, float]:
    """(the logits', the weights') absolute tolerance of the probe, in `dtype`, for logits
    up to `scale`."""
    if dtype == torch.float32:
        return 1e-4 * max(1.0, scale), TOLERANCE
    eps = torch.finfo(dtype).eps
    return LOW_PRECISION_UNITS * eps * max(1.0, scale), 2 * eps


def keep_final(model: Any) -> None:
    """Make the base model's output (the final hidden states, after its norm) seen by the
    forward call that asks for it (`Call.hidden`); once, at load."""

    def seen(module: nn.Module, args, out) -> None:
        call = current()
        if call is not None and call.hidden is not None:
            call.hidden.append(out[0])

    for base in bases(model):
        base.register_forward_hook(seen)


def bases(model: Any) -> list[nn.Module]:
    """The modules whose output is the final hidden states: the base model, and the decoder
    where the model calls that directly (OPT)."""
    found: list[nn.Module] = []
    with contextlib.suppress(Exception):  # (a model with neither raises its own error)
        found.append(model.hf.get_decoder())
    base = getattr(model.hf, "base_model", None)
    if isinstance(base, nn.Module) and all(base is not m for m in found):
        found.append(base)
    return [m for m in found if isinstance(m, nn.Module) and m is not model.hf]


def long_pass(
    model: Any, ids: list[int], last_from: int, inputs: dict[str, Tensor] | None = None
) -> tuple[LongCapture, list[int], Tensor]:
    """The capture (no (T, T) matrix), the predicted token at each position and the logits
    from position `last_from` on, of one pass over `ids` (and `inputs`: a vision-language
    model's picture, its pixels and grid)."""
    device = model.input_device
    batch = torch.tensor([ids], device=device)
    call = model.call(hidden=[])
    with torch.no_grad(), fused(), hooked(model, long_names, on_device=True) as recorded:
        out = model.run_call(call, input_ids=batch, use_cache=False,
                             logits_to_keep=len(ids) - last_from, **(inputs or {}))  # fmt: skip
    if not call.hidden:
        raise RuntimeError("the model's base model gave no hidden states")
    hidden, head = call.hidden[-1], model.hf.get_output_embeddings()  # (the outermost's)
    predicted: list[int] = []
    with torch.no_grad():
        for i in range(0, last_from, LOGIT_CHUNK):  # (the argmax of the head's own
            # logits: what the model does to them after is monotonic, checked on load)
            chunk = head(hidden[:, i : min(last_from, i + LOGIT_CHUNK)])
            predicted += chunk[0].argmax(-1).tolist()
    last = out.logits[0]
    predicted += last.argmax(-1).tolist()
    masks = {prefix: mask for prefix, (mask, _) in call.long.items()}
    scales = {prefix: scale for prefix, (_, scale) in call.long.items()}
    missing = [p for p in model.prefixes() if p not in masks]
    if missing:
        raise RuntimeError(
            f"its attention ({missing[0]}) cannot run a fused kernel: its mask carries a "
            "bias, or each query attends its own top-k keys"
        )
    return LongCapture(recorded, masks, scales), predicted, last


def long_refusal(model: Any) -> str | None:
    """None where the model reads long prompts; else why it does not (it keeps 512)."""
    if model.architecture != "decoder-only":
        return "only a decoder-only model reads long prompts"
    if any(c.extras for c in model.traced):
        return "its attention adds soft-capping, a position bias or sinks to the scores"
    if "logits_to_keep" not in inspect.signature(model.hf.forward).parameters:
        return "its forward takes no logits_to_keep"
    if not bases(model):
        return "it has no base model to read the final hidden states from"
    vocab = model.config.source_vocab_size
    ids = [(7 * i + 3) % vocab for i in range(PROBE)]
    try:
        capture, predicted, last = long_pass(model, ids, PROBE // 2)
    except Exception as exc:  # (transformers' code raises what it raises)
        return f"its long pass failed on a probe: {exc}"[:300]
    device = model.input_device
    with torch.no_grad(), hooked(model, lambda n: n.endswith("hook_weights")) as eager:
        logits = model(torch.tensor([ids], device=device))[0]
    logits = logits.float()
    at_logits, at_weights = tolerances(last.dtype, float(logits.abs().max()))
    top = logits.topk(2, dim=-1).values
    clear = (top[:, 0] - top[:, 1] > 2 * at_logits).tolist()  # (no near tie to round away)
    if any(
        p != e and c for p, e, c in zip(predicted, logits.argmax(-1).tolist(), clear, strict=True)
    ):
        return "its long pass predicts other tokens than its forward (checked on a probe)"
    if not torch.allclose(last.float(), logits[PROBE // 2 :], atol=at_logits, rtol=0):
        return "its long pass gives other logits than its forward (checked on a probe)"
    for prefix in model.prefixes():
        heads, weights = heads_of(capture, prefix), eager[f"{prefix}.hook_weights"][0].float()
        for h in range(heads.heads):
            window = heads.block("weights", h, 0, PROBE, 0, PROBE)
            if not torch.allclose(window, weights[h], atol=at_weights, rtol=0):
                return f"its long pass's weights differ from eager attention's ({prefix})"
    return None
