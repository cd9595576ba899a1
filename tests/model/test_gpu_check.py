"""The GPU check's script (`make gpu-check`, harness/gpu_check.py) runs its steps at toy
sizes on the CPU (`--smoke`): it is known to run, its comparisons pass and its tables are
printed, before a GPU machine is lent to run it at its real sizes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_its_steps_at_toy_sizes_on_the_cpu():
    done = subprocess.run(
        [sys.executable, str(ROOT / "harness" / "gpu_check.py"), "--smoke"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for step in ("## 1.", "## 2.", "## 3.", "## 4.", "done in"):
        assert step in done.stdout, done.stdout
    assert "| SmolLM2-135M | bfloat16 | transformers' code |" in done.stdout
    assert "| all-MiniLM-L6-v2 | float32 | model/'s code |" in done.stdout
