"""Process-wide torch settings."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (`docker run --cpus`), or None."""
    try:  # cgroup v2: "max 100000" or "150000 100000"
        quota, period = (root / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
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
    """Let torch use `threads` per operation (0: every usable CPU); returns the number."""
    threads = threads or usable_cpus()
    torch.set_num_threads(threads)
    return threads
