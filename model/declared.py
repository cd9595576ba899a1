"""What the seed's Transformer (model/transformer.py) declares as a `ServedModel`, read
off its own modules by name: where its residual stream is read, the blocks ALTI reads, and
a long prompt's one pass. (transformers' models state the same from their trace:
model/hf/stream.py.)"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .attention import fused
from .attention_types import AttentionSpec
from .hooks import hooked
from .layers import LayerNorm
from .long import LongCapture, long_names
from .long.reading import LOGIT_CHUNK
from .served import Blocks, FinalNorm, Layout


def norm_of(module: Any) -> FinalNorm:
    """Our model code's LayerNorm (gamma, beta) or RMSNorm (weight) as a `FinalNorm`."""
    if isinstance(module, LayerNorm):
        return FinalNorm(True, module.gamma.detach().double(), module.beta.detach().double(),
                         module.eps)  # fmt: skip
    return FinalNorm(False, module.weight.detach().double(), None, module.eps)


def stream_layout(model: Any) -> Layout | str:
    """A decoder-only model with pre-norm layers, a final norm and a linear unembedding:
    where its residual stream is read; else why it is not."""
    if model.config.architecture != "decoder-only":
        return (
            "the logit lens and direct logit attribution read the residual stream of a "
            "decoder-only model; this model is not one"
        )
    decoder = model.decoder
    layers = decoder.layers()
    if decoder.final_norm is None or not all(layer.pre_norm for layer in layers):
        return (
            "its layers normalize after adding to the residual stream (post-norm): the "
            "stream is no sum of what each block adds"
        )
    return Layout(layers, [layer.self_attn for layer in layers],
                  [layer.feed_forward for layer in layers], decoder.final_norm,
                  norm_of(decoder.final_norm), model.output)  # fmt: skip


def alti_blocks(model: Any, spec: AttentionSpec) -> Blocks | str:
    """A self-attention stack's layers, their attention modules and post-norms (a
    LayerNorm, or None where the layer is pre-norm); or why ALTI cannot read it."""
    if not spec.self_attention:
        return (
            "ALTI reads the self-attention layers of our model code (their inputs and layer "
            "norms); this attention type is not one"
        )
    layers = (model.encoder if spec.stack == "encoder" else model.decoder).layers()
    if model.config.architecture == "encoder-decoder" and spec.stack == "decoder":
        return "its decoder's layers attend to an encoder too: ALTI here reads self-attention alone"
    norms = [None if layer.pre_norm else layer.self_attn_norm for layer in layers]
    if any(n is not None and not isinstance(n, LayerNorm) for n in norms):
        return "its post-norm is no LayerNorm: ALTI's terms here go through a LayerNorm"
    return Blocks(layers, [layer.self_attn for layer in layers], norms)


def long_read(model: Any, ids: list[int], last_from: int) -> tuple[LongCapture, list[int], Tensor]:
    """A decoder-only model's pass over a long input: its capture (no (T, T) matrix), the
    predicted token at each position (a chunk's logits at a time: never all 8,192 x
    49,152) and the logits from position `last_from` on."""
    batch = torch.tensor([ids])
    with fused(), hooked(model, long_names) as recorded:
        hidden = model.decode(batch)
    capture = LongCapture(recorded, model.mask_rules(None, batch))
    predicted: list[int] = []
    for i in range(0, len(ids), LOGIT_CHUNK):
        chunk = model.logits(hidden[:, i : i + LOGIT_CHUNK])[0]
        predicted += chunk.argmax(-1).tolist()
        del chunk
    return capture, predicted, model.logits(hidden[:, last_from:])[0]
