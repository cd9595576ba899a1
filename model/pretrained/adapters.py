"""The families of pretrained weights our model code reads: one line a family module, each
declaring its `Adapter`s (model/pretrained/mapping.py). The backends (`choose`), the folder
reader (model/pretrained/hf.py) and the model sources read this table; a new family is its
module and its line here."""

from __future__ import annotations

from . import bert, gpt2, llama_hf
from .mapping import Adapter

ADAPTERS: dict[str, Adapter] = {
    adapter.model_type: adapter
    for adapter in (
        *llama_hf.ADAPTERS,
        gpt2.ADAPTER,
        bert.ADAPTER,
    )
}
