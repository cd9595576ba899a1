"""Models of the user's own (settings.models): each checked at start-up without its
weights (its config, tokenizer and the size of its weight files), read on first use, and
kept in a least-recently-used set per device bounded by the bytes their weights take there,
in the dtype they run in (the CPU's: settings.own_models_bytes; a GPU's: its memory less
what the runs on it capture): past it, the least recently used is freed."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, cast

import torch

from attnviz.model.attention_types import attention_specs
from attnviz.model.checkpoints import CheckpointError
from attnviz.model.config import ModelConfig
from attnviz.model.hf.encoders import HFEncoder, HFMaskedLM
from attnviz.model.hf.loading import HFSeq2Seq, parameter_bytes, peek_unit
from attnviz.model.hf.vision import ImageRunner
from attnviz.model.hf.vlm import VisionLanguageLM
from attnviz.model.long.reading import longest_prompt
from attnviz.model.outputs import output_of
from attnviz.model.placement import DTYPES, Placement, device_memory, element_bytes
from attnviz.model.pretrained.backends import Backend
from attnviz.model.pretrained.bert import BertRunner
from attnviz.model.pretrained.causal import CausalLM
from attnviz.model.pretrained.masked_lm import MaskedLM, mask_token_of
from attnviz.model.pretrained.sources import Origin, cached, load_origin, peek_origin
from attnviz.model.runner import Runner, RunnerBase
from attnviz.model.runtime import release_free_memory
from attnviz.model.transformer import Transformer

from ..budgets import memory_limit, models_room, resident_bytes
from ..errors import Unavailable
from ..settings import Settings

LOG = logging.getLogger("attnviz")
# the loaded runners' instance attributes the app reads (CausalLM's and BertRunner's)
INSTANCE_NAMES = frozenset(
    {"model", "tokenizer", "vocabulary", "stop_ids", "chat_template", "name",
     "add_special_tokens", "template_tokens", "head", "mask_id", "encoder"}
)  # fmt: skip
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# how a process is asked to stop: never a model's fault, so never caught as a refusal (any
# other BaseException is: a Rust panic in `tokenizers` or `safetensors` is pyo3's
# PanicException, a BaseException that `except Exception` lets through)
STOPS = (KeyboardInterrupt, SystemExit)
MAX_REASON_CHARS = 2000  # a refusal's reason as listed (one naming 180,000 tensors is 6 MB)
# (the runner classes: their class attributes state what the app reads before loading)
RUNNER_CLASSES: dict[str, type[RunnerBase]] = {
    "bert": BertRunner, "masked-lm": MaskedLM, "hf-encoder-only": HFEncoder,
    "hf-masked-lm": HFMaskedLM, "hf-encoder-decoder": HFSeq2Seq,
    "hf-image-encoder": ImageRunner, "hf-vision-language": VisionLanguageLM,
}  # else CausalLM  # fmt: skip


def parameters_of(config: ModelConfig) -> int:
    """The parameters a configuration builds (a tied matrix once), counted on the meta
    device: nothing is allocated."""
    with torch.device("meta"):
        model = Transformer(config, init=False)
    return sum(p.numel() for p in model.parameters())


class Pool:
    """The user's models loaded on one device (the CPU's memory, or a GPU's), least
    recently used first, bounded in bytes."""

    def __init__(self, max_bytes: int, device: str = "cpu", source: str = "") -> None:
        self.max_bytes, self.device = max_bytes, device
        # where the bound comes from, as refusals and /api/v1/models say it
        self.source = source or "ATTNVIZ_OWN_MODELS_BYTES"
        self._loaded: OrderedDict[str, OwnRunner] = OrderedDict()
        self._lock = threading.Lock()

    def used(self, runner: OwnRunner) -> None:
        """`runner` was just used (it is loaded): the others least recently used are freed
        while the loaded ones pass the bound (never `runner` itself)."""
        freed = []
        with self._lock:
            self._loaded[runner.name] = runner
            self._loaded.move_to_end(runner.name)
            while sum(r.bytes for r in self._loaded.values()) > self.max_bytes:
                oldest = next(iter(self._loaded.values()))
                if oldest is runner:
                    break
                del self._loaded[oldest.name]
                oldest.unload()  # (within the pool's lock: counted and freed together)
                freed.append(oldest)
        if freed:
            release_free_memory()

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._loaded)


def derived(limit: int, source: str) -> str:
    """Where a derived bound of the CPU's pool comes from, in words."""
    return (
        f"ATTNVIZ_OWN_MODELS_BYTES 0: the room {limit / 2**30:.1f} GiB ({source}) leaves "
        "after the server's needs and its other caches"
    )


class Pools:
    """One pool per device the user's models are placed on: the CPU's (mps shares its
    memory) bounded by settings.own_models_bytes; a GPU's by its memory less a capture
    per run at once and a working reserve (stated in its `source`)."""

    RESERVE = 2**30  # a GPU's CUDA context, torch's allocator's slack, the work under way

    def __init__(self, settings: Settings) -> None:
        self.cpu = Pool(settings.own_models_bytes)
        if not settings.own_models_bytes:  # derived from the memory the server has
            limit, source = memory_limit(settings)
            self.cpu = Pool(
                models_room(settings, resident_bytes(), limit), "cpu", derived(limit, source)
            )
        self._captures = settings.concurrent_runs() * settings.max_capture_bytes
        self._pools: dict[str, Pool] = {}

    def on(self, device: str) -> Pool:
        if device in ("cpu", "mps"):
            return self.cpu
        if device not in self._pools:
            total = device_memory(device) or 0
            room = max(0, total - self._captures - self.RESERVE)
            gib = 2**30
            self._pools[device] = Pool(
                room,
                device,
                f"its {total / gib:.1f} GiB less {self._captures / gib:.1f} GiB of captures "
                f"(ATTNVIZ_MAX_CAPTURE_BYTES per run at once) and {self.RESERVE / gib:.0f} GiB "
                "of work",
            )
        return self._pools[device]


class OwnRunner:
    """A model of the user's as a `Runner` whose weights are read when first used: what
    the app lists of it comes from its config and tokenizer; anything else reads it."""

    def __init__(
        self,
        name: str,
        path: str | Path,
        pools: Pools,
        max_bytes: int,
        backend: Backend | None = None,
        max_capture_bytes: int | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.name, self.max_bytes = name, max_bytes
        self.path, self.backend = Path(path), backend
        self.placement = placement or Placement()
        self.stated, self.origin, runner_key, specials = peek_origin(
            path, max_bytes, backend, self.placement
        )
        self.pool = pool = pools.on(self.origin.device)
        self.runner_class: Any = cast(Any, RUNNER_CLASSES.get(runner_key, CausalLM))  # (its class)
        # a language model reads prompts up to its context (model/long/), as long as
        # their capture fits in these bytes: on our code always, on transformers' where
        # its check passes when it is read (model/hf/long.py; else it keeps 512, and says
        # so once read), a vision-language model's picture and text too; the others keep
        # their own limit
        long = issubclass(self.runner_class, CausalLM)
        self.max_capture_bytes = max_capture_bytes if long else None
        self.special_tokens = specials if specials is not None else self.runner_class.special_tokens
        self._unit, self._unknown = self.runner_class.token_unit, self.runner_class.unknown_token
        folder = cached(path)
        dtype = DTYPES[self.origin.dtype]
        if runner_key.startswith("hf-"):  # transformers' classes, counted on the meta device
            architecture = runner_key.removeprefix("hf-")
            self.parameter_count, self.bytes = parameter_bytes(
                folder, architecture, dtype, self.placement.quantize
            )
        else:
            self.parameter_count = parameters_of(self.stated)
            self.bytes = self.parameter_count * element_bytes(dtype)
        # its tokenizer.json's (an image encoder has none)
        if folder.is_dir() and runner_key not in ("bert", "masked-lm", "hf-image-encoder"):
            self._unit, unknown = peek_unit(folder)
            if self._unit != "byte-bpe":  # (byte-level: every text has tokens)
                self._unknown = unknown
        if self.bytes > pool.max_bytes:
            raise CheckpointError(
                f"its weights take {self.bytes:,} bytes in {self.origin.dtype}, more than the "
                f"models of yours may hold on {pool.device}: {pool.max_bytes:,} bytes "
                f"({pool.source})"
            )
        self._runner: Runner | None = None
        self._failed: str | None = None
        self._lock = threading.Lock()
        # what the loaded runner has that the app may read: anything else is not there
        # (a name it lacks raises AttributeError without reading the weights)
        self._forwarded = {
            n for n in dir(self.runner_class) if not n.startswith("_")
        } | INSTANCE_NAMES

    @property
    def config(self) -> ModelConfig:
        """What its config states; once read, what the loaded model states (traced)."""
        return self._runner.config if self._runner is not None else self.stated

    @property
    def read(self) -> Runner | None:
        """The loaded runner, or None where its weights are not read (nothing is read)."""
        return self._runner

    card = None  # (a model of yours has no card)

    # what the app reads of a model before it runs it: no weights needed
    @property
    def capabilities(self):
        return self.runner_class.capabilities

    @property
    def token_unit(self):
        return self._unit

    @property
    def output_kind(self):
        return self.runner_class.output_kind

    @property
    def mask_token(self) -> str | None:
        """A masked-language model's mask token, as its tokenizer writes it."""
        if not output_of(self).fills_masks:
            return None
        return mask_token_of(self.special_tokens) or self.runner_class.mask_token

    @property
    def max_tokens(self):
        loaded = self.__dict__.get("_runner")
        if loaded is not None:
            return loaded.max_tokens
        if self.max_capture_bytes is not None:
            return longest_prompt(self.stated, self.max_capture_bytes)
        return min(self.runner_class.max_tokens, self.stated.max_seq_len)

    @property
    def unknown_token(self):
        return self._unknown

    @property
    def attention(self):
        """What its config states; once read, what tracing its forward pass found."""
        loaded = self.__dict__.get("_runner")
        return loaded.attention if loaded is not None else attention_specs(self.stated)

    def runner(self) -> Runner:
        """The loaded runner, read now if it is not (one thread reads; the others wait). A
        request takes it once and keeps it (ModelEntry.loaded_runner): freed meanwhile, it
        lives on until that request ends, and is not read twice. One that cannot be read
        (what the start-up check could not see, e.g. a tied output that differs from the
        embedding) is a 503 naming the reason, every time, without reading it again."""
        with self._lock:
            if self._failed is not None:
                raise Unavailable(self._failed)
            if self._runner is None:
                LOG.info("reading model %s from %s", self.name, self.path)
                try:
                    loaded, _ = load_origin(
                        self.path, self.name, self.max_bytes, self.backend, self.placement
                    )
                    if self.max_capture_bytes is not None and isinstance(loaded, CausalLM):
                        loaded = loaded.read_long(self.max_capture_bytes)
                    if loaded.attention != self.attention:  # what its config stated
                        LOG.warning(
                            "model %s: its attention, traced when read, is %s (its config "
                            "stated %s): the traced one is served",
                            self.name, describe(loaded.attention), describe(self.attention),
                        )  # fmt: skip
                    self._runner = loaded
                except (MemoryError, torch.OutOfMemoryError):  # (a GPU's too: not its fault)
                    release_free_memory()
                    raise Unavailable(
                        f"the model {self.name} does not fit in memory now: try later"
                    ) from None
                except STOPS:
                    raise
                except BaseException as exc:  # (transformers' code raises what it raises)
                    said = reason(exc, self.path)
                    self._failed = f"the model {self.name} cannot be read: {said}"
                    LOG.error("%s", self._failed)
                    raise Unavailable(self._failed) from None
            runner = self._runner
        self.pool.used(self)
        return runner

    def unload(self) -> None:
        with self._lock:
            self._runner = None
        LOG.info(
            "model %s freed from %s: the least recently used past %s",
            self.name, self.pool.device, self.pool.source,
        )  # fmt: skip

    @property
    def is_loaded(self) -> bool:
        return self._runner is not None

    def __getattr__(self, name: str):
        # run, tokenize, generate, model, shown, decode, ...: the loaded runner's
        if name.startswith("_") or name not in self.__dict__.get("_forwarded", ()):
            raise AttributeError(name)
        return getattr(self.runner(), name)


def describe(specs) -> str:
    return ", ".join(
        f"{s.type} {s.layers} layers x {s.query_heads}/{s.kv_heads} heads of {s.head_dim}"
        for s in specs
    )


def reason(exc: BaseException, path: str | Path | None = None) -> str:
    """Why a model is refused: what was raised (named where it is no Exception: a panic),
    the server's paths of the model out of it where `path` is given (as a client may read
    it), cut to MAX_REASON_CHARS."""
    said = str(exc) if path is None else scrub(str(exc), path)
    if not isinstance(exc, Exception) or not said:
        said = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    return said if len(said) <= MAX_REASON_CHARS else said[: MAX_REASON_CHARS - 1] + "…"


def scrub(message: str, path: str | Path) -> str:
    """A reason as a client may read it: the server's paths of the model replaced (a repo
    id is the user's own words, kept; its snapshot's path is not)."""
    given = str(path)
    local = Path(given)
    on_disk = local.exists() or local.is_absolute()
    paths = {given, str(local.resolve())} if on_disk else set()
    with contextlib.suppress(Exception):  # (a refusal must never stop the server)
        paths.add(str(cached(given)))
    if not on_disk:
        paths.discard(given)
    for where in sorted(paths, key=len, reverse=True):
        if where and where != ".":
            message = message.replace(where, "<its folder>")
    return message


def own_models(
    settings: Settings, taken: set[str]
) -> tuple[list[tuple[str, OwnRunner, Origin]], dict[str, str]]:
    """(id, runner, origin) of each of the user's models that can be read (checked now
    without its weights), and the reason of each that cannot be (logged too), by id,
    without the server's paths in it."""
    pools = Pools(settings)
    found, refused = [], {}
    for model_id in settings.models:
        path = settings.model_path(model_id)
        if model_id in taken:
            raise ValueError(f"the model id {model_id!r} is taken: choose another for {path}")
        if not MODEL_ID.fullmatch(model_id):
            raise ValueError(
                f"the model id {model_id!r} is not letters, digits, '.', '_' and '-': "
                "it names the model in URLs"
            )
        backend: Backend | None = "transformers" if settings.backend == "transformers" else None
        try:
            runner = OwnRunner(
                model_id, path, pools, settings.max_model_bytes, backend,
                settings.capture_budget(), settings.placement(model_id),
            )  # fmt: skip
        except STOPS:
            raise
        except BaseException as exc:  # (any failure refuses this model, not the server)
            LOG.error("model %s from %s is not served: %s", model_id, path, reason(exc))
            refused[model_id] = reason(exc, path)
            continue
        found.append((model_id, runner, runner.origin))
    return found, refused
