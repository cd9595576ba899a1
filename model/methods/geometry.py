"""The query-key space of a head (AttentionViz's picture, made faithful as it makes it):
its queries and keys as one point cloud, the keys translated so their centroid meets the
queries' and both scaled so their mean norms match. Neither changes any softmax: a shift
t of the keys adds q . t to every score of a query's row (the same for each key), and
scaling queries by c and keys by 1/c leaves each dot product as it was. How far the
picture can be trusted is the correlation between a pair's dot product and its distance
within each query's row (-1: the nearer a key, the more it is attended), before and
after. Then a projection to 2 or 3 dimensions:
PCA (torch), UMAP or t-SNE (umap-learn, openTSNE), each seeded."""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

PROJECTIONS = ("pca", "umap", "tsne")
# UMAP and t-SNE run in a process of their own (`_projecting`): their first fit compiles
# numba / Cython paths (UMAP: about 13 s here), and compiling, loading their libraries and
# even reading numba's cache held the interpreter's lock for up to 300 ms at a time (a
# server's event loop stalled with it, measured). Each is warmed once in that process,
# and asked for before it is warm it is not run (`warm` says so) rather than holding a
# request that long.
_warm: dict[str, threading.Event] = {}
_warm_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


class ProjectionFailed(RuntimeError):
    """The projections' process stopped (killed for memory, or crashed) during a fit; the
    next projection starts a new one."""


PROJECTING_S = 600  # a fit's wall-clock bound (6,000 points take a minute or so here)


def _projecting() -> ProcessPoolExecutor:
    """The process UMAP and t-SNE run in, started on first use (spawned: nothing of this
    process's threads or tensors is copied into it)."""
    global _pool
    with _warm_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"), initializer=_first_to_go
            )
        return _pool


def _first_to_go() -> None:
    """Where memory runs out, the kernel kills this process before the server."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:  # (not Linux)
        pass


def _in_process(fn, *args):
    pool = _projecting()
    try:
        return pool.submit(fn, *args).result(timeout=PROJECTING_S)
    except (BrokenProcessPool, TimeoutError) as exc:
        global _pool
        with _warm_lock:
            if _pool is pool:
                _pool = None
        for process in list((pool._processes or {}).values()):  # type: ignore[attr-defined]
            process.kill()  # (a fit past its bound: stopped, and its process with it)
        pool.shutdown(wait=False, cancel_futures=True)
        said = "took too long" if isinstance(exc, TimeoutError) else "stopped before it ended"
        raise ProjectionFailed(f"the projection's process {said}") from None


def warm(method: str) -> bool:
    """Whether a projection is ready to run at once; if not, it starts warming (once)."""
    if method == "pca":
        return True
    with _warm_lock:
        if method not in _warm:
            _warm[method] = threading.Event()
            threading.Thread(target=_warmed, args=(method,), daemon=True).start()
        return _warm[method].is_set()


def warm_up(method: str) -> None:
    """One small projection in 2 and 3 dimensions, in the projections' process: what a
    method compiles (UMAP's numba functions, into their on-disk cache) is compiled; t-SNE
    (openTSNE) compiles nothing: it is imported (a fit of 40 points took 6.5 s)."""
    _in_process(_warming, method)


def _warming(method: str) -> None:
    if method == "tsne":  # (Cython and numpy: nothing compiles; its import is its wait)
        import openTSNE  # noqa: F401

        return
    points = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    for dims in (2, 3):
        _nonlinear(points, method, dims, 0)


def _warmed(method: str) -> None:
    try:
        warm_up(method)
    except Exception:  # (asked again, it warms again)
        logging.getLogger(__name__).exception("warming the %s projection failed", method)
        with _warm_lock:
            del _warm[method]
    else:
        _warm[method].set()


@dataclass
class Normalized:
    queries: Tensor  # (Nq, d): c * q
    keys: Tensor  # (Nk, d): (k + shift) / c
    shift: Tensor  # (d,): the queries' centroid minus the keys'
    scale: float  # c


def normalize(queries: Tensor, keys: Tensor) -> Normalized:
    """Keys translated onto the queries' centroid, then queries * c and keys / c with c
    chosen so that their mean norms match: every q . k changes by a per-query constant
    (q . shift), so every softmax row is what it was."""
    shift = queries.mean(0) - keys.mean(0)
    moved = keys + shift
    q_norm, k_norm = queries.norm(dim=-1).mean(), moved.norm(dim=-1).mean()
    scale = float(torch.sqrt(k_norm / q_norm)) if q_norm > 0 and k_norm > 0 else 1.0
    return Normalized(queries * scale, moved / scale, shift, scale)


def dot_distance_correlation(
    blocks: list[tuple[Tensor, Tensor, Tensor | None]], most: int = 2_000_000
) -> float | None:
    """Pearson correlation between q . k and |q - k| within each query's row, over the
    keys it may attend: per block (one sentence's queries (Nq, d), keys (Nk, d) and which
    pairs its mask allows, (Nq, Nk) bool or None for all), each row's dots and distances
    taken from their row's mean, then pooled; a seeded sample of `most` pairs where there
    are more. Within a row is what a softmax compares: the measure is blind to what adds
    the same to a whole row (the keys' translation), and sees whether, for each query,
    the nearer keys are the ones it attends. None where either does not vary."""
    dots, distances = [], []
    # blocks of one shape and mask at once: a corpus's sentences share few lengths
    groups: dict[tuple, list] = {}
    for queries, keys, allowed in blocks:
        mask = None if allowed is None else allowed.bool()
        key = (len(queries), len(keys), None if mask is None else mask.cpu().numpy().tobytes())
        groups.setdefault(key, []).append((queries, keys, mask))
    for members in groups.values():
        q = torch.stack([m[0] for m in members]).double()  # (B, Nq, d)
        k = torch.stack([m[1] for m in members]).double()
        dot, distance = q @ k.transpose(1, 2), torch.cdist(q, k)
        mask = members[0][2]
        keep = torch.ones_like(dot[0], dtype=torch.bool) if mask is None else mask
        keep = keep.expand_as(dot)
        count = keep.sum(-1, keepdim=True).clamp(min=1)
        dot = dot - (dot * keep).sum(-1, keepdim=True) / count
        distance = distance - (distance * keep).sum(-1, keepdim=True) / count
        keep = keep & (count > 1)  # a row of one key says nothing
        dots.append(dot[keep])
        distances.append(distance[keep])
    dot, distance = torch.cat(dots), torch.cat(distances)
    if dot.numel() > most:
        pick = torch.randperm(dot.numel(), generator=torch.Generator().manual_seed(0))[:most]
        dot, distance = dot[pick], distance[pick]
    if dot.numel() < 2 or dot.std() == 0 or distance.std() == 0:
        return None
    return float(torch.corrcoef(torch.stack([dot, distance]))[0, 1])


def project(points: Tensor, method: str, dims: int, seed: int = 0) -> tuple[np.ndarray, dict]:
    """(N, dims) coordinates of (N, d) points, and what the projection says of itself
    (PCA: the share of variance each axis explains)."""
    if method not in PROJECTIONS:
        raise ValueError(f"projection {method!r}: one of {PROJECTIONS}")
    x = points.double()
    n = x.size(0)
    if method == "pca":
        centered = x - x.mean(0)
        _, s, v = torch.linalg.svd(centered, full_matrices=False)
        coords = centered @ v[:dims].T
        if coords.size(1) < dims:  # fewer points than axes: the missing axes are 0
            coords = torch.cat([coords, coords.new_zeros(n, dims - coords.size(1))], dim=1)
        variance = s**2
        share = (variance[:dims] / variance.sum()).tolist() if variance.sum() > 0 else []
        return coords.float().cpu().numpy(), {"explained_variance": share}
    if n < 5:
        raise ValueError(f"{method} needs at least 5 points; the head has {n}")
    return _in_process(_nonlinear, x.float().cpu().numpy(), method, dims, seed)


def _nonlinear(data: np.ndarray, method: str, dims: int, seed: int) -> tuple[np.ndarray, dict]:
    """UMAP or t-SNE of (N, d) points, seeded (run in the projections' process)."""
    n = len(data)
    if method == "umap":
        import umap

        reducer = umap.UMAP(
            n_components=dims,
            random_state=seed,
            n_neighbors=min(15, n - 1),
            transform_seed=seed,
            n_jobs=1,  # (a seed makes it one thread anyway)
        )
        return np.asarray(reducer.fit_transform(data), dtype=np.float32), {}
    from openTSNE import TSNE

    perplexity = min(30.0, (n - 1) / 3)
    tsne = TSNE(
        n_components=dims,
        perplexity=perplexity,
        random_state=seed,
        negative_gradient_method="fft" if dims == 2 else "bh",
        n_jobs=1,
    )
    return np.asarray(tsne.fit(data), dtype=np.float32), {"perplexity": perplexity}
