"""Pretrained weights on our own model code: one module per family, each mapping its
tensor names onto ours through the checked mapping of `mapping.py`."""

from .bert import MAX_TOKENS, NOT_MAPPED, BertRunner, config_from_bert, map_bert_state, package_dir
from .mapping import map_state

__all__ = [
    "MAX_TOKENS",
    "NOT_MAPPED",
    "BertRunner",
    "config_from_bert",
    "map_bert_state",
    "map_state",
    "package_dir",
]
