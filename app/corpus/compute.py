"""What a corpus run computes, wherever it runs (a server's background job, or Ray
workers): the sentences in the batches they run in, one batch's forward pass, and each
sentence's statistics (model/methods/corpus_stats.py) and kept vectors from it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from attnviz.model.attention_types import AttentionSpec
from attnviz.model.methods.corpus_stats import sentence_statistics
from attnviz.model.runtime import TakeTurns

from ..catalog.zoo import ModelEntry

LOG = logging.getLogger("attnviz")
BATCH = 16  # sentences of one token length run in one pass, at most
# and at most this many tokens in one pass: a causal model's logits take tokens x vocabulary
# floats (SmolLM2: 2,048 tokens, 400 MB)
PASS_TOKENS = 2048

Batch = list[tuple[int, tuple[list[int], list[str]] | None]]


@dataclass
class Read:
    """One sentence of a batched pass, read as a RunResult is: a model that reads one
    text has the same ids and tokens on either side."""

    source_ids: list[int]
    source_tokens: list[str]
    capture: object

    @property
    def target_ids(self) -> list[int]:
        return self.source_ids

    def tokens(self, side: str) -> list[str]:
        return self.source_tokens


def names_of(entry: ModelEntry, keep=()) -> list[str]:
    """The hook points a corpus run captures: every layer's weights, and the queries and
    keys of the heads whose vectors it keeps."""
    names = [
        s.hook(layer, "hook_weights") for s in entry.specs.values() for layer in range(s.layers)
    ]
    for head in keep:
        spec = entry.specs[head.type]
        names += [spec.hook(head.layer, "hook_q"), spec.hook(head.layer, "hook_k")]
    return names


def batches(
    entry: ModelEntry, sentences: list[str], indices: list[int] | None = None
) -> list[Batch]:
    """The sentences (numbered by `indices`, default 0..) in the batches they run in: a
    model that reads one text (an encoder or a decoder alone) runs up to BATCH sentences of
    one token length in one pass (no padding: each row is the sentence's own pass); an
    encoder-decoder, whose decoder reads its own output, runs each sentence alone (ids
    None)."""
    indices = list(range(len(sentences))) if indices is None else indices
    if entry.config.architecture == "encoder-decoder":
        return [[(i, None)] for i in indices]
    runner = entry.loaded_runner()
    by_length: dict[int, list] = {}
    turn = TakeTurns()  # (the event loop's thread is not kept waiting for the GIL)
    for i, sentence in zip(indices, sentences, strict=True):
        ids, tokens = runner.tokenize(sentence)
        turn()
        by_length.setdefault(len(ids), []).append((i, (ids, tokens)))
    out = []
    for length, group in by_length.items():
        size = max(1, min(BATCH, PASS_TOKENS // max(1, length)))
        out += [group[at : at + size] for at in range(0, len(group), size)]
    return out


def planned(entry: ModelEntry, sentences: list[str]) -> tuple[list[Batch], int]:
    """The sentences' batches (`batches`) and the tokens the run reads: each sentence's
    tokens as its model reads them (an encoder-decoder's source side; its decoder reads
    as many again, priced by its layers)."""
    plan = batches(entry, sentences)
    if entry.config.architecture != "encoder-decoder":
        return plan, sum(len(read[0]) for batch in plan for _, read in batch if read)
    runner, turn, tokens = entry.loaded_runner(), TakeTurns(), 0
    for sentence in sentences:
        tokens += len(runner.tokenize(sentence)[0])
        turn()
    return plan, tokens


def run_batch(entry: ModelEntry, batch: Batch, text_of, names: list[str]) -> list[tuple]:
    """(index, read, row) per sentence of a batch, after its one forward pass; a sentence
    with nothing to read is left out (its statistics stay NaN)."""
    runner = entry.loaded_runner()
    if batch[0][1] is None:  # an encoder-decoder: one sentence, with its decoded output
        index = batch[0][0]
        try:
            return [(index, runner.run(text_of(index), capture=True, names_filter=names), 0)]
        except ValueError as exc:
            LOG.info("corpus sentence %d skipped: %s", index, exc)
            return []
    specials = entry.runner.special_tokens
    # a sentence of nothing but what the tokenizer adds reads no text: left out alone
    read = [
        (index, read[0], read[1])
        for index, read in batch
        if read is not None and not all(t in specials for t in read[1])
    ]
    if not read:
        return []
    ids = torch.tensor([ids for _, ids, _ in read])
    _, capture = runner.model.run_with_capture(ids, names_filter=names)
    return [(i, Read(ids, tokens, capture), b) for b, (i, ids, tokens) in enumerate(read)]


def ids_of(result, spec: AttentionSpec) -> tuple[list[int], list[int]]:
    side = {"source": result.source_ids, "target": result.target_ids}
    return side[spec.rows], side[spec.columns]


def statistics(entry: ModelEntry, result, row: int) -> torch.Tensor:
    """(len(STATISTICS), heads) of one sentence: row `row` of its capture, every type's
    layers at once, in the order of `results.heads_of`."""
    specials = set(entry.runner.special_tokens)
    columns = []
    for spec in entry.specs.values():
        rows_ids, cols_ids = ids_of(result, spec)
        keys = result.tokens(spec.columns)
        special = [i for i, t in enumerate(keys) if t in specials]
        weights = torch.cat(
            [
                result.capture[spec.hook(layer, "hook_weights")][row].float()
                for layer in range(spec.layers)
            ]
        )
        causal = spec.type == "decoder.self"
        columns.append(
            sentence_statistics(weights, rows_ids, cols_ids, spec.self_attention, causal, special)
        )
    return torch.cat(columns, dim=1).float()


def vectors(entry: ModelEntry, head, result, row: int) -> tuple:
    """(queries, keys, query tokens, key tokens) of one kept head in one sentence."""
    spec = entry.specs[head.type]
    kv = head.head // (spec.query_heads // spec.kv_heads)
    capture = result.capture
    return (
        capture[spec.hook(head.layer, "hook_q")][row, head.head].float(),
        capture[spec.hook(head.layer, "hook_k")][row, kv].float(),
        result.tokens(spec.rows),
        result.tokens(spec.columns),
    )
