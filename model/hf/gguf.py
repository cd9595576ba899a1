"""GGUF files on transformers' code: any architecture transformers reads from GGUF (its
GGUF_SUPPORTED_ARCHITECTURES), checked from the file's header (`peek_gguf`) and read by
transformers' own GGUF loader, dequantized (`load_gguf_transformers`); model/ reads
Llama's itself (model/pretrained/llama.py)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..placement import Placement
from ..pretrained.causal import CausalLM
from ..pretrained.hf import token_unit_of
from .capture import ATTENTION, register
from .loading import hf_config, placed, quiet_transformers, stated_config, stated_specs, wrapped


def gguf_architecture(reader) -> str:
    """A GGUF file's architecture (general.architecture), checked to be one transformers
    reads from GGUF and a language model's (its causal-LM class reads it)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from ..pretrained.gguf_file import field

    arch = field(reader, "general.architecture")
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise CheckpointError(
            f"a GGUF of architecture {arch!r}: transformers reads GGUF files of "
            f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}"
        )
    if arch in ("t5", "umt5", "t5encoder"):
        raise CheckpointError(
            f"a GGUF of architecture {arch!r} is an encoder-decoder: GGUF files are served "
            "for language models (read its Hugging Face folder instead)"
        )
    return arch


def gguf_tokenizer(path: Path, reader) -> tuple[Tokenizer, list[str], list[str]]:
    """(tokenizer, tokens by id, control tokens) of a GGUF file: a byte-level BPE read and
    checked as model/ reads SmolLM2's; another (SentencePiece's "llama") as transformers
    converts it."""
    from ..pretrained.gguf_file import field
    from ..pretrained.llama import CONTROL, byte_level_tokenizer, token_list

    if field(reader, "tokenizer.ggml.model") == "gpt2":
        return byte_level_tokenizer(reader)
    import transformers

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            fast = transformers.AutoTokenizer.from_pretrained(
                path.parent, gguf_file=path.name, local_files_only=True
            )
    except (ValueError, KeyError, OSError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"transformers cannot read its tokenizer: {exc}") from None
    tokens = token_list(reader)
    types = field(reader, "tokenizer.ggml.token_type", [])
    control = [tokens[i] for i, kind in enumerate(types or []) if kind == CONTROL]
    return fast.backend_tokenizer, tokens, control


def peek_gguf(path: Path) -> tuple[ModelConfig, frozenset[str]]:
    """A GGUF file of an architecture transformers reads, checked from its metadata (no
    tensor read): our summary config and its special tokens."""
    from ..pretrained.gguf_file import GGUFFile

    reader = GGUFFile(str(path))
    gguf_architecture(reader)
    config = hf_config(path)
    specs = stated_specs(config, "decoder-only")
    _, _, control = gguf_tokenizer(path, reader)
    return stated_config(config, "decoder-only", specs), frozenset(control)


def load_gguf_transformers(
    path: Path, name: str = "", placement: Placement | None = None
) -> CausalLM:
    """A .gguf file of any architecture transformers reads from GGUF (Llama, Qwen2/3,
    Mistral, Gemma 2/3, Phi-3, StableLM, StarCoder2, ...), dequantized by transformers' own
    GGUF loader into the dtype `placement` gives (float32 by default: a quantized file has
    no float dtype of its own) and run by its modeling code; its tokenizer, special tokens
    and chat template read from the file."""
    from ..pretrained.gguf_file import GGUFFile, field

    placement = placement or Placement()
    register()
    quiet_transformers()
    import transformers

    where = placement.where()
    reader = GGUFFile(str(path))
    arch = gguf_architecture(reader)
    tokenizer, tokens, control = gguf_tokenizer(path, reader)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            hf = transformers.AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, attn_implementation=ATTENTION,
                dtype=placement.torch_dtype(None), **placed(where, placement, str(path)),
                quantization_config=transformers.GgufConfig(dequantize=True),
                local_files_only=True, trust_remote_code=False,
            )  # fmt: skip
    except (MemoryError, torch.OutOfMemoryError):
        raise  # (not the file's fault: a 503 to try again)
    except (ValueError, KeyError, OSError, TypeError, RuntimeError, ImportError) as exc:
        raise CheckpointError(f"transformers cannot read it: {exc}") from None
    ends = {i for i in [field(reader, "tokenizer.ggml.eos_token_id")] if isinstance(i, int)}
    if "<|endoftext|>" in tokens:
        ends.add(tokens.index("<|endoftext|>"))
    runner = CausalLM(
        wrapped(hf, "decoder-only"), tokenizer, tokens, frozenset(control), frozenset(ends),
        field(reader, "tokenizer.chat_template"),
        name or field(reader, "general.name", f"{path.stem} ({arch})"),
    )  # fmt: skip
    runner.max_tokens = min(runner.max_tokens, runner.model.config.max_seq_len)
    runner.token_unit = token_unit_of(tokenizer)  # (a SentencePiece one is shown as spelled)
    return runner
