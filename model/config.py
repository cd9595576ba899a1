"""One dataclass configures every model; it is saved as JSON beside each checkpoint."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Architecture = Literal["encoder-decoder", "encoder-only", "decoder-only"]
# relative: a learned bias per head and distance bucket added to the scores (T5's; read by
# transformers' code only)
Positional = Literal["sinusoidal", "learned", "rotary", "relative", "none"]
NormPlacement = Literal["post", "pre"]
Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
Norm = Literal["layernorm", "rmsnorm"]
RopeType = Literal["default", "linear", "llama3"]

ARCHITECTURES: tuple[str, ...] = ("encoder-decoder", "encoder-only", "decoder-only")
POSITIONALS: tuple[str, ...] = ("sinusoidal", "learned", "rotary", "relative", "none")
NORM_PLACEMENTS: tuple[str, ...] = ("post", "pre")
# gelu: the exact (erf) form, as BERT's; silu (x * sigmoid(x)): Llama's, in the gated SwiGLU
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_tanh", "silu")
NORMS: tuple[str, ...] = ("layernorm", "rmsnorm")
ROPE_TYPES: tuple[str, ...] = ("default", "linear", "llama3")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one Transformer; the defaults are the seed's `main.py` model."""

    architecture: Architecture = "encoder-decoder"
    source_vocab_size: int = 100  # encoder input; unused by decoder-only
    target_vocab_size: int = 100  # decoder input and output; unused by encoder-only
    d_model: int = 512
    n_heads: int = 8  # query heads
    # the width of one head where it is not d_model / n_heads (Gemma, Qwen3): only models
    # run by transformers' own code (model/hf) state one; ours refuse it
    head_size: int | None = None
    # key/value heads, shared by n_heads / n_kv_heads query heads each (grouped-query
    # attention, Llama's); None: one per query head, as the seed's multi-head attention
    n_kv_heads: int | None = None
    n_layers: int = 6  # encoder layers (decoder layers too, unless n_decoder_layers is set)
    n_decoder_layers: int | None = None
    d_ff: int = 2048
    max_seq_len: int = 5000
    dropout: float = 0.1
    positional: Positional = "sinusoidal"
    rope_theta: float = 10000.0
    # RoPE's frequency scaling for longer contexts (transformers' rope_type): "default"
    # none; "linear" every frequency / rope_factor; "llama3" the low frequencies / factor,
    # the high ones kept, the band between them interpolated (Llama 3.1's)
    rope_type: RopeType = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_positions: int = 8192
    norm_placement: NormPlacement = "post"
    activation: Activation = "relu"
    # the feed-forward's gated form, w2(act(w1 x) * w3 x) (SwiGLU with silu: Llama's)
    gated_ffn: bool = False
    norm: Norm = "layernorm"
    norm_eps: float = 1e-6
    # LayerNorm through torch's fused kernel: the same formula in another rounding order
    # (transformers' own), about 10x faster than the seed's mean/var/div at 512 tokens;
    # False keeps the seed's operations, bit for bit its results
    fused_norm: bool = False
    bias: bool = True
    # biases on the query, key and value projections alone (Qwen2); None: as `bias`
    qkv_bias: bool | None = None
    output_bias: bool | None = None  # of the output projection; None: as `bias` (GPT-2: none)
    # decoder self-attention sees only the newest `sliding_window` positions (Mistral)
    sliding_window: int | None = None
    embed_scale: bool = True  # multiply token embeddings by sqrt(d_model), as the seed does
    embed_norm: bool = False  # LayerNorm after the embedding sum (BERT)
    # the output projection is the token embedding's matrix (GPT-2, SmolLM2): one tensor
    tie_embeddings: bool = False
    type_vocab_size: int = 0  # token-type (segment) embeddings (BERT: 2)
    pad_id: int = 0  # -1: no padding token (an LLM whose every id is text), nothing masked
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        if not (self.d_model > 0 and self.n_heads > 0):
            raise ValueError("invalid ModelConfig: d_model and n_heads must be positive")
        checks = [
            (self.architecture in ARCHITECTURES, f"architecture must be one of {ARCHITECTURES}"),
            (self.positional in POSITIONALS, f"positional must be one of {POSITIONALS}"),
            (
                self.norm_placement in NORM_PLACEMENTS,
                f"norm_placement must be one of {NORM_PLACEMENTS}",
            ),
            (self.activation in ACTIVATIONS, f"activation must be one of {ACTIVATIONS}"),
            (self.norm in NORMS, f"norm must be one of {NORMS}"),
            (self.rope_type in ROPE_TYPES, f"rope_type must be one of {ROPE_TYPES}"),
            (self.rope_factor > 0, "rope_factor must be positive"),
            (
                self.rope_type != "llama3"
                or self.rope_high_freq_factor > self.rope_low_freq_factor,
                "llama3 RoPE needs rope_high_freq_factor > rope_low_freq_factor",
            ),
            (
                self.head_size is not None or self.d_model % self.n_heads == 0,
                "d_model must be divisible by n_heads",
            ),
            (self.head_size is None or self.head_size > 0, "head_size must be positive"),
            (
                self.kv_heads > 0 and self.n_heads % self.kv_heads == 0,
                "n_heads must be a multiple of n_kv_heads",
            ),
            (
                self.positional != "rotary" or self.head_dim % 2 == 0,
                "rotary positions need an even head dimension",
            ),
            (self.n_layers >= 0 and self.decoder_layers >= 0, "layer counts must be >= 0"),
            (self.max_seq_len > 0 and self.d_ff > 0, "max_seq_len and d_ff must be positive"),
            (0.0 <= self.dropout < 1.0, "dropout must lie in [0, 1)"),
            (self.norm_eps > 0, "norm_eps must be positive"),
            (self.type_vocab_size >= 0, "type_vocab_size must be >= 0"),
            (not self.tie_embeddings or self.has_decoder, "tied embeddings need a decoder"),
            (self.sliding_window is None or self.sliding_window > 0, "sliding_window must be > 0"),
        ]
        if self.has_encoder:
            checks.append((self.source_vocab_size > 0, "source_vocab_size must be positive"))
        if self.has_decoder:
            checks.append((self.target_vocab_size > 0, "target_vocab_size must be positive"))
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid ModelConfig: {message}")

    @property
    def head_dim(self) -> int:
        return self.head_size if self.head_size is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def has_encoder(self) -> bool:
        return self.architecture in ("encoder-decoder", "encoder-only")

    @property
    def has_decoder(self) -> bool:
        return self.architecture in ("encoder-decoder", "decoder-only")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        if not isinstance(data, dict):
            raise ValueError(f"invalid ModelConfig: a JSON object, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"invalid ModelConfig: unknown fields {unknown}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ModelConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))
