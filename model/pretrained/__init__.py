"""Pretrained weights on our own model code: one module per family, each mapping its
tensor names onto ours through the checked mapping of `mapping.py`."""

from .bert import MiniLM, config_from_bert, map_bert_state
from .mapping import map_state

__all__ = ["MiniLM", "config_from_bert", "map_bert_state", "map_state"]
