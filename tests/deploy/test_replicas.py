"""A short `make scale-check`: three real servers behind Debian's HAProxy answer alike,
and neither a killed replica nor a rolling restart under load loses a request."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
import replicas


def test_replicas_are_interchangeable(capsys):
    assert replicas.main(["--requests", "90", "--clients", "3"]) == 0
    said = capsys.readouterr().out
    assert said.count("identical") == len(replicas.SAME)
    assert "0 resets" in said and said.rstrip().endswith("PASS")
