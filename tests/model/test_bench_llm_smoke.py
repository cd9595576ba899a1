"""A smoke of `make bench-llm` (the whole run takes minutes): it runs end to end at 16
tokens and 8 generated tokens, and prints every table it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_llm.py"


def test_the_llm_benchmark_prints_its_tables():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for heading in ("## (a) forward and all heads as u1", "## (b) generating 8 tokens", "## (c)"):
        assert heading in out, out
    row = next(line for line in out.splitlines() if line.startswith("| 16 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # bytes per weight of the u1 answer: at 16 tokens each of the 270 blocks' token lists
    # weigh as much as its 256 weights (at 512 tokens they are 2 %)
    assert float(cells[6]) < 2
    assert "| ours, every head's rows captured |" in out
