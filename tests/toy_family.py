"""A toy model family, registered as a plugin (ATTNVIZ_PLUGINS='["tests.toy_family"]'):
what adding a family takes — a runner over a config of model/, and one register line."""

from __future__ import annotations

import torch

from attnviz.app.catalog.zoo import Family, register
from attnviz.model.config import ModelConfig
from attnviz.model.runner import Capabilities, RunnerBase, RunResult
from attnviz.model.twins import untrained

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]  # pad_id 0, bos_id 1, eos_id 2
VOCAB = SPECIALS + [chr(c) for c in range(32, 127)]
CONFIG = ModelConfig(architecture="decoder-only", target_vocab_size=len(VOCAB), d_model=32,
                     n_heads=4, n_layers=1, d_ff=64, max_seq_len=128, dropout=0.0)  # fmt: skip
CONTINUATION = 4  # tokens generated after the prompt


class ToyRunner(RunnerBase):
    """Characters in, a greedy continuation of the prompt out; 1 layer, random weights."""

    token_unit, output_kind, max_tokens = "characters", "continuation", 64
    special_tokens, capabilities = frozenset(SPECIALS[1:3]), Capabilities()

    def __init__(self, model=None) -> None:
        self.model = model or untrained(CONFIG, seed=7)

    def with_model(self, model):
        return ToyRunner(model)

    def target_vocabulary(self):
        return VOCAB

    def tokenize(self, text):
        ids = [VOCAB.index(c) if c in VOCAB else 3 for c in text[: self.max_tokens]]
        return ids, [VOCAB[i] for i in ids]

    @torch.no_grad()
    def run(self, text, capture=True, names_filter=None):
        ids, tokens = self.tokenize(text)
        fed = torch.tensor([[1, *ids]])
        out = self.model.greedy_decode(prefix=fed, max_new_tokens=CONTINUATION).tokens[0]
        target_ids = [int(i) for i in out if int(i) != 0]
        taken = self.model.run_with_capture(torch.tensor([target_ids]), names_filter=names_filter)
        return RunResult(text, tokens, [VOCAB[i] for i in target_ids],
                         [VOCAB[i] for i in target_ids[len(fed[0]):]], len(text) > len(ids),
                         len(text), taken[1] if capture else None,
                         source_ids=ids, target_ids=target_ids)  # fmt: skip


register(
    Family("toy", "Toy decoder-only", "1 layer, random weights.", ["en"], lambda s: ToyRunner())
)
