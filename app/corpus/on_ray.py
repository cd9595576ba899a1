"""Corpus statistics on a Ray cluster, as a Ray Data pipeline: the sentences read into a
dataset and batched, each batch run by a worker that holds the model (app/corpus/compute.py,
the same code as a server's corpus run), and the per-sentence statistics gathered back in
order. Only imported where a Ray address is given (ATTNVIZ_RAY_ADDRESS, or `attnviz corpus
--ray ADDRESS`): serving needs nothing of Ray.

Each worker needs what a replica needs: the project installed with its `ray` extra (the
image, with `pip install 'attnviz[ray]'`), and the models of yours on the same path (the
models volume). A worker loads the model asked for (and, for a model of yours, the small
`pronounce`, which the zoo needs as its default)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from attnviz.model.methods.corpus_stats import STATISTICS

ROWS = 64  # sentences a worker is handed at once


class Worker:
    """A Ray Data map_batches worker: one model, loaded once, over many batches."""

    def __init__(self, model: str, settings: dict) -> None:
        from ..catalog.zoo import REGISTRY, load_zoo
        from ..settings import Settings

        family = model.removesuffix("-untrained")
        own = {model: settings["models"][model]} if model in settings.get("models", {}) else {}
        chosen = [family] if family in REGISTRY else ["pronounce"]
        from . import compute

        self.entry = load_zoo(Settings(**{**settings, "zoo": chosen, "models": own})).models[model]
        self.names = compute.names_of(self.entry)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from . import compute

        texts = {int(i): str(t) for i, t in zip(batch["index"], batch["text"], strict=True)}
        heads = sum(spec.layers * spec.query_heads for spec in self.entry.specs.values())
        out = {i: np.full((len(STATISTICS), heads), np.nan, dtype=np.float32) for i in texts}
        indices = sorted(texts)
        with torch.no_grad():
            for group in compute.batches(self.entry, [texts[i] for i in indices], indices):
                rows = compute.run_batch(self.entry, group, texts.__getitem__, self.names)
                for index, result, row in rows:
                    out[index] = compute.statistics(self.entry, result, row).numpy()
        keys = sorted(out)
        return {"index": np.array(keys), "statistics": np.stack([out[k] for k in keys])}


def statistics_on_ray(
    address: str | None, model: str, sentences: list[str], settings: dict, workers: int = 2
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(indices, statistics (n, S, H)) as the workers finish them, in no set order.
    `address`: a running cluster's (`ray start`, KubeRay; "auto" finds a local one); None
    starts a local Ray with `workers` CPUs."""
    import ray

    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    data = ray.data.from_items([{"index": i, "text": s} for i, s in enumerate(sentences)])
    mapped = data.map_batches(
        Worker,
        fn_constructor_kwargs={"model": model, "settings": settings},
        batch_size=ROWS,
        concurrency=workers,
        num_cpus=1,
        batch_format="numpy",
    )
    for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
        yield batch["index"], batch["statistics"]


def gathered(parts: Iterator[tuple[np.ndarray, np.ndarray]], total: int) -> torch.Tensor:
    """The workers' results as one (total, S, H) tensor in sentence order."""
    out = None
    for indices, stats in parts:
        if out is None:
            out = torch.full((total, *stats.shape[1:]), float("nan"))
        out[torch.from_numpy(np.array(indices))] = torch.from_numpy(np.array(stats))
    return out if out is not None else torch.empty(0)
