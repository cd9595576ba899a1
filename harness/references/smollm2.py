"""transformers' own SmolLM2, the tests' and benchmarks' reference: its Llama code (eager
attention, float32) and its tokenizer, read from the shipped GGUF file by transformers'
GGUF loader once, and kept as a folder of safetensors and tokenizer files beside the
environment (.venv/references/smollm2). transformers' loader takes about 15 s a read here
(its GGUF reader walks the file's metadata twice); the folder is read in 0.3 s, and holds
exactly the weights and tokenizer the loader made (the logits, every attention and the
state dict read back equal the GGUF read's). `make test` makes it alongside the lint; a
test that finds none (or one made from another file or transformers) makes it.

    python -m harness.references.smollm2   # make it, where it is missing or stale
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_model

FOLDER = Path(__file__).resolve().parents[2] / ".venv" / "references" / "smollm2"


def source() -> dict:
    """What the folder is made from and by: the GGUF file (its path, size and time) and
    the transformers that read it."""
    import transformers

    from attnviz.model.pretrained.llama import smollm2_path

    path = smollm2_path()
    stat = path.stat()
    return {"gguf": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "transformers": transformers.__version__}  # fmt: skip


def folder() -> Path:
    """The folder, made from the shipped GGUF file where it is missing or was made from
    another (or by another transformers); one process at a time makes it, under a lock,
    and its source.json is written last: a folder without one is remade."""
    said = FOLDER / "source.json"
    wanted = source()
    FOLDER.parent.mkdir(parents=True, exist_ok=True)
    with open(FOLDER.parent / f"{FOLDER.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (another process making it: waited for)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(said.read_text(encoding="utf-8")) == wanted:
                return FOLDER
        shutil.rmtree(FOLDER, ignore_errors=True)
        make(Path(wanted["gguf"]), FOLDER)
        said.write_text(json.dumps(wanted), encoding="utf-8")
    return FOLDER


def make(path: Path, into: Path) -> None:
    """transformers' reading of the GGUF file, kept in `into`: its tokenizer as it saves
    it, and the model's float32 weights and config (a model read from GGUF refuses
    `save_pretrained`: its weights with safetensors' `save_model`, its config less the
    GGUF quantization it was read with)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with contextlib.redirect_stderr(io.StringIO()):  # (its progress bars)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype="float32"
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.save_pretrained(into)
    config = model.config
    with contextlib.suppress(AttributeError):
        del config.quantization_config
    config.save_pretrained(into)
    save_model(model, str(into / "model.safetensors"), metadata={"format": "pt"})


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
