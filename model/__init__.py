"""The Transformer: pure PyTorch, configurable, with named hook points and per-call capture."""

from .attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from .checkpoints import load_checkpoint, save_checkpoint
from .config import ModelConfig
from .hooks import Capture, HookPoint, hooked
from .masks import causal_mask, decoder_mask, generate_mask, pad_batch, padding_mask
from .served import DecoderCache
from .transformer import DecodeResult, Transformer

__all__ = [
    "Capture",
    "DecodeResult",
    "DecoderCache",
    "HookPoint",
    "KVCache",
    "ModelConfig",
    "MultiHeadAttention",
    "Transformer",
    "causal_mask",
    "decoder_mask",
    "generate_mask",
    "hooked",
    "load_checkpoint",
    "pad_batch",
    "padding_mask",
    "save_checkpoint",
    "scaled_dot_product_attention",
]
