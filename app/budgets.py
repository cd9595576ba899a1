"""The memory budgets checked against the memory the server has, at start-up: what the
process holds once its models are loaded, one run's capture, the answers in flight and
the projections' process must fit (or it refuses to start, saying what to change), and
the caches (runs, corpus results, models of yours, pictures) are scaled down to the room
left where they would not (said in the log). Their defaults add up to 3.75 GiB (models of
yours set to 1.5 GiB), and with a 1.5 GB
capture and the loaded models past a pod's `memory: 4Gi`: an OOM kill would drop every
client's work."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .settings import Settings

LOG = logging.getLogger("attnviz")
WORKING = 256 * 2**20  # tensors of the work under way beyond a capture, tokenizers, buffers
# UMAP's and t-SNE's process (model/methods/geometry.py), once a projection has been asked
# for: 620 MiB resident after a fit of 3,000 points here
PROJECTING = 768 * 2**20
UNLIMITED = 2**60  # (cgroup v1 writes "no limit" as a number near 2^63)


def memory_limit(settings: Settings, root: Path = Path("/")) -> tuple[int, str]:
    """(the bytes this server may hold, where that comes from): ATTNVIZ_MEMORY_LIMIT_BYTES,
    else its cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes: a container's),
    else the machine's memory."""
    if settings.memory_limit_bytes:
        return settings.memory_limit_bytes, "ATTNVIZ_MEMORY_LIMIT_BYTES"
    for name in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            said = (root / name).read_text().strip()
        except OSError:
            continue
        if said.isdigit() and int(said) < UNLIMITED:
            return int(said), f"the cgroup's limit (/{name})"
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024, "the machine's memory"
    except (OSError, ValueError, IndexError):
        pass
    return UNLIMITED, "no limit found"


def resident_bytes() -> int:
    """This process's resident memory (Linux; 0 where it cannot be read)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def turn_bytes(settings: Settings) -> int:
    """A short run lent a turn, on each run's thread (app/runs/turns.py)."""
    return settings.concurrent_runs() * settings.turn_bytes if settings.turn_s else 0


def fixed_bytes(settings: Settings, resident: int) -> int:
    """What the server needs besides its caches: what it holds (`resident`), a capture per
    run at once, the runs lent turns, two answers in flight, work, and UMAP's process."""
    captures = settings.concurrent_runs() * settings.max_capture_bytes
    answers = 2 * settings.max_response_bytes
    return resident + captures + turn_bytes(settings) + answers + WORKING + PROJECTING


def models_room(settings: Settings, resident: int, limit: int) -> int:
    """The bytes of weights of models of yours the CPU's memory holds where
    ATTNVIZ_OWN_MODELS_BYTES is 0 (derived): `limit` less the server's fixed needs and
    its other caches (0 where nothing is left)."""
    others = settings.cache_bytes + settings.corpus_results_bytes + settings.images_bytes
    return max(0, limit - fixed_bytes(settings, resident) - others)


@dataclass(frozen=True)
class Fitted:
    """The caches' budgets that fit, and what was changed (empty: nothing)."""

    cache_bytes: int
    corpus_results_bytes: int
    own_models_bytes: int
    images_bytes: int  # the pictures kept (app/images.py's store)
    changed: str = ""


class DoesNotFit(RuntimeError):
    """The server's fixed needs pass its memory: it does not start."""


def fit(settings: Settings, resident: int, limit: int, source: str) -> Fitted:
    """The caches' budgets, scaled by one factor to the room left by what the process
    holds (`resident`, its models loaded), the captures of the runs at once and two
    answers in flight;
    DoesNotFit where that alone passes `limit`, or leaves the caches under a tenth of
    their budgets."""
    mb = 2**20
    turns = turn_bytes(settings)
    fixed = fixed_bytes(settings, resident)
    caches = (settings.cache_bytes + settings.corpus_results_bytes + settings.own_models_bytes
              + settings.images_bytes)  # fmt: skip
    room = limit - fixed
    asked = Fitted(settings.cache_bytes, settings.corpus_results_bytes, settings.own_models_bytes,
                   settings.images_bytes)  # fmt: skip
    if caches <= room:
        if not settings.own_models_bytes:  # (derived: the room the other caches leave)
            left = room - caches
            return Fitted(asked.cache_bytes, asked.corpus_results_bytes, max(0, left),
                          asked.images_bytes)  # fmt: skip
        return asked
    if room < caches // 10:
        raise DoesNotFit(
            f"the server needs {fixed // mb:,} MiB besides its caches ({resident // mb:,} held "
            f"with its models loaded, the captures of {settings.concurrent_runs()} runs at once "
            f"of {settings.max_capture_bytes // mb:,} (ATTNVIZ_MAX_CAPTURE_BYTES) and of the "
            f"runs lent their turns, {turns // mb:,} (ATTNVIZ_TURN_BYTES), two answers of "
            f"{settings.max_response_bytes // mb:,} (ATTNVIZ_MAX_RESPONSE_BYTES), "
            f"{WORKING // mb} of work, and {PROJECTING // mb} for UMAP's process), and its "
            f"caches {caches // mb:,} MiB, against "
            f"{limit // mb:,} MiB ({source}): give it more memory, or lower those budgets"
        )
    factor = room / caches
    fitted = Fitted(
        int(settings.cache_bytes * factor),
        int(settings.corpus_results_bytes * factor),
        int(settings.own_models_bytes * factor),
        int(settings.images_bytes * factor),
    )
    changed = ", ".join(
        f"{name} {before // mb:,} -> {after // mb:,} MiB"
        for name, before, after in (
            ("ATTNVIZ_CACHE_BYTES", asked.cache_bytes, fitted.cache_bytes),
            (
                "ATTNVIZ_CORPUS_RESULTS_BYTES",
                asked.corpus_results_bytes,
                fitted.corpus_results_bytes,
            ),
            ("ATTNVIZ_OWN_MODELS_BYTES", asked.own_models_bytes, fitted.own_models_bytes),
            ("ATTNVIZ_IMAGES_BYTES", asked.images_bytes, fitted.images_bytes),
        )
        if before  # (a derived bound, 0 asked: none is left for models of yours)
    )
    said = (
        f"the memory budgets pass {limit // mb:,} MiB ({source}) by "
        f"{(caches - room) // mb:,} MiB: the caches are scaled to the room left, {changed}"
    )
    return Fitted(fitted.cache_bytes, fitted.corpus_results_bytes, fitted.own_models_bytes,
                  fitted.images_bytes, said)  # fmt: skip
