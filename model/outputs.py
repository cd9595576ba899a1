"""What a runner's output is, one object per kind (a runner states its kind as
`output_kind`, the wire's `output`): what a model of yours that makes it is said to do, the
prompts such a model is offered, and whether its prediction fills mask tokens. The app
reads these objects (`output_of`); it keeps no table or branch of its own per kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

# What a run gives: a transcription (the decoder's greedy output), a sentence embedding
# (comparable between two inputs), a next-token continuation of the prompt, or the tokens
# of its masks; an image encoder's output is its last hidden states (no task head).
OutputKind = Literal["transcription", "embedding", "continuation", "masked", "features"]

MASK = "[MASK]"  # in `said` and `examples`: the model's own mask token


@dataclass(frozen=True)
class Output:
    kind: OutputKind
    said: str  # what a model of yours making it does, for its description
    examples: tuple[str, ...]  # what a model of yours is offered to read
    fills_masks: bool = False  # it predicts the tokens written as its mask token

    def described(self, mask_token: str | None) -> str:
        return self.said.replace(MASK, mask_token or MASK)

    def examples_for(self, mask_token: str | None) -> list[str]:
        return [e.replace(MASK, mask_token or MASK) for e in self.examples]


OUTPUTS: dict[str, Output] = {
    o.kind: o
    for o in (
        Output(
            "transcription",
            "It writes its output token by token (greedy decoding); its cross-attention "
            "shows what each output token reads of the input.",
            ("translate English to German: The house is wonderful.",
             "The quick brown fox jumps over the lazy dog."),
        ),
        Output(
            "embedding",
            "Its output is the mean-pooled sentence embedding.",
            ("The animal didn't cross the street because it was too tired.",),
        ),
        Output(
            "continuation",
            "It continues a prompt.",
            ("The capital of France is", "def fibonacci(n):"),
        ),
        Output(
            "masked",
            f"It predicts the words written as {MASK}, the top 5 of each.",
            (f"The capital of France is {MASK}.", f"The man went to the {MASK} to buy milk."),
            fills_masks=True,
        ),
        Output(
            "features",
            "It reads a picture, cut into patches; its output is its last hidden states "
            "(no task head). Each patch is a position: the views show where each looks.",
            (),
        ),
    )
}  # fmt: skip


class StatesOutput(Protocol):
    """What states an output kind: a runner (model/runner.py)."""

    @property
    def output_kind(self) -> OutputKind: ...


def output_of(runner: StatesOutput) -> Output:
    """The output object of a runner's kind."""
    return OUTPUTS[runner.output_kind]
