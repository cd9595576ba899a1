"""Independent references for the tests and benchmarks: float64 implementations written from
the papers and the authors' code (contributions.py), and TransformerLens 4.3 run in its own
pinned environment (lens.py; ref-env.mk makes it at PYTHON's place, inside .venv so that
`make clean` removes it with the rest)."""

from pathlib import Path

# the reference environment's interpreter (`make ref-env`)
PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "ref" / "bin" / "python"
