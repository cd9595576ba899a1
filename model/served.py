"""What a served model is and can do, declared: `ServedModel`, the one class the runners
hold, the app reads and the methods (value norms, ALTI, the logit lens, long windows) take.
Both backends are one: the seed's `Transformer` (model/transformer.py, its members read
off its own modules in model/declared.py) and transformers' code (`HFTransformer`,
model/hf/model.py, as the trace of its forward pass found them). Each capability is a
typed member, stated by every model, so nothing asks a model what it is by its attributes.

Also here: what a model states its residual stream to be (`Layout`, `FinalNorm`) and the
blocks ALTI reads (`Blocks`), which the backends build and the methods read."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
from torch import Tensor, nn

from .attention import KVCache
from .config import ModelConfig
from .hooks import HookedModule

if TYPE_CHECKING:
    from .attention_types import AttentionSpec
    from .long import LongCapture

# how q and k are rotated, where the model rotates them: model/'s layout (each dim pair
# (2i, 2i + 1)) or transformers' rotate_half (i with i + d/2); None: one no view can undo
RotaryLayout = Literal["ours", "rotate_half"]


class PositionTable(Protocol):
    """What a stack adds for positions, shown by the positional view: its table (or rotary
    angles, or relative bias) for `count` positions from `start`, and its formula."""

    formula: str

    def encoding(self, start: int, count: int) -> Tensor: ...


@dataclass
class FinalNorm:
    """A final norm as the linear map it is once each position's scale is known:
    y = gain ⊙ (x − mean(x) if it centres) / s + bias, s = sqrt(var or mean square + eps)."""

    centres: bool  # LayerNorm's (else RMSNorm's: no centring, no bias)
    gain: Tensor
    bias: Tensor | None
    eps: float

    def scale(self, x: Tensor) -> Tensor:
        """s per position (..., 1) at the norm's input x (..., d)."""
        if self.centres:
            variance = x.var(-1, keepdim=True, unbiased=False)
        else:
            variance = x.pow(2).mean(-1, keepdim=True)
        return torch.sqrt(variance + self.eps)

    def linear(self, c: Tensor, scale: Tensor) -> Tensor:
        """c through the norm with the scale held (its bias left out)."""
        return (c - c.mean(-1, keepdim=True) if self.centres else c) / scale * self.gain

    def __call__(self, x: Tensor) -> Tensor:
        y = self.linear(x, self.scale(x))
        return y + self.bias if self.bias is not None else y


@dataclass
class Layout:
    """Where a decoder's residual stream is read: each layer (its input: the residual it
    reads), the modules whose outputs its attention and feed-forward blocks add, the final
    norm (and its map) and the unembedding."""

    layers: list[nn.Module]
    attention: list[nn.Module]
    feed_forward: list[nn.Module]
    final_norm: nn.Module
    norm: FinalNorm
    unembed: nn.Linear
    # the attention and feed-forward blocks read the same input (GPT-J's, Phi's): the sum
    # holds, but no residual state lies between them
    parallel: bool = False


@dataclass
class Blocks:
    """A self-attention stack as ALTI reads it: each layer (its input), the module whose
    output its attention block adds, and its post-norm (a LayerNorm) or None (pre-norm)."""

    layers: list[nn.Module]
    attention: list[nn.Module]
    post_norms: list[nn.Module | None]


class DecoderCache:
    """What cached decoding keeps between steps: each layer's self- and cross-attention
    keys and values, and the ids fed so far (for the padding mask over cached keys)."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [{"self": KVCache(), "cross": KVCache()} for _ in range(n_layers)]
        self.ids: Tensor | None = None
        # of the latest step, per attention module (hook prefix) that noted them (a
        # transformers model's fused calls): its mask and score scaling
        self.noted: dict[str, tuple] = {}
        # a transformers model's own cache (model/hf), and whether it keeps none
        self.hf: Any = None
        self.stateless = False
        # what the first pass reads besides the ids (a vision-language model's picture's
        # pixels: transformers' model reads them where the prompt's image tokens are)
        self.inputs: dict[str, Tensor] = {}

    @property
    def length(self) -> int:
        return 0 if self.ids is None else self.ids.size(1)


def first(out: object) -> Tensor:
    """A module's output tensor (the first of a tuple)."""
    return out[0] if isinstance(out, tuple | list) else out  # type: ignore[return-value]


class ServedModel(HookedModule, abc.ABC):
    """A model with named hook points (`decoder.3.self_attn.hook_weights`) that states
    what the app and the methods need. forward(source) -> last hidden state or logits
    (encoder-only), forward(target) -> logits (decoder-only), forward(source, target) ->
    logits (encoder-decoder)."""

    config: ModelConfig
    # how it rotates q and k (the neuron view's "before rotation"), where it does
    rotary_layout: RotaryLayout | None
    # a generation's passes can be kept as the sequence's run (our KV-cache decoding)
    records_generation: bool = False

    @abc.abstractmethod
    def encode(
        self, src: Tensor, src_mask: Tensor | None = None, pieces: Tensor | None = None
    ) -> Tensor:
        """The encoder's output (an encoder-only model: its last hidden state); with
        `pieces` (S,), each piece read as if alone (model/transformer.py's `Pieces`)."""

    @abc.abstractmethod
    def decode(
        self,
        target: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """The decoder's hidden states for `target` (or logits, where `logits` says so)."""

    @abc.abstractmethod
    def logits(self, hidden: Tensor) -> Tensor:
        """The output logits of `decode`'s hidden states."""

    @abc.abstractmethod
    def positions(self, stack: str) -> PositionTable | None:
        """What a stack ("encoder", "decoder") adds for positions; None: nothing."""

    @abc.abstractmethod
    def projection_module(self, attention_type: str, layer: int) -> nn.Module | None:
        """The Linear (or Conv1D) that reads a layer's attention output unchanged (its
        heads' outputs side by side); None where none does (a gate or a norm between)."""

    @property
    @abc.abstractmethod
    def projects_heads(self) -> bool:
        """Every attention's output projection reads its heads unchanged (value norms)."""

    @property
    @abc.abstractmethod
    def residual_layout(self) -> Layout | str:
        """Where its residual stream is read (the logit lens, DLA), or why it is not."""

    @abc.abstractmethod
    def attention_blocks(self, spec: AttentionSpec) -> Blocks | str:
        """A self-attention stack as ALTI reads it, or why it cannot."""

    @abc.abstractmethod
    def score_scaling(self) -> float | None:
        """The one factor every score is multiplied by, where that is all that is done to
        them before the mask (no soft-capping, position bias or sinks); else None."""

    @property
    @abc.abstractmethod
    def long_refusal(self) -> str | None:
        """None where it reads prompts longer than 512 tokens by the long path; else why."""

    @property
    def reads_long(self) -> bool:
        return self.long_refusal is None

    @abc.abstractmethod
    def long_pass(
        self, ids: list[int], last_from: int, inputs: dict[str, Tensor] | None = None
    ) -> tuple[LongCapture, list[int], Tensor]:
        """A long prompt's one pass: its capture (q and k, no (T, T) matrix), the predicted
        token at every position, and the logits from position `last_from` on; `inputs`, what
        the model reads besides the ids (a picture's pixels: a transformers model's)."""
