"""Quality measures of the pronunciation model on the held-out split."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..masks import pad_batch
from ..transformer import Transformer
from .data import Lexicon, label
from .pronouncer import greedy_read
from .tokenizers import SourceTokenizer, TargetTokenizer


def levenshtein(a: list[str], b: list[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def is_syllable(token: str) -> bool:
    return token[:1].islower() and token[-1:].isdigit()


def error_rate(pairs: list[tuple[list[str], list[str]]]) -> float:
    """Edit distance over reference length, summed over (predicted, reference) pairs."""
    edits = sum(levenshtein(p, r) for p, r in pairs)
    return edits / max(1, sum(len(r) for _, r in pairs))


@torch.no_grad()
def transcribe_batch(
    model: Transformer, src_tok: SourceTokenizer, target_tok: TargetTokenizer, texts: list[str]
) -> list[list[str]]:
    """Greedy transcriptions (through the KV cache) of several texts at once."""
    src = pad_batch([src_tok.encode(t).ids or [src_tok.unk_id] for t in texts])
    return [target_tok.decode(ids) for ids, _ in greedy_read(model, target_tok, src)]


@torch.no_grad()
def alignment_by_head(
    model: Transformer,
    src_tok: SourceTokenizer,
    target_tok: TargetTokenizer,
    lexicon: Lexicon,
    texts: list[str],
) -> torch.Tensor:
    """(layers, heads): how often each cross-attention head's argmax, at the query that
    produces a Chinese syllable, points at that syllable's source character."""
    layers, heads = model.config.decoder_layers, model.config.n_heads
    hits = torch.zeros(layers, heads)
    total = 0
    for text in texts:
        target, index = label(text, lexicon)
        src = torch.tensor([src_tok.encode(text).ids])
        target_in = torch.tensor([[target_tok.bos_id, *target_tok.encode(target)]])
        names = [f"decoder.{i}.cross_attn.hook_weights" for i in range(layers)]
        _, capture = model.run_with_capture(src, target_in, names_filter=names)
        rows = [j for j, t in enumerate(target) if is_syllable(t)]
        if not rows:
            continue
        want = torch.tensor([index[j] for j in rows])
        for i, name in enumerate(names):
            argmax = capture[name][0, :, rows].argmax(-1)  # (H, n)
            hits[i] += (argmax == want).float().sum(-1)
        total += len(rows)
    return hits / max(1, total)


@dataclass
class Metrics:
    zh_syllable_accuracy: float
    en_per_unseen: float
    en_per_train: float
    alignment: float
    alignment_head: str  # "decoder.{layer}.cross_attn head {h}"

    def line(self) -> str:
        return (
            f"zh acc {self.zh_syllable_accuracy:.3f} | en PER unseen {self.en_per_unseen:.3f} "
            f"train {self.en_per_train:.3f} | align {self.alignment:.3f} ({self.alignment_head})"
        )


def evaluate(
    model: Transformer,
    src_tok: SourceTokenizer,
    target_tok: TargetTokenizer,
    lexicon: Lexicon,
    split: dict,
    n: int = 200,
    batch: int = 50,
) -> Metrics:
    was_training = model.training
    model.eval()
    zh = split["zh"][:n]
    rng = random.Random(0)
    unseen = rng.sample(split["en_test_words"], min(n, len(split["en_test_words"])))
    trained = rng.sample(split["en_train_words"], min(n, len(split["en_train_words"])))

    def run(texts: list[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for i in range(0, len(texts), batch):
            out += transcribe_batch(model, src_tok, target_tok, texts[i : i + batch])
        return out

    def syllables(tokens) -> list[str]:
        return [t for t in tokens if is_syllable(t)]

    zh_pairs = [
        (syllables(p), syllables(label(t, lexicon)[0])) for p, t in zip(run(zh), zh, strict=True)
    ]

    def phoneme_pairs(words: list[str]) -> list[tuple[list[str], list[str]]]:
        return [(p, list(lexicon.cmudict[w])) for p, w in zip(run(words), words, strict=True)]

    # the head is chosen on the last sentences of the split and measured on the first ones
    chosen = alignment_by_head(model, src_tok, target_tok, lexicon, split["zh"][-50:])
    layer, head = divmod(int(chosen.argmax()), chosen.size(1))
    measured = alignment_by_head(model, src_tok, target_tok, lexicon, zh[: max(20, n // 4)])
    metrics = Metrics(
        zh_syllable_accuracy=max(0.0, 1 - error_rate(zh_pairs)),
        en_per_unseen=error_rate(phoneme_pairs(unseen)),
        en_per_train=error_rate(phoneme_pairs(trained)),
        alignment=float(measured[layer, head]),
        alignment_head=f"decoder.{layer}.cross_attn head {head}",
    )
    model.train(was_training)
    return metrics
