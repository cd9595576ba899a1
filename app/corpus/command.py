"""`attnviz corpus FILE`: every head's statistics over a text file, in this process or on a
Ray cluster (`--ray ADDRESS`), printed as the heads that do each pattern most and written
as CSV."""

from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path

import torch

from attnviz.model.methods.corpus_stats import STATISTICS, corpus_means

from ..errors import AttnvizError
from ..settings import Settings
from .corpora import read_lines


def entry_of(model: str, settings: Settings):
    """The model's entry, the rest of the zoo left unloaded (a model of yours is read
    only when run)."""
    from ..catalog.zoo import REGISTRY, load_zoo

    family = model.removesuffix("-untrained")
    chosen = [family] if family in REGISTRY else ["pronounce"]
    own = {model: settings.models[model]} if model in settings.models else {}
    zoo = load_zoo(settings.model_copy(update={"zoo": chosen, "models": own}))
    if model not in zoo.models:
        sys.exit(f"unknown model {model!r}: the models are {', '.join(zoo.ids())}")
    return zoo.models[model]


def in_process(model: str, sentences: list[str], settings: Settings):
    """(heads, statistics (N, S, H)) computed here, as a server's corpus run does."""
    from . import compute
    from .results import heads_of

    entry = entry_of(model, settings)
    out = torch.full((len(sentences), len(STATISTICS), len(heads_of(entry))), float("nan"))
    names = compute.names_of(entry)
    with torch.no_grad():
        for batch in compute.batches(entry, sentences):
            for index, result, row in compute.run_batch(entry, batch, sentences.__getitem__, names):
                out[index] = compute.statistics(entry, result, row)
    return heads_of(entry), out


def on_ray(address: str | None, model: str, sentences: list[str], settings: Settings, workers):
    """The same on Ray: (heads, statistics) gathered from its workers."""
    from .on_ray import gathered, statistics_on_ray
    from .results import heads_of

    heads = heads_of(entry_of(model, settings))
    parts = statistics_on_ray(address, model, sentences, settings.model_dump(), workers)
    return heads, gathered(parts, len(sentences))


def run_corpus(file: str, model: str, ray: str | None, workers: int, out: str | None) -> None:
    settings = Settings()
    try:
        sentences = read_lines(
            Path(file).read_bytes(), settings.corpus_max_sentences, settings.max_text_chars
        )
    except AttnvizError as exc:
        sys.exit(f"{file}: {exc.detail}")
    start = time.perf_counter()
    if ray:
        heads, stats = on_ray(None if ray == "local" else ray, model, sentences, settings, workers)
    else:
        heads, stats = in_process(model, sentences, settings)
    took = time.perf_counter() - start
    print(
        f"{len(sentences)} sentences in {took:.1f} s ({len(sentences) / took:.1f} per second)"
        f"{f' on Ray ({ray}, {workers} workers)' if ray else ' in this process'}"
    )
    means = corpus_means(stats)
    for name in ("previous", "first", "same", "induction", "alignment"):
        column = means[STATISTICS.index(name)]
        ranked = [j for j in column.argsort(descending=True).tolist() if not math.isnan(column[j])]
        best = ", ".join(
            f"{heads[j].type} L{heads[j].layer} H{heads[j].head} {column[j]:.3f}"
            for j in ranked[:3]
        )
        print(f"  {name}: {best or '(does not apply)'}")
    if out:
        with open(out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence", "type", "layer", "head", *STATISTICS])
            for i in range(stats.shape[0]):
                for j, h in enumerate(heads):
                    values = ("" if math.isnan(v) else f"{v:.6g}" for v in stats[i, :, j].tolist())
                    writer.writerow([i, h.type, h.layer, h.head, *values])
        print(f"  written to {out}")
