"""Corpus statistics on a Ray cluster, as a Ray Data pipeline: the sentences read into a
dataset and batched, each batch run by a worker that holds the model (app/corpus/compute.py,
the same code as a server's corpus run), and the per-sentence statistics gathered back in
order. Only imported where a Ray address is given (ATTNVIZ_RAY_ADDRESS, or `attnviz corpus
--ray ADDRESS`): serving needs nothing of Ray.

Each worker needs what a replica needs: the project installed with its `ray` extra (the
image, with `pip install 'attnviz[ray]'`), and the models of yours on the same path (the
models volume). A worker loads the model asked for (and, for a model of yours, the small
`pronounce`, which the zoo needs as its default). A worker of a model of yours placed on a
GPU asks Ray for one (`num_gpus`): Ray sets its CUDA_VISIBLE_DEVICES, so it sees that GPU
alone, as `cuda:0`."""

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
        # a worker given a GPU by Ray sees it alone, as cuda:0
        settings = {**settings, "device": on_one_gpu(settings.get("device", "auto"))}
        for name, entry in own.items():
            if isinstance(entry, dict) and entry.get("device"):
                own[name] = {**entry, "device": on_one_gpu(entry["device"])}
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
        num_gpus=gpus_per_worker(model, settings, ray.cluster_resources().get("GPU", 0)),
        batch_format="numpy",
    )
    for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
        yield batch["index"], batch["statistics"]


def on_one_gpu(device: str) -> str:
    """A device as a worker that Ray gave one GPU names it (`cuda:3` is its `cuda`)."""
    return "cuda" if device.startswith("cuda") else device


def gpus_per_worker(model: str, settings: dict, cluster_gpus: float) -> int:
    """A worker's GPUs: one for a model of yours placed on CUDA (its own device, else
    ATTNVIZ_DEVICE: `cuda`, `cuda:N`, or `auto` on a cluster that has GPUs), so that Ray
    schedules it on a GPU node and gives it that GPU alone; none for the shipped models
    (they run on the CPU) or a model placed on the CPU."""
    entry = settings.get("models", {}).get(model)
    if entry is None:
        return 0
    own = entry.get("device") if isinstance(entry, dict) else None
    device = own or settings.get("device", "auto")
    if device.startswith("cuda"):
        return 1
    return 1 if device == "auto" and cluster_gpus > 0 else 0


def gathered(parts: Iterator[tuple[np.ndarray, np.ndarray]], total: int) -> torch.Tensor:
    """The workers' results as one (total, S, H) tensor in sentence order."""
    out = None
    for indices, stats in parts:
        if out is None:
            out = torch.full((total, *stats.shape[1:]), float("nan"))
        out[torch.from_numpy(np.array(indices))] = torch.from_numpy(np.array(stats))
    return out if out is not None else torch.empty(0)
