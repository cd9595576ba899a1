"""Process-wide torch settings."""

from __future__ import annotations

import os

import torch


def usable_cpus() -> int:
    """CPUs this process may run on (a container's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def set_threads(threads: int = 0) -> int:
    """Let torch use `threads` per operation (0: every usable CPU); returns the number."""
    threads = threads or usable_cpus()
    torch.set_num_threads(threads)
    return threads
