"""The model interface: what every served model is (a `Runner`) and what one run gives (a
`RunResult`). The app reads what a runner states here; it never guesses a model's family
from its attributes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from torch import Tensor

from .attention_types import AttentionSpec, Side, attention_specs
from .config import ModelConfig
from .hooks import Capture, NamesFilter
from .outputs import OutputKind, output_of
from .patches import ImageMap, PicturePrompt
from .served import ServedModel
from .transformer import Pieces

if TYPE_CHECKING:
    from .pretrained.decoding import Recording, Sampling, Step

# What one token of the input is: a character (the pronouncer), a WordPiece piece (BERT:
# pieces merge into words), a byte-level BPE piece (GPT-2, Llama-family LLMs), or a
# SentencePiece piece (T5, Marian, Gemma: "▁" marks the start of a word).
# An image encoder's positions are a picture's patches (and its class or register tokens).
TokenUnit = Literal["characters", "wordpiece", "byte-bpe", "sentencepiece", "patches"]


@dataclass(frozen=True)
class Capabilities:
    """What a runner can do beyond one captured forward pass; the lab's experiments
    declare which of these they need."""

    kv_cache: bool = False  # decodes step by step through a KV cache (`decoded_pieces`)
    similarity: bool = False  # makes a sentence embedding: analyze's `compare` gives a cosine
    word_view: bool = False  # its tokens merge into words (`RunResult.source_words`)
    # continues a prompt token by token (`generate`), and runs a prompt as a chat turn or
    # with the tokens generated after it (`run(..., chat=, continuation=)`)
    generation: bool = False
    # what a run reads: text (`run`), pictures (`read_picture`: a `PictureRunner`), or both
    text: bool = True
    pictures: bool = False


@dataclass
class DecodedPiece:
    """One piece of a text as a runner decodes it step by step: its source ids (1, S), the
    decoder input its greedy output makes ([<bos>, ...]) and whether that ended with <eos>."""

    source: Tensor
    target_ids: list[int]
    ended: bool


@dataclass
class RunResult:
    """One run of a model on one text: its tokens, its output, and the capture."""

    text: str  # the input as the model read it (whitespace collapsed, case folded)
    source_tokens: list[str]  # one per encoder position (a decoder-only model: the prompt)
    target_tokens: list[str]  # one per decoder position fed: <bos> and the output; or []
    output_tokens: list[str]  # what the model produced (transcription, continuation)
    truncated: bool  # the input was longer than the model reads: cut to its first tokens
    source_length: int  # tokens in the input before truncation
    capture: Capture | None  # one forward pass over (source, target) with hooks captured
    embedding: list[float] | None = None  # a sentence embedding, for models that make one
    source_words: list[int | None] | None = None  # word of each source token (WordPiece)
    # the ids of the tokens read and fed: the lab runs the model again on exactly these
    source_ids: list[int] = field(default_factory=list, kw_only=True)
    target_ids: list[int] = field(default_factory=list, kw_only=True)
    # per decoder position (target_tokens), the token the captured pass predicts there
    # (argmax of its output): for text decoded in one piece, target_tokens shifted by one
    # and <eos>; a decoder row is the step that predicts this token, fed target_tokens' one
    predicted_tokens: list[str] = field(default_factory=list, kw_only=True)
    # the output as text, where joining its tokens by spaces is not (a continuation decoded)
    output_text: str | None = field(default=None, kw_only=True)
    # per decoder position whose step a continuation model generated (and its last one,
    # the next token): the likeliest next tokens and their probabilities, (id, p)
    alternatives: dict[int, list[tuple[int, float]]] = field(
        default_factory=dict, kw_only=True, repr=False
    )
    # a masked-LM's [MASK] source positions: the likeliest tokens there, (id, p)
    masked: dict[int, list[tuple[int, float]]] = field(
        default_factory=dict, kw_only=True, repr=False
    )
    # a step-by-step decoder's pieces as it decoded them (`StepwiseRunner.decoded_pieces`)
    pieces: list[DecodedPiece] = field(default_factory=list, kw_only=True, repr=False)
    # where the text was decoded in several pieces: the piece of each source and target
    # position, which the captured pass (and every pass over the run's ids) reads them in
    read_in: Pieces | None = field(default=None, kw_only=True, repr=False)

    # the tokenizer's own pieces of source_tokens and target_tokens, where they are shown
    # otherwise (a byte-level "Ġthe" shown as "␣the", pronounce's space as "␣"); None: as shown
    source_raw: list[str] | None = field(default=None, kw_only=True, repr=False)
    target_raw: list[str] | None = field(default=None, kw_only=True, repr=False)
    # a picture's run: the picture and what each source position is (a patch and its box)
    image: ImageMap | None = field(default=None, kw_only=True, repr=False)

    def tokens(self, side: Side) -> list[str]:
        return self.source_tokens if side == "source" else self.target_tokens

    def raw(self, side: Side) -> list[str]:
        """A side's tokens as the tokenizer spells them (see source_raw)."""
        if side == "source":
            return self.source_tokens if self.source_raw is None else self.source_raw
        return self.target_tokens if self.target_raw is None else self.target_raw

    @property
    def captured(self) -> Capture:
        """The capture of a run made with one (every run the app serves views of)."""
        if self.capture is None:
            raise ValueError("this run was made without a capture")
        return self.capture


@runtime_checkable
class Runner(Protocol):
    """A served model: a Transformer of model/ with what reads text into it and out of it.

    `token_unit`, `output_kind`, `special_tokens`, `max_tokens` and `capabilities` state
    what the app needs; `attention` lists the attention types (from the config, see
    `attention_specs`). `target_vocabulary()` maps the decoder's ids to tokens (None for an
    encoder-only model). `RunnerBase` gives `attention` from the model's config."""

    @property
    def model(self) -> ServedModel: ...

    @property
    def token_unit(self) -> TokenUnit: ...

    @property
    def output_kind(self) -> OutputKind: ...

    @property
    def special_tokens(self) -> frozenset[str]: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def config(self) -> ModelConfig:
        """Its model's configuration, as the model states it."""
        ...

    @property
    def card(self) -> Mapping[str, Any] | None:
        """Its checkpoint's evaluation (a shipped model's card), or None."""
        ...

    @property
    def max_capture_bytes(self) -> int | None:
        """Where it reads a prompt as long as its context whole (the long path): the
        bytes that prompt's capture may take; None: it cuts at `max_tokens`."""
        ...

    def piece(self, token_id: int) -> str | None:
        """An id's token as its tokenizer spells it (byte-level "Ġthe"); None where the
        tokenizer's spelling is the token as shown."""
        ...

    @property
    def unknown_token(self) -> str:
        """The source token of what its tokenizer cannot read."""
        ...

    @property
    def attention(self) -> list[AttentionSpec]: ...

    def run(self, text: str, capture: bool = True, names_filter: NamesFilter = None) -> RunResult:
        """Tokenize, produce the output, and (if `capture`) capture one forward pass."""
        ...

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        """Source ids and tokens of a text, specials included, cut to `max_tokens`."""
        ...

    def tokens_read(self, text: str) -> int:
        """The tokens a run of `text` reads (at most `max_tokens`): its price, before it
        runs, is these times the model's layers."""
        ...

    def with_model(self, model: ServedModel) -> Runner:
        """The same tokenizers and settings over other weights (the untrained twin)."""
        ...

    def target_vocabulary(self) -> list[str] | None:
        """The decoder's token of each id, or None without a decoder."""
        ...


@runtime_checkable
class StepwiseRunner(Runner, Protocol):
    """A runner with the capability `kv_cache`: its output is decoded step by step, and it
    tells how (the lab replays it through the KV cache)."""

    def decoded_pieces(self, result: RunResult) -> list[DecodedPiece]:
        """The pieces the output was decoded in, as `run` did, each with its greedy output."""
        ...

    def target_vocabulary(self) -> list[str]: ...


def _as_stated(runner: Runner, stated: bool, lacking: str) -> Any:
    """The runner as the protocol its statement (a capability, its output kind) promises:
    the checked cast `stepwise`, `generating` and `masking` make (a TypeError otherwise)."""
    if not stated:
        raise TypeError(f"{type(runner).__name__} {lacking}")
    return runner


def stepwise(runner: Runner) -> StepwiseRunner:
    """A runner that states the capability `kv_cache`, as one (a TypeError otherwise)."""
    return _as_stated(runner, runner.capabilities.kv_cache, "does not decode step by step")


@runtime_checkable
class GeneratingRunner(Runner, Protocol):
    """A runner with the capability `generation` (a language model): it reads a prompt,
    continues it token by token, and says its tokens as text and one by one."""

    @property
    def stop_ids(self) -> frozenset[int]: ...

    def run(
        self,
        text: str,
        capture: bool = True,
        names_filter: NamesFilter = None,
        *,
        chat: bool = False,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        """One pass over the prompt (as a chat turn, where asked) and a continuation."""
        ...

    def prompt(self, text: str, chat: bool = False) -> tuple[str, list[int], bool, int]:
        """(the prompt read, its ids, whether they were cut, their length before)."""
        ...

    def chat_prompt(self, text: str) -> str:
        """The text as a user turn of its chat template."""
        ...

    def encode(
        self, text: str, special: bool | None = None, limit: int | None = None
    ) -> tuple[list[int], bool, int]:
        """(ids, whether they were cut, their length before)."""
        ...

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        sampling: Sampling = ...,
        rows: bool = False,
        stop: bool = True,
        record: Recording | None = None,
        inputs: Mapping[str, Tensor] | None = None,
    ) -> Iterator[Step]:
        """The prompt continued, a step at a time (its passes kept in `record`; `inputs`:
        what the prompt's pass reads besides its ids, a picture's pixels)."""
        ...

    def recording(self, prompt: list[int], generated: list[int], most: int) -> Recording | None:
        """What a generation keeps to be its sequence's run, where that pays."""
        ...

    def recorded(
        self,
        text: str,
        prompt: list[int],
        generated: list[int],
        record: Recording,
        cut: bool = False,
        length: int | None = None,
    ) -> RunResult | None:
        """The run of the prompt and what was generated, from the generation's passes."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Ids as text."""
        ...

    def shown(self, ids: list[int]) -> list[str]:
        """Each id's token as people read it in this sequence."""
        ...

    def target_vocabulary(self) -> list[str]: ...


@runtime_checkable
class PictureRunner(Runner, Protocol):
    """A runner with the capability `pictures`: it reads a picture (and, where it has
    `text` too, a text beside it)."""

    def read_picture(
        self,
        picture: Any,
        digest: str,
        text: str | None = None,
        names_filter: NamesFilter = None,
        continuation: list[int] | tuple[int, ...] = (),
    ) -> RunResult:
        """A picture (an RGB, upright PIL image; `digest` its key, app/images.py's) read
        with every hook captured (a model that continues a prompt: with the tokens it
        generated after it, `continuation`); the run's `image` says what each position is."""
        ...

    def positions_read(self, width: int, height: int) -> int:
        """The positions a picture of this size makes (its price, before it runs)."""
        ...


@runtime_checkable
class PictureGeneratingRunner(GeneratingRunner, PictureRunner, Protocol):
    """A runner with both `generation` and `pictures`: it continues a prompt that holds a
    picture (a vision-language model)."""

    def read_prompt(self, picture: Any, text: str | None) -> PicturePrompt:
        """A picture and a text as its processor makes them into a prompt."""
        ...


def pictures(runner: Runner) -> PictureRunner:
    """`runner` as the PictureRunner its `pictures` capability states it is."""
    return _as_stated(runner, runner.capabilities.pictures, "does not read pictures")


def generating(runner: Runner) -> GeneratingRunner:
    """A runner that states the capability `generation`, as one (a TypeError otherwise)."""
    return _as_stated(runner, runner.capabilities.generation, "does not generate")


@runtime_checkable
class MaskingRunner(Runner, Protocol):
    """A runner whose output is `masked`: a masked-language model predicting each mask."""

    @property
    def mask_token(self) -> str | None: ...

    def token(self, token_id: int) -> str:
        """One id's token as people read it on its own."""
        ...


def masking(runner: Runner) -> MaskingRunner:
    """A runner whose output fills mask tokens, as one (a TypeError otherwise)."""
    return _as_stated(runner, output_of(runner).fills_masks, "predicts no mask")


class RunnerBase:
    """What runners share: their config and attention types from their model's, and the
    defaults of what most do not have (a card, the long path, spelled pieces, a mask)."""

    model: ServedModel
    unknown_token = "<unk>"  # the source token of what the tokenizer cannot read
    card: Mapping[str, Any] | None = None
    max_capture_bytes: int | None = None
    mask_token: str | None = None

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def attention(self) -> list[AttentionSpec]:
        return attention_specs(self.model.config)

    def piece(self, token_id: int) -> str | None:
        return None

    def tokenize(self, text: str) -> tuple[list[int], list[str]]:
        raise NotImplementedError  # (each runner's own)

    def tokens_read(self, text: str) -> int:
        """What `tokenize` reads: a runner that reads more (the long path) says so."""
        return len(self.tokenize(text)[0])
