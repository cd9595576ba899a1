"""Runners over transformers' own modeling code: a folder (or HF-cache snapshot) of any
architecture transformers has, checked from its config without its weights
(`peek_transformers`) and read (`load_transformers`) with the capturing attention. A
decoder-only model is a `CausalLM`, an encoder a `BertRunner` (mean-pooled embedding) or, with
its masked-LM head, a `MaskedLM`, as the models of model/ are: only their `model` differs;
an encoder-decoder is an `HFSeq2Seq` (an image encoder: model/hf/pictures.py)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from ..attention_types import ATTENTION_TYPES, AttentionSpec
from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..placement import Placement, Where, module_bytes, stored_dtype
from ..pretrained.causal import CausalLM
from ..pretrained.hf import (
    causal_runner,
    read_json,
    read_weights,
    token_unit_of,
    tokenizer_of,
    unknown_of,
)
from ..runner import TokenUnit
from .calls import BackendError, has_masked_lm_head, hf_architecture
from .capture import ATTENTION, register
from .encoders import HFEncoder, HFMaskedLM
from .model import HFTransformer
from .seq2seq import HFSeq2Seq
from .summary import summary


def quiet_transformers() -> None:
    """transformers' progress bars and warnings off: the server's log says what it reads."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def hf_config(folder: Path):
    """The folder's config as transformers reads it (a .gguf file's, from its metadata);
    CheckpointError where it cannot."""
    import transformers

    quiet_transformers()
    where = {"gguf_file": folder.name} if folder.suffix == ".gguf" else {}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return transformers.AutoConfig.from_pretrained(
                folder.parent if where else folder, **where, local_files_only=True,
                trust_remote_code=False,
            )  # fmt: skip
    except (ValueError, KeyError, OSError, TypeError) as exc:
        said = "its metadata" if where else "its config.json"
        raise CheckpointError(f"transformers cannot read {said}: {exc}") from None


def stated_specs(config, architecture: str) -> list[AttentionSpec]:
    """The attention types a config states (before any weight is read): its layers, query
    and key/value heads and head width, by transformers' common names."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config

    def first(*names: str, default=None):
        for name in names:
            try:
                value = getattr(text, name, None)
            except Exception as exc:  # (transformers' per-layer attributes: Gemma 4's)
                if "PerLayer" not in type(exc).__name__:
                    raise CheckpointError(f"its config's {name} cannot be read: {exc}") from None
                raise CheckpointError(
                    f"its config states {name} per layer: attention whose heads change shape "
                    "from layer to layer is not supported"
                ) from None
            if isinstance(value, int) and value > 0:
                return value
        if default is None:
            raise CheckpointError(f"its config states none of {', '.join(names)}")
        return default

    heads = first("num_attention_heads", "encoder_attention_heads", "num_heads", "n_head")
    decoder_heads = first("decoder_attention_heads", default=heads)
    if architecture == "encoder-decoder" and decoder_heads != heads:
        raise CheckpointError(
            f"its encoder has {heads} heads and its decoder {decoder_heads}: one head count "
            "for both is supported"
        )
    kv_heads = first("num_key_value_heads", default=heads)
    hidden = first("hidden_size", "d_model", "n_embd")
    head_dim = first("head_dim", "d_kv", default=hidden // heads)
    layers = first("num_hidden_layers", "encoder_layers", "num_layers", "n_layer")
    types = getattr(text, "layer_types", None)
    if architecture == "decoder-only" and isinstance(types, list) and types:
        # a hybrid's attention layers only (the others are linear attention or state space)
        attention = [t for t in types if isinstance(t, str) and "attention" in t
                     and "linear" not in t]  # fmt: skip
        layers = len(attention) or layers
    decoder_layers = first("decoder_layers", "num_decoder_layers", default=layers)
    present = {
        "encoder-only": ["encoder.self"],
        "decoder-only": ["decoder.self"],
        "encoder-decoder": ["encoder.self", "decoder.self", "decoder.cross"],
    }[architecture]
    specs = []
    for name in present:
        stack, module, rows, columns = ATTENTION_TYPES[name]
        n = (
            layers
            if stack == "encoder"
            else (decoder_layers if architecture != "decoder-only" else layers)
        )
        specs.append(
            AttentionSpec(name, stack, module, n, heads, kv_heads, head_dim, rows, columns)
        )
    return specs


def stated_config(config, architecture: str, specs: list[AttentionSpec]) -> ModelConfig:
    """Our summary config of a transformers config, before its weights are read (its
    positions as the config suggests them; the loaded model states what it has)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "rope_parameters", None) is not None or hasattr(text, "rope_theta"):
        positional = "rotary"
    elif hasattr(text, "relative_attention_num_buckets"):  # T5's relative bias
        positional = "relative"
    else:
        positional = "learned" if hasattr(text, "max_position_embeddings") else "none"
    return summary(config, architecture, specs, positional)


def model_class(architecture: str):
    """transformers' auto class of a architecture ("masked-lm": an encoder with its head)."""
    import transformers

    return {
        "decoder-only": transformers.AutoModelForCausalLM,
        "encoder-only": transformers.AutoModel,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
        "image-encoder": transformers.AutoModel,
        "vision-language": transformers.AutoModelForImageTextToText,
    }[architecture]


PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def peek_transformers(folder: Path) -> tuple[ModelConfig, str, list[AttentionSpec]]:
    """(our summary config, its architecture, its attention types) from config.json alone; the
    architecture is "masked-lm" for an encoder with its masked-LM head."""
    config = hf_config(folder)
    try:
        architecture = hf_architecture(config)
    except BackendError as exc:
        raise CheckpointError(str(exc)) from None
    if architecture == "image-encoder":  # (an encoder whose input is pixels)
        if not (folder / "preprocessor_config.json").exists():
            raise CheckpointError(
                f"{folder} has no preprocessor_config.json: its pictures cannot be prepared"
            )
        config = getattr(config, "vision_config", None) or config
        specs = stated_specs(config, "encoder-only")
        return stated_config(config, "encoder-only", specs), architecture, specs
    if not (folder / "tokenizer.json").exists():
        raise CheckpointError(f"{folder} has no tokenizer.json: its text cannot be read")
    if architecture == "vision-language":  # (a decoder that reads pictures too)
        if not any((folder / n).exists() for n in PROCESSOR_FILES):
            raise CheckpointError(
                f"{folder} has no processor_config.json or preprocessor_config.json: its "
                "pictures cannot be prepared"
            )
        specs = stated_specs(config, "decoder-only")
        return stated_config(config, "decoder-only", specs), architecture, specs
    specs = stated_specs(config, architecture)
    summary_ = stated_config(config, architecture, specs)
    if architecture == "encoder-only" and has_masked_lm_head(config):
        return summary_, "masked-lm", specs
    return summary_, architecture, specs


def wrapped(hf, architecture: str) -> HFTransformer:
    """The model with its attention traced; a CheckpointError where that fails (its own
    forward pass included: such a model is refused, never a 500 later)."""
    try:
        return HFTransformer(hf, architecture)
    except (MemoryError, torch.OutOfMemoryError):
        raise  # (not the model's fault: a 503 to try again)
    except BackendError as exc:
        raise CheckpointError(str(exc)) from None
    except Exception as exc:  # (transformers' own code raises what it raises)
        raise CheckpointError(
            f"its forward pass fails in transformers' code: {type(exc).__name__}: {exc}"
        ) from None


def load_model(
    folder: Path,
    architecture: str,
    placement: Placement | None = None,
    stored: torch.dtype | None = None,
    cls: Any = None,
) -> HFTransformer:
    """The folder's weights in transformers' class for its architecture ("masked-lm": an encoder
    with its head), capturing, in the dtype and on the device `placement` resolves to (its
    default: the checkpoint's own dtype, the device `auto` finds): read from the
    safetensors files straight into that dtype, never through a float32 copy (`stored`:
    the checkpoint's own dtype where the caller read it already; `cls`: transformers' class
    to read it with, where not its architecture's auto class)."""
    placement = placement or Placement()
    register()
    quiet_transformers()
    where = placement.where()
    if stored is None:
        stored = stored_dtype(read_json(folder / "config.json"), dtypes_of(folder))
    dtype = placement.torch_dtype(stored)
    quantization = placement.quantization(dtype)  # (refused off CUDA)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            hf = (cls or model_class(architecture)).from_pretrained(
                folder,
                attn_implementation=ATTENTION,
                dtype=dtype,
                **placed(where, placement, str(folder)),
                **({"quantization_config": quantization} if quantization else {}),
                local_files_only=True,
                use_safetensors=True,
                trust_remote_code=False,
            )
    except (MemoryError, torch.OutOfMemoryError):
        raise  # (not the model's fault: a 503 to try again)
    except KeyError as exc:
        if exc.args == (ATTENTION,):  # (its class takes no attention function of the interface)
            raise CheckpointError(
                "its attention does not go through transformers' attention interface "
                "(attn_implementation): nothing to capture"
            ) from None
        raise CheckpointError(f"transformers cannot read it: {exc}") from None
    except (ValueError, OSError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"transformers cannot read it: {exc}") from None
    return wrapped(hf, "encoder-only" if architecture == "masked-lm" else architecture)


def placed(where: Where, placement: Placement, source: str = "") -> dict:
    """from_pretrained's device arguments: none on the CPU (torch's own), else the device
    map (one device, or accelerate's `auto` within `max_memory`, offloading past it to a
    folder of this model's, under one the process removes when it ends)."""
    if where.device_map is None:
        return {}
    found: dict = {"device_map": where.device_map}
    if where.spread:
        memory = placement.memory_for(where.device)
        if memory:
            found["max_memory"] = memory
        named = hashlib.sha256(source.encode()).hexdigest()[:16]
        found["offload_folder"] = str(offload_root() / named)
    return found


@functools.cache
def offload_root() -> Path:
    """The folder accelerate offloads spread models' weights to, removed at exit."""
    made = tempfile.TemporaryDirectory(prefix="attnviz-offload-")
    atexit.register(made.cleanup)
    return Path(made.name)


def dtypes_of(folder: Path) -> set[str]:
    """The dtypes a folder's safetensors hold (from their headers: nothing read)."""
    dtypes: set[str] = set()
    read_weights(folder, dtypes, meta=True)
    return dtypes


def load_transformers(
    folder: Path,
    name: str = "",
    placement: Placement | None = None,
    stored: torch.dtype | None = None,
) -> CausalLM | HFEncoder | HFSeq2Seq:
    """A folder as a runner over transformers' code (a vision-language model's: a
    `VisionLanguageLM`, a CausalLM that reads pictures too), checked on the way in (`stored`: its
    checkpoint's dtype, where the caller read it already)."""
    _, architecture, _ = peek_transformers(folder)
    model = load_model(folder, architecture, placement, stored)
    tokenizer, vocabulary, specials = tokenizer_of(folder, model.config.target_vocab_size)
    if architecture == "vision-language":
        from .vlm import VisionLanguageLM, load_processor

        runner = causal_runner(folder, model, tokenizer, vocabulary, specials, name)
        return VisionLanguageLM.of(runner, load_processor(folder)).checked()
    if architecture == "decoder-only":
        return causal_runner(folder, model, tokenizer, vocabulary, specials, name)
    return encoding_runner(model, architecture, tokenizer, vocabulary, specials)


def encoding_runner(
    model: HFTransformer, architecture: str, tokenizer: Tokenizer, vocabulary, specials
) -> HFEncoder | HFSeq2Seq:
    """An encoder (with its masked-LM head: "masked-lm") or an encoder-decoder as a runner."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    runner: HFEncoder | HFSeq2Seq
    if architecture in ("encoder-only", "masked-lm"):
        encoder = HFMaskedLM if architecture == "masked-lm" else HFEncoder
        runner = encoder(model, tokenizer, specials, token_unit_of(tokenizer))
    else:
        runner = HFSeq2Seq(model, tokenizer, vocabulary, specials, token_unit_of(tokenizer))
    runner.max_tokens = min(runner.max_tokens, model.config.max_seq_len)
    return runner


def parameter_bytes(
    folder: Path, architecture: str, dtype: torch.dtype, quantize: str = "none"
) -> tuple[int, int]:
    """(the parameters its transformers class builds, a tied matrix once; the bytes they
    and its buffers take in `dtype`), counted on the meta device: nothing is allocated or
    read. Quantized ("4bit", "8bit"), each Linear's matrix but the output head's counts
    half a byte (and one 4-byte scale per 64 values) or one byte (and one per row) a
    value, as bitsandbytes stores them."""
    config = hf_config(folder)
    with torch.device("meta"), contextlib.redirect_stderr(io.StringIO()):
        model = model_class(architecture).from_config(config, trust_remote_code=False, dtype=dtype)
    # what from_pretrained keeps in float32 whatever the dtype (T5's feed-forward output in
    # float16): its own plan, matched as it matches it
    plan: dict = getattr(model, "_get_dtype_plan", lambda _: {})(dtype)
    for name, parameter in model.named_parameters():
        if any(re.search(pattern, name) for pattern in plan):
            parameter.data = parameter.data.float()
    held = module_bytes(model)
    if quantize != "none":
        from transformers.pytorch_utils import Conv1D
        from transformers.quantizers.base import get_keys_to_not_convert

        kept = {*get_keys_to_not_convert(model),  # (what bitsandbytes leaves as it is)
                *(getattr(model, "_keep_in_fp32_modules", None) or ()),
                *(getattr(model, "_keep_in_fp32_modules_strict", None) or ())}  # fmt: skip
        for name, module in model.named_modules():
            if any(k and (name == k or name.startswith(f"{k}.") or k in name.split("."))
                   for k in kept):  # fmt: skip
                continue
            if type(module) is nn.Linear or isinstance(module, Conv1D):
                values, rows = module.weight.numel(), module.weight.shape[0]
                packed = (
                    values // 2 + 4 * (values // 64) if quantize == "4bit" else values + 4 * rows
                )
                held += packed - values * module.weight.element_size()
    return sum(p.numel() for p in model.parameters()), held


def peek_unit(folder: Path) -> tuple[TokenUnit, str]:
    """The token unit of the folder's tokenizer.json, and its unknown token."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return token_unit_of(tokenizer), unknown_of(tokenizer, "<unk>")
