"""Process-wide torch settings."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import os
import sys
import threading
import time
from pathlib import Path

import torch


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (`docker run --cpus`), or None."""
    try:  # cgroup v2: "max 100000" or "150000 100000"
        said, every = (root / "cpu.max").read_text().split()
        return None if said == "max" else int(said) / int(every)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by a container's CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, math.ceil(limit))) if limit else cpus


def set_threads(threads: int = 0) -> int:
    """Let torch use `threads` per operation; returns the number. 0: what OMP_NUM_THREADS
    says where it is set (as torch itself reads it at its start), else every usable CPU."""
    stated = os.environ.get("OMP_NUM_THREADS", "")
    threads = threads or (int(stated) if stated.isdigit() and int(stated) > 0 else usable_cpus())
    torch.set_num_threads(threads)
    return threads


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018  (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(max_bytes: int = 512 * 2**20) -> bool:
    """Let glibc keep up to `max_bytes` of freed memory for the next allocations (True if
    it could). A captured run holds every head's scores and weights (150 MB for MiniLM at
    512 tokens): by default glibc maps such blocks fresh and unmaps them when freed, so the
    next run pays the kernel's page faults again (35 ms of a 125 ms run, measured). Served
    from the heap instead, they are reused; `release_free_memory` still hands free pages
    back after the run cache drops runs."""
    if _LIBC is None:
        return False
    mmap_ok = _LIBC.mallopt(M_MMAP_THRESHOLD, min(max_bytes, 32 * 2**20))
    return bool(mmap_ok and _LIBC.mallopt(M_TRIM_THRESHOLD, max_bytes))


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim); True if it
    did. Tensors of many sizes freed and allocated again leave glibc's arenas fragmented,
    and a long-running server's resident memory creeps up by that much; a trim after
    large frees keeps it flat. A no-op where the C library is not glibc. What torch's CUDA
    allocator keeps cached of freed tensors is handed back too."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True


class TakeTurns:
    """Called once an item in a loop of short native calls that each let the GIL go and
    take it back (a tokenizer's `encode`, a small numpy call): it sleeps `pause` seconds
    once `every` seconds. CPython hands the GIL to a waiting thread only after a switch
    interval (5 ms) with no switch, and each such release restarts that wait, so without
    a pause the event loop's thread can wait for the whole loop (94 ms behind 20,000
    `encode`s; 16 ms with a pause every 5 ms; measured)."""

    def __init__(self, every: float = 0.005, pause: float = 1e-4) -> None:
        self.every, self.pause = every, pause
        self.last = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self.last > self.every:
            time.sleep(self.pause)
            self.last = time.perf_counter()


COMPUTE_NICE = 5  # how much less CPU share a compute thread asks for than the event loop


def lower_priority(increment: int = COMPUTE_NICE) -> None:
    """This thread, and the threads it starts from now on (its OpenMP team), at a lower
    scheduling priority (Linux: a thread's nice value is its own): where compute fills
    every core, the event loop's thread is still woken at once to route a request."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):  # (a limit on niceness: left as it is)
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + increment)
