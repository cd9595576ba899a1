"""The user's own model from a local folder in Hugging Face's layout: `config.json`, its
weights in safetensors (`model.safetensors`, or shards named by
`model.safetensors.index.json`) and `tokenizer.json`, on our own model code. The Llama
family, `llama`, `qwen2` (biases on Q, K and V) and `mistral` (a sliding window), and
`gpt2` (model/pretrained/gpt2.py), decided by config.json's `model_type` (`bert` encoders
are read by `BertRunner`: model/pretrained/sources.py); each maps through the checked mapping
(every tensor used once, shapes equal, nothing left over). fp16 and bf16 weights are read
as float32 and computed in float32."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from tokenizers import Tokenizer

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..runner import TokenUnit
from ..transformer import Transformer
from .adapters import ADAPTERS
from .causal import CausalLM
from .mapping import Adapter, map_state

DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
          "I64": "int64", "I32": "int32", "BOOL": "bool"}  # fmt: skip
PICKLE_HELP = (
    "weights in pytorch_model.bin (a pickle, which can run code when read) are not read: "
    'convert them to safetensors once, e.g. python -c "from transformers import '
    "AutoModelForCausalLM as M; M.from_pretrained('{folder}').save_pretrained('{folder}')\""
)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path.parent} has no {path.name}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not JSON: {exc}") from None


def adapter_of(hf: dict, folder: Path) -> Adapter:
    """The adapter of the family a config.json names (`model_type`), or a CheckpointError
    naming the ones supported."""
    model_type = hf.get("model_type")
    if model_type not in ADAPTERS:
        named = model_type or hf.get("architectures") or "none"
        raise CheckpointError(
            f"{folder}: the model family {named!r} does not map onto model/; supported: "
            f"{', '.join(ADAPTERS)}"
        )
    return ADAPTERS[model_type]


def shard_names(folder: Path) -> list[str]:
    """The shards `model.safetensors.index.json` names, each a file of `folder` itself: a
    name with a folder in it ("../other/model.safetensors", "/etc/x") would read a file
    outside the model's folder, and is refused."""
    index = folder / "model.safetensors.index.json"
    named = read_json(index).get("weight_map", {})
    if not isinstance(named, dict):
        raise CheckpointError(f"{index}'s weight_map is not an object of names to shards")
    shards = sorted({str(shard) for shard in named.values()})
    for shard in shards:
        if Path(shard).name != shard or shard in ("", ".", ".."):
            raise CheckpointError(
                f"{index} names the shard {shard[:200]!r}: a shard is a file of the model's "
                "own folder, named without a folder"
            )
    return shards


def read_weights(
    folder: Path, dtypes: set[str] | None = None, meta: bool = False
) -> dict[str, torch.Tensor]:
    """The folder's tensors as float32: model.safetensors, or the shards its index names
    (`dtypes` collects the dtypes they were stored in); with `meta`, only their names and
    shapes, from the files' headers (tensors on the meta device: nothing read)."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = shard_names(folder)
        if not shards:
            raise CheckpointError(f"{index} names no shards")
    elif (folder / "model.safetensors").exists():
        shards = ["model.safetensors"]
    elif (folder / "pytorch_model.bin").exists():
        raise CheckpointError(PICKLE_HELP.format(folder=folder))
    else:
        raise CheckpointError(f"{folder} has no model.safetensors (nor a sharded index)")
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        try:
            read = headers(folder / shard) if meta else load_file(str(folder / shard))
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{folder / shard} cannot be read: {exc}") from None
        if dtypes is not None:
            dtypes.update(str(t.dtype).removeprefix("torch.") for t in read.values())
        tensors.update({name: t.float() for name, t in read.items()})
    return tensors


def headers(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors as meta tensors of their shapes and dtypes."""
    out = {}
    with safe_open(str(path), "pt") as f:
        for name in f.keys():  # noqa: SIM118 (a safe_open handle, not a dict)
            part = f.get_slice(name)
            stored = part.get_dtype()
            if stored not in DTYPES:
                raise CheckpointError(f"{path}: {name} is stored as {stored}, not read here")
            dtype = getattr(torch, DTYPES[stored])
            out[name] = torch.empty(part.get_shape(), dtype=dtype, device="meta")
    return out


def untie(tensors: dict[str, torch.Tensor], named) -> None:
    """A tied model's saved output matrix, where it is there: dropped if it is the
    embedding (the model holds it once), refused if it is not."""
    output = next((n for n in tensors if named(n) == "output.weight"), None)
    embedding = next((n for n in tensors if named(n) == "decoder.tok_embed.weight"), None)
    if output is None or embedding is None:
        return
    if tensors[output].is_meta:  # only the headers read: compared when the weights are
        del tensors[output]
        return
    if not torch.equal(tensors[output], tensors[embedding]):
        raise CheckpointError(
            f"config.json ties the embeddings, but {output} differs from {embedding}"
        )
    del tensors[output]


def tokenizer_of(folder: Path, vocab_size: int) -> tuple[Tokenizer, list[str], frozenset[str]]:
    """The folder's tokenizer.json, its tokens by id and its special tokens; refused where
    it has ids beyond the embedding."""
    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(f"{folder} has no tokenizer.json: its text cannot be read")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception types
        raise CheckpointError(f"{path} cannot be read: {exc}") from None
    return (tokenizer, *vocabulary_of(tokenizer, vocab_size, "tokenizer.json"))


def vocabulary_of(
    tokenizer: Tokenizer, vocab_size: int, named: str = "the tokenizer"
) -> tuple[list[str], frozenset[str]]:
    """A tokenizer's tokens by id (one per embedding row) and its special tokens; refused
    where it has ids beyond the embedding."""
    by_id = {i: token for token, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    if by_id and max(by_id) >= vocab_size:
        raise CheckpointError(
            f"{named} has ids up to {max(by_id)}, beyond the embedding's {vocab_size} "
            "rows: the tokenizer does not belong to these weights"
        )
    vocabulary = [by_id.get(i, f"<unused {i}>") for i in range(vocab_size)]
    specials = frozenset(
        t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special
    )
    return vocabulary, specials


def mapped(
    folder: Path, hf: dict, adapter: Adapter, dtypes: set[str] | None, meta: bool
) -> tuple[ModelConfig, Tokenizer, list[str], frozenset[str], Transformer]:
    """A folder checked and mapped: its config, tokenizer, vocabulary and specials, and
    our Transformer with its weights (with `meta`, on the meta device: every name and
    shape checked from the headers, nothing read)."""
    try:
        config = adapter.config(hf)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder / 'config.json'}: {exc!r}") from None
    tokenizer, vocabulary, specials = tokenizer_of(folder, config.target_vocab_size)
    tensors = read_weights(folder, dtypes, meta)
    named = adapter.names
    if adapter.split is not None:
        tensors = adapter.split(tensors, config)
    if config.tie_embeddings:
        untie(tensors, named)
    with torch.device("meta" if meta else "cpu"):
        model = Transformer(config, init=False)
    state = map_state(tensors, model, named, {}, f"{adapter.model_type} ({folder})")
    if not meta:
        model.load_state_dict(state)
    return config, tokenizer, vocabulary, specials, model


def load_folder(folder: str | Path, name: str = "", dtypes: set[str] | None = None) -> CausalLM:
    """A Llama-family or GPT-2 folder as a runner on our model code, checked on the way in."""
    folder = Path(folder)
    hf = read_json(folder / "config.json")
    adapter = adapter_of(hf, folder)
    _, tokenizer, vocabulary, specials, model = mapped(folder, hf, adapter, dtypes, meta=False)
    return causal_runner(folder, model, tokenizer, vocabulary, specials, name)


def token_unit_of(tokenizer: Tokenizer) -> TokenUnit:
    """What a token of a tokenizer.json is: a WordPiece piece, a byte-level BPE piece, or
    a SentencePiece one (Unigram, or BPE over "▁"-marked words)."""
    model = type(tokenizer.model).__name__
    if model == "WordPiece":
        return "wordpiece"
    if model == "BPE" and "ByteLevel" in repr(tokenizer.pre_tokenizer):
        return "byte-bpe"
    return "sentencepiece"


def unknown_of(tokenizer: Tokenizer, default: str) -> str:
    """The token a tokenizer.json writes for what it cannot read."""
    unk = getattr(tokenizer.model, "unk_token", None)
    return unk if isinstance(unk, str) and unk else default


def causal_runner(folder: Path, model, tokenizer, vocabulary, specials, name: str) -> CausalLM:
    """A decoder-only model (of either backend) with its folder's tokenizer, chat template
    and stop tokens."""
    hf = read_json(folder / "config.json")
    settings = {}
    if (folder / "tokenizer_config.json").exists():
        settings = read_json(folder / "tokenizer_config.json")
    template = settings.get("chat_template")
    named = {k: token_text(settings.get(k)) for k in ("bos_token", "eos_token")}
    return causal_of(
        model, tokenizer, vocabulary, specials, name or folder.name,
        template if isinstance(template, str) else None, hf.get("eos_token_id"), named,
    )  # fmt: skip


def causal_of(
    model, tokenizer, vocabulary, specials, name: str, template: str | None, eos, named: dict
) -> CausalLM:
    """A decoder-only model with its tokenizer, chat template, stop tokens (`eos`: an id, a
    list of them or None) and named special tokens ({"bos_token": ..., "eos_token": ...})."""
    stops = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    runner = CausalLM(
        model.eval(), tokenizer, vocabulary, specials, frozenset(stops), template, name,
        add_special_tokens=True,  # as transformers' tokenizer reads a prompt
        template_tokens={k: v for k, v in named.items() if v is not None},
    )  # fmt: skip
    runner.max_tokens = min(runner.max_tokens, model.config.max_seq_len)
    runner.token_unit = token_unit_of(tokenizer)  # (a SentencePiece one is shown as spelled)
    return runner


def token_text(value) -> str | None:
    """A token of tokenizer_config.json: a string, or an AddedToken's {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
