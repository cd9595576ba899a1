"""What every experiment of the lab shares: the model entry, the ordinary run of the text,
and forward passes of the same model with hook functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from attnviz.model.attention_types import AttentionSpec
from attnviz.model.hooks import Capture, HookFn, NamesFilter, hooked
from attnviz.model.long import LongCapture
from attnviz.model.long.reading import LONG_FROM
from attnviz.model.runner import RunResult, generating
from attnviz.model.twins import model_inputs

from ..catalog.zoo import ModelEntry
from ..errors import CannotServe
from ..images import Picture
from ..runs.answers import tokens_of
from ..runs.inference import Inference


class LabContext:
    """One request's model entry, its run (through `Inference.run`: validated, cached, in
    a run slot of its own) and the ids that run read; experiments run the model again
    through `forward` and `encoder_weights`, inside the run slot the registry takes. A long
    input is refused unless the experiment reads one (`long_ok`; then `long` is set)."""

    def __init__(
        self,
        inference: Inference,
        model: str | None,
        text: str | None,
        chat: bool = False,
        continuation: Sequence[int] = (),
        long_ok: bool = False,
        picture: Picture | None = None,
    ) -> None:
        self.inference = inference
        self.entry: ModelEntry = inference.entry(model)
        if not long_ok and text is not None:
            self._refuse_long(text, chat, continuation)
        self.result: RunResult = inference.run(self.entry, text, chat, continuation, picture)
        self.long = isinstance(self.result.capture, LongCapture)
        if self.long and not long_ok:
            raise CannotServe(self._too_long(len(self.result.source_tokens)))
        self.chat, self.continuation = chat, list(continuation)
        self.runner = self.entry.loaded_runner()  # held for the whole experiment
        self.model = self.runner.model
        self.config = self.entry.config
        # the ids of the very tokens the run read (re-encoding its display text may differ)
        self.source = torch.tensor([self.result.source_ids])
        self.target = torch.tensor([self.result.target_ids]) if self.result.target_ids else None

    def _refuse_long(self, text: str, chat: bool, continuation: Sequence[int]) -> None:
        """A 422 before a long prompt is run (seconds): a model that reads its whole
        context counts its tokens first (the run's own check follows)."""
        if self.entry.runner.max_capture_bytes is None or len(text) < LONG_FROM:
            return
        try:
            _, ids, _, _ = generating(self.entry.loaded_runner()).prompt(text, chat)
        except ValueError:
            return  # (the run says why)
        if len(ids) + len(continuation) > LONG_FROM:
            raise CannotServe(self._too_long(len(ids) + len(continuation)))

    @staticmethod
    def _too_long(n: int) -> str:
        return (
            f"the lab and the views inside a head read whole heads: at most {LONG_FROM} "
            f"tokens; this input has {n:,} (the head and model views read it by windows): "
            "shorten it"
        )

    def session(self):
        """The run slot an experiment's model runs share (not re-entrant: take it once)."""
        return self.inference.limiter.slot()

    def spec(self, wanted: str | None, self_only: bool = False) -> AttentionSpec:
        """The attention type asked for (default: the model's first), or a 422."""
        types = self.entry.attention_types()
        if self_only:
            types = [t for t in types if self.entry.specs[t].self_attention]
        chosen = wanted or types[0]
        if chosen not in types:
            if self_only and chosen in self.entry.specs:
                raise CannotServe(f"this needs self-attention: {self.entry.id} has {types}")
            raise CannotServe(f"{self.entry.id} has no {chosen} attention: it has {types}")
        return self.entry.specs[chosen]

    def check_head(self, spec: AttentionSpec, layer: int, head: int) -> None:
        if layer >= spec.layers:
            raise CannotServe(f"layer {layer} out of range: {spec.type} has 0..{spec.layers - 1}")
        if head >= spec.query_heads:
            raise CannotServe(
                f"head {head} out of range: {spec.type} has 0..{spec.query_heads - 1}"
            )

    def score_scale(self, spec: AttentionSpec) -> float:
        """The one factor the model's scores are q·k times (model/'s: 1/sqrt(d_head); a
        transformers model's: its own); a 422 where its scores are also soft-capped, or
        get a position bias or sinks (Gemma 2, T5, gpt-oss): what needs q·k alone to be
        the score cannot be shown for them."""
        scale = self.model.score_scaling()
        if scale is None:
            raise CannotServe(
                f"{self.entry.id} soft-caps its scores or adds a position bias or sinks to "
                "them: they are not its q·k times one factor, which this needs",
            )
        return scale

    def tokens(self, spec: AttentionSpec) -> tuple[list[str], list[str]]:
        return tokens_of(self.result, spec)

    def predicted(self, spec: AttentionSpec) -> list[str] | None:
        """Where a spec's rows are decoder steps, the token each step predicts."""
        if spec.rows != "target" or not self.result.predicted_tokens:
            return None
        return self.result.predicted_tokens

    def hooks_on(self, suffix: str, fn: HookFn) -> list[tuple[str, HookFn]]:
        return [(name, fn) for name in self.model.hook_names() if name.endswith(suffix)]

    def forward(
        self, hooks: Iterable[tuple[str, HookFn]] = (), names: NamesFilter = None
    ) -> tuple[Tensor, Capture]:
        """(output, capture) of one forward pass over the run's tokens with hook functions."""
        inputs = model_inputs(self.config, self.source, self.target)
        with torch.no_grad(), hooked(self.model, names, fwd_hooks=list(hooks)) as capture:
            out = self.model(*inputs, **self.read_in)
        return out, capture

    @property
    def read_in(self) -> dict[str, Any]:
        """The model's keyword arguments that read the run's ids as the run did: a text
        decoded in pieces, in its pieces (`RunResult.read_in`)."""
        return {} if self.result.read_in is None else {"pieces": self.result.read_in}

    def encoder_weights(
        self,
        source: Tensor,
        hooks: Iterable[tuple[str, HookFn]] = (),
        pieces: Tensor | None = None,
    ) -> list[Tensor]:
        """Each encoder layer's weights (B, H, T, T) for `source`, with hook functions
        (and the piece of each position, where the text was read in pieces)."""
        spec = self.entry.specs["encoder.self"]
        names = [spec.hook(i, "hook_weights") for i in range(spec.layers)]
        with torch.no_grad(), hooked(self.model, names, fwd_hooks=list(hooks)) as capture:
            self.model.encode(source, pieces=pieces)
        return [capture[n] for n in names]

    @staticmethod
    def weights(capture: Capture, spec: AttentionSpec, layer: int) -> Tensor:
        """One layer's weights (H, Tq, Tk) of the first row of a capture."""
        return capture[spec.hook(layer, "hook_weights")][0]
