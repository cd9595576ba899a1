"""Where a model of yours comes from (settings.models): a folder in Hugging Face's layout,
the repo id of one in the Hugging Face cache, or a Llama .gguf file; checked without its
weights (`peek_origin`: its config, tokenizer and every tensor's name and shape from the
files' headers) and read (`load_origin`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

import torch
from safetensors import SafetensorError

from ..checkpoints import CheckpointError
from ..config import ModelConfig
from ..placement import Placement, dtype_name, stored_dtype
from ..runner import Runner
from ..transformer import Transformer
from .backends import Backend, choose
from .bert import NOT_MAPPED as BERT_NOT_MAPPED
from .bert import BertRunner
from .causal import CausalLM
from .hf import (
    adapter_of,
    load_folder,
    mapped,
    read_json,
    read_weights,
    shard_names,
    tokenizer_of,
)
from .mapping import map_state
from .masked_lm import MaskedLM, MaskedLMHead, required_mask_token, split, tied
from .tokenizer_probe import probe_tokenizer


@dataclass(frozen=True)
class Origin:
    """Where a model of the user's came from, as `/api/v1/models` states it."""

    path: str
    model_type: str  # config.json's model_type, or "llama (GGUF)"
    stored: str  # the dtypes its weights were stored in
    backend: str = "ours"  # which code runs it: "ours" (model/) or "transformers"
    note: str = ""  # what else a reader of its views should know (a hybrid's layer numbers)
    dtype: str = "float32"  # the dtype it computes in
    device: str = "cpu"  # where it runs (placement.Where.device: "cuda" spread over GPUs)
    quantized: str | None = None  # "4bit" or "8bit": its matrices as bitsandbytes stores them

    @property
    def shown(self) -> str:
        """Where it came from as clients read it: the repo id as given, or the name of its
        folder or file, never a path of the server's disk."""
        given = self.path.split(CACHED, 1)[0]  # (a repo id read from the cache: as given)
        return given if REPO_ID.fullmatch(given) else PurePath(given).name


REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
CACHED = " (the Hugging Face cache: "  # what follows a repo id read from the cache


def cached(where: str | Path) -> Path:
    """A path as given; or, where none exists and it reads as a repo id (`org/name`), its
    snapshot in the Hugging Face cache, found with local files only: nothing is
    downloaded."""
    path = Path(where)
    if path.exists() or not REPO_ID.fullmatch(str(where)):
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(str(where), local_files_only=True))
    except LocalEntryNotFoundError:
        raise CheckpointError(
            f"{where} is neither a path nor a model in the Hugging Face cache (HF_HUB_CACHE; "
            "nothing is downloaded: fetch it first, e.g. hf download "
            f"{where})"
        ) from None


def weight_files(path: Path) -> list[Path]:
    """The files holding a model's weights: the .gguf itself, or a folder's safetensors."""
    if path.is_file():
        return [path]
    index = path / "model.safetensors.index.json"
    if index.exists():
        return [path / shard for shard in shard_names(path)]
    return [f for f in [path / "model.safetensors"] if f.exists()]


def check_folder(path: Path, max_bytes: int | None) -> None:
    """What a folder (or file) of a model must pass before anything of it is read: its
    weight files' size, and its tokenizer's time on crafted texts (`probe_tokenizer`)."""
    check_size(path, max_bytes)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        probe_tokenizer(path / "tokenizer.json")


def check_size(path: Path, max_bytes: int | None) -> None:
    """Weight files over `max_bytes` are refused before they are read."""
    if max_bytes is not None and path.exists():
        size = sum(f.stat().st_size for f in weight_files(path) if f.exists())
        if size > max_bytes:
            raise CheckpointError(
                f"{path} holds {size:,} bytes of weights, over the limit of {max_bytes:,} "
                "(ATTNVIZ_MAX_MODEL_BYTES): not read"
            )


BERT_ARCHITECTURES = {"BertModel": "bert", "BertForMaskedLM": "masked-lm"}


def check_bert(folder: Path, hf: dict) -> str:
    """A BERT folder's architecture ("bert": its encoder, mean-pooled; "masked-lm": with its
    masked-LM head), its tokenizer and weight file there; otherwise CheckpointError."""
    found = {BERT_ARCHITECTURES.get(a) for a in hf.get("architectures") or ["BertModel"]}
    named = {k for k in found if k is not None}
    if None in found or len(named) != 1:
        raise CheckpointError(
            f"{folder}: {hf['architectures']} is not supported; a BERT folder maps as "
            f"{' or '.join(BERT_ARCHITECTURES)}"
        )
    if not (folder / "tokenizer.json").exists():
        raise CheckpointError(f"{folder} has no tokenizer.json: its text cannot be read")
    if not (folder / "model.safetensors").exists():
        raise CheckpointError(f"{folder}: a BERT folder is read from one model.safetensors")
    check_pooling(folder)
    return named.pop()


def check_pooling(folder: Path) -> None:
    """A sentence-transformers folder (modules.json) must pool by the mean of its tokens,
    as BertRunner does (a BertModel folder without one is mean-pooled, as the model says)."""
    if not (folder / "modules.json").exists():
        return
    for module in read_json(folder / "modules.json"):
        if not str(module.get("type", "")).endswith("Pooling"):
            continue
        pooling = read_json(folder / module.get("path", "1_Pooling") / "config.json")
        modes = sorted(k.removeprefix("pooling_mode_") for k, on in pooling.items()
                       if k.startswith("pooling_mode_") and on)  # fmt: skip
        if modes != ["mean_tokens"]:
            raise CheckpointError(
                f"{folder}: its sentence-transformers pooling is {modes or 'none'}; only "
                "the mean of the tokens (mean_tokens) is read"
            )


def hf_depth(folder: Path) -> int | None:
    """The number of layers config.json states (num_hidden_layers), if it states one."""
    hf = read_json(folder / "config.json")
    text: dict = hf["text_config"] if isinstance(hf.get("text_config"), dict) else hf
    depth = text.get("num_hidden_layers")
    return depth if isinstance(depth, int) and depth > 0 else None


def model_type_of(hf: dict, folder: Path) -> str:
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CheckpointError(
            f"{folder}/config.json names no model_type: its architecture is unknown"
        )
    return model_type


def load_origin(
    path: str | Path,
    name: str = "",
    max_bytes: int | None = None,
    backend: Backend | None = None,
    placement: Placement | None = None,
) -> tuple[Runner, Origin]:
    """A folder in Hugging Face's layout or a Llama-family .gguf file, as a runner and
    where it came from, read by the backend `backends.choose` names for its architecture
    (`backend="transformers"` forces transformers' code; so does a `placement` model/
    does not run: see `on_our_code`); one whose weight files pass `max_bytes` is
    refused unread."""
    placement = placement or Placement()
    given, path = str(path), cached(path)
    check_folder(path, max_bytes)
    runner: Runner
    if path.suffix == ".gguf" and path.is_file():
        unquantized(placement)
        dtype = dtype_name(placement.torch_dtype(None))
        stored = f"GGUF (dequantized to {dtype})"
        arch = gguf_arch(path)
        if gguf_on_transformers(arch, backend, placement):
            from ..hf.gguf import load_gguf_transformers

            runner = load_gguf_transformers(path, name, placement)
            origin = Origin(str(path.resolve()), f"{arch} (GGUF)", stored, "transformers")
            return runner, placed_origin(origin, placement, None)
        return CausalLM.read(path), Origin(str(path.resolve()), "llama (GGUF)", stored)
    if not path.is_dir():
        raise CheckpointError(f"{path} is neither a model folder nor a .gguf file")
    dtypes: set[str] = set()
    hf = read_json(path / "config.json")
    model_type = model_type_of(hf, path)
    read_weights(path, dtypes, meta=True)  # (refuses pickles; the dtypes stored)
    where = str(path.resolve()) if given == str(path) else f"{given}{CACHED}{path})"
    stored_as = stored_dtype(hf, dtypes)
    if folder_on_transformers(model_type, backend, placement, stored_as):
        from ..hf.calls import image_model_types
        from ..hf.loading import load_transformers
        from ..hf.pictures import load_image_runner

        if model_type in image_model_types():  # (as peek_transformers finds it)
            runner = load_image_runner(path, placement)
        else:
            runner = load_transformers(path, name, placement, stored_as)
        origin = Origin(where, model_type, ", ".join(sorted(dtypes)), "transformers")
        return runner, placed_origin(origin, placement, stored_as)
    elif adapter_of(hf, path).reads == "bert":
        runner = load_bert(path, hf, dtypes)
    else:
        runner = load_folder(path, name, dtypes)
    return runner, Origin(where, model_type, ", ".join(sorted(dtypes)))


def unquantized(placement: Placement) -> None:
    """A GGUF file is read dequantized: quantizing it again is refused, not ignored."""
    if placement.quantize != "none":
        raise CheckpointError(
            f"a GGUF file is read dequantized: its placement's quantize ({placement.quantize}) "
            "applies to a Hugging Face folder's weights only"
        )


def gguf_arch(path: Path) -> str:
    """A GGUF file's general.architecture (from its header: no tensor read)."""
    from .gguf_file import GGUFFile, field

    return str(field(GGUFFile(str(path)), "general.architecture"))


def placed_origin(origin: Origin, placement: Placement, stored: torch.dtype | None) -> Origin:
    """An origin of transformers' code with the dtype, device and quantization its placement
    gives it (a quantization that cannot be: CheckpointError, before anything is read)."""
    dtype = placement.torch_dtype(stored)
    placement.quantization(dtype)
    return replace(
        origin, dtype=dtype_name(dtype), device=placement.where().device,
        quantized=placement.quantize if placement.quantize != "none" else None,
    )  # fmt: skip


OFF_OUR_CODE = (
    "model/ reads this architecture in float32 on the CPU; placed otherwise, it runs on "
    "transformers' own code."
)


def folder_on_transformers(
    model_type: str, backend: Backend | None, placement: Placement, stored: torch.dtype | None
) -> bool:
    """Whether a folder runs on transformers' code: its architecture's backend, the one
    forced, or a placement model/ does not run."""
    return choose(model_type, backend).backend == "transformers" or not on_our_code(
        placement, stored
    )


def gguf_on_transformers(arch: str, backend: Backend | None, placement: Placement) -> bool:
    """Whether a GGUF file runs on transformers' GGUF loader: model/ reads a Llama one, on
    the CPU in float32, unless transformers' code is forced."""
    return arch != "llama" or backend == "transformers" or not on_our_code(placement, None)


def on_our_code(placement: Placement, stored: torch.dtype | None) -> bool:
    """Whether model/ may run a model placed so: it computes in float32 on the CPU (the
    shipped models' exact figures); any other dtype or device is transformers' code's,
    whose eager attention rounds as the model's authors' does."""
    return (
        placement.where().on_cpu
        and placement.torch_dtype(stored) == torch.float32
        and placement.quantize == "none"
    )


def load_bert(folder: Path, hf: dict, dtypes: set[str]) -> BertRunner:
    """A BERT folder: a BertModel (or sentence-transformers) one read as the shipped MiniLM
    is (`BertRunner`), its output the mean-pooled sentence embedding; a BertForMaskedLM one
    with its head."""
    architecture = check_bert(folder, hf)
    tensors = read_weights(folder, dtypes)  # (refuses pickles; checks the files read)
    try:
        runner = (MaskedLM if architecture == "masked-lm" else BertRunner).load(folder, tensors)
    except (KeyError, OSError, SafetensorError, ValueError) as exc:
        raise CheckpointError(f"{folder}: {exc!r}") from None
    runner.max_tokens = min(runner.max_tokens, runner.model.config.max_seq_len)
    return runner


def peek_origin(
    path: str | Path,
    max_bytes: int | None = None,
    backend: Backend | None = None,
    placement: Placement | None = None,
) -> tuple[ModelConfig, Origin, str, frozenset[str] | None]:
    """A model checked without reading its weights: (its config, where it comes from,
    its runner key (a model_type model/ maps, "masked-lm", or "hf-" and the architecture of one
    transformers' code reads), its special tokens or None where the runner's own apply)."""
    placement = placement or Placement()
    given, path = str(path), cached(path)
    check_folder(path, max_bytes)
    if path.suffix == ".gguf" and path.is_file():
        from .gguf_file import GGUFFile
        from .llama import byte_level_tokenizer, config_from_gguf

        unquantized(placement)
        stored = f"GGUF (dequantized to {dtype_name(placement.torch_dtype(None))})"
        arch = gguf_arch(path)
        origin = Origin(str(path.resolve()), f"{arch} (GGUF)", stored)
        if gguf_on_transformers(arch, backend, placement):  # (as load_origin routes it)
            from ..hf.gguf import peek_gguf

            config, named = peek_gguf(path)
            origin = placed_origin(replace(origin, backend="transformers"), placement, None)
            return config, origin, "hf-decoder-only", named
        reader = GGUFFile(str(path))
        _, _, control = byte_level_tokenizer(reader)
        return config_from_gguf(reader), origin, "llama", frozenset(control)
    if not path.is_dir():
        raise CheckpointError(f"{path} is neither a model folder nor a .gguf file")
    hf = read_json(path / "config.json")
    model_type = model_type_of(hf, path)
    dtypes: set[str] = set()
    where = str(path.resolve()) if given == str(path) else f"{given}{CACHED}{path})"
    headers = read_weights(path, dtypes, meta=True)  # (refuses pickles; the dtypes stored)
    stored_as = stored_dtype(hf, dtypes)
    if folder_on_transformers(model_type, backend, placement, stored_as):
        from ..hf.loading import peek_transformers

        config, architecture, _ = peek_transformers(path)
        # (an image encoder has no tokenizer: its runner's own apply)
        specials = (
            None
            if architecture == "image-encoder"
            else tokenizer_of(path, config.target_vocab_size)[2]
        )
        if architecture == "masked-lm":
            required_mask_token(specials)
        depth = hf_depth(path)
        note = ""
        attending = config.decoder_layers
        if architecture == "decoder-only" and depth and attending < depth:
            which = (
                "its attention layer is numbered 0" if attending == 1
                else f"its attention layers are numbered 0 to {attending - 1} among themselves"
            )  # fmt: skip
            verb = "attends" if attending == 1 else "attend"
            note = (
                f"Only {attending} of its {depth} layers {verb} (the others are "
                f"linear-attention or state-space layers): {which}."
            )
        origin = Origin(where, model_type, ", ".join(sorted(dtypes)), "transformers", note)
        if choose(model_type, backend).backend == "ours":  # (its placement chose this code)
            origin = replace(origin, note=" ".join(filter(None, [note, OFF_OUR_CODE])))
        origin = placed_origin(origin, placement, stored_as)
        return config, origin, f"hf-{architecture}", specials
    adapter = adapter_of(hf, path)
    if adapter.reads == "bert":
        architecture = check_bert(path, hf)
        tensors = headers
        config = adapter.config(hf)
        with torch.device("meta"):
            model = Transformer(config, init=False)
        if architecture == "masked-lm":
            tensors, head = split(tensors)
            with torch.device("meta"):
                MaskedLMHead(config, model.encoder.tok_embed).check(head, tied(hf))
        tensors.pop("embeddings.position_ids", None)  # (checked when read)
        map_state(tensors, model, adapter.names, BERT_NOT_MAPPED, f"BERT ({path})")
        return config, Origin(where, model_type, ", ".join(sorted(dtypes))), architecture, None
    config, _, _, specials, _ = mapped(path, hf, adapter, dtypes, meta=True)
    return config, Origin(where, model_type, ", ".join(sorted(dtypes))), model_type, specials
