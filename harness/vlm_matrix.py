"""The vision-language half of the architecture matrix: every vision-language architecture
the installed transformers has (its image-text-to-text mapping, not a hand list). Those
whose processor places a picture's tokens in a way model/hf/image_tokens.py maps (its
`MAPPED`) are made as a tiny seeded random model saved with its processor, read back as
attnviz reads a folder, and run on a picture and a text: every layer's weights against
transformers' eager attention with `output_attentions`, and the greedy continuation of 8
tokens against its `generate`. Each row is equal, or says why it is not served."""

from __future__ import annotations

import contextlib
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.matrix_table import between, cell
from harness.vlm_checkpoints import picture, saved
from harness.vlm_families import family_of


@dataclass
class Row:
    model_type: str
    family: str = ""
    served: bool = False
    weights: float = float("inf")  # the largest difference of any head's weights
    continued: bool = False  # its greedy continuation of the picture is transformers'
    tokens: int = 0  # the picture's tokens (its rows' newlines and its padding's not)
    reason: str = ""

    @property
    def equal(self) -> bool:
        return self.served and self.weights <= 1e-5 and self.continued


def vision_language_architectures() -> list[str]:
    from attnviz.model.hf.calls import vision_language_types

    return sorted(vision_language_types())


def compare(model_type: str) -> Row:
    """One architecture's row."""
    import transformers

    from attnviz.model.hf.loading import quiet_transformers
    from attnviz.model.pretrained.backends import uses_attention_interface
    from attnviz.model.pretrained.sources import load_origin

    quiet_transformers()
    row = Row(model_type)
    if not uses_attention_interface(model_type):
        row.reason = "no attention through transformers' attention interface (its own, or none)"
        return row
    row.family, named = family_of(model_type)
    if not row.family:
        row.reason = named
        return row
    with tempfile.TemporaryDirectory() as where:
        folder = Path(where)
        try:
            saved(model_type, folder)
        except Exception as exc:  # (its own code refuses a tiny config)
            row.reason = f"no tiny model of it: {type(exc).__name__}: {str(exc)[:120]}"
            return row
        try:
            runner: Any = load_origin(folder)[0]
            if not runner.capabilities.pictures:
                row.reason = (
                    "read as a language model (transformers maps its type for text too): its "
                    "pictures are not read"
                )
                return row
            read = runner.read_prompt(picture(), "hi")
            result = runner.read_picture(picture(), "0" * 64, "hi")
            ours = [
                s.token_id for s in runner.generate(read.ids, 8, stop=False, inputs=read.inputs)
            ]
        except Exception as exc:
            row.reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            return row
        row.served = True
        row.tokens = sum(p.kind in ("patch", "thumbnail", "cls", "query") for p in read.positions)
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            eager = transformers.AutoModelForImageTextToText.from_pretrained(
                folder, attn_implementation="eager"
            ).eval()
            batch = torch.tensor([read.ids])
            out = eager(input_ids=batch, **read.inputs, output_attentions=True)
            theirs = eager.generate(input_ids=batch, **read.inputs, max_new_tokens=8,
                                    do_sample=False, eos_token_id=None, pad_token_id=0)  # fmt: skip
    # (BLIP-2's language model's own output holds them)
    attentions = getattr(out, "attentions", None) or getattr(
        getattr(out, "language_model_outputs", None), "attentions", None
    )
    if not attentions:
        row.served, row.reason = False, "transformers returns no attention weights for it"
        return row
    diffs = []
    for layer, expected in enumerate(attentions):
        got = result.capture.get(f"decoder.{layer}.self_attn.hook_weights")
        if got is None or got.shape != expected.shape:
            row.reason = f"layer {layer}'s weights are not what transformers returns"
            return row
        diffs.append(float((got - expected).abs().max()))
    row.weights = max(diffs)
    row.continued = ours == theirs[0, len(read.ids) :].tolist()
    if row.weights > 1e-5:
        row.reason = f"its weights differ from transformers' by {row.weights:.1e}"
    elif not row.continued:
        row.reason = "its greedy continuation of the picture differs from transformers'"
    return row


def vlm_matrix(only=None) -> list[Row]:
    return [compare(t) for t in vision_language_architectures() if only is None or only(t)]


START = "<!-- vision-language matrix: generated by python -m harness.vlm_matrix --table -->"
END = "<!-- end of the vision-language matrix -->"


def table(rows: list[Row]) -> str:
    """docs/architectures.md's table of the vision-language half."""
    lines = [
        "| architecture | a 70 x 50 picture's tokens (newlines and padding aside) "
        "| served and equal to transformers |",
        "| --- | ---: | --- |",
    ]
    for r in rows:
        said = "yes" if r.equal else f"no: {cell(r.reason)}"
        lines.append(f"| `{r.model_type}` | {r.tokens or '—'} | {said} |")
    return "\n".join(lines)


def section(page: str) -> str:
    """The vision-language matrix's table as the page has it."""
    return between(page, START, END)


if __name__ == "__main__":
    import sys

    if "--table" in sys.argv:
        print(table(vlm_matrix()))
    else:
        for t in vision_language_architectures():
            r = compare(t)
            print(f"{t:28} {'equal' if r.equal else '     '} {r.tokens:4} {r.reason}")
