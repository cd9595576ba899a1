"""transformers' own SmolLM2, the tests' and benchmarks' reference: its Llama code (eager
attention, float32) and its tokenizer, read from the shipped GGUF file by transformers'
GGUF loader once, and kept as a folder of safetensors and tokenizer files beside the
environment (.venv/references/smollm2). transformers' loader takes about 15 s a read here
(its GGUF reader walks the file's metadata twice); the folder is read in about 1 s, and
holds exactly what the loader made (transformers' own `save_pretrained`). `make test`
makes it alongside the lint (`python -m harness.references.smollm2`); a test that finds
none makes it.

    python -m harness.references.smollm2   # make the folder (nothing where it is made)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_model

FOLDER = Path(__file__).resolve().parents[2] / ".venv" / "references" / "smollm2"


def source() -> dict:
    """Which GGUF file the folder is made from: its path and size."""
    from attnviz.model.pretrained.llama import smollm2_path

    path = smollm2_path()
    return {"gguf": str(path), "bytes": path.stat().st_size}


def folder() -> Path:
    """The folder, made from the shipped GGUF file where it is missing or was made from
    another. Two processes that make it at once each make their own and keep the first."""
    said = FOLDER / "source.json"
    wanted = source()
    with contextlib.suppress(OSError, ValueError):
        if json.loads(said.read_text(encoding="utf-8")) == wanted:
            return FOLDER
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(wanted["gguf"])
    making = FOLDER.with_name(f"{FOLDER.name}.{os.getpid()}")
    shutil.rmtree(making, ignore_errors=True)
    with contextlib.redirect_stderr(io.StringIO()):  # (its progress bars)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype="float32"
        )
        AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(making)
    # (a model read from GGUF refuses save_pretrained: its weights, dequantized to float32
    # by the loader, and its config, less the GGUF it was read from)
    config = model.config
    with contextlib.suppress(AttributeError):
        del config.quantization_config
    config.save_pretrained(making)
    save_model(model, str(making / "model.safetensors"), metadata={"format": "pt"})
    (making / "source.json").write_text(json.dumps(wanted), encoding="utf-8")
    try:
        if json.loads(said.read_text(encoding="utf-8")) == wanted:  # (another process's
            shutil.rmtree(making, ignore_errors=True)  # came first: the same files)
            return FOLDER
    except (OSError, ValueError):
        shutil.rmtree(FOLDER, ignore_errors=True)  # (none, or one made from another file)
    try:
        making.rename(FOLDER)
    except OSError:  # (another process's came first, just now)
        shutil.rmtree(making, ignore_errors=True)
    return FOLDER


def model() -> Any:
    """transformers' SmolLM2 with eager attention in float32, in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        folder(), attn_implementation="eager", dtype="float32"
    ).eval()


def tokenizer() -> Any:
    """transformers' SmolLM2 tokenizer, as its GGUF loader makes it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder())


if __name__ == "__main__":
    print(folder())
