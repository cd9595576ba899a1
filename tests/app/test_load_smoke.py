"""Short runs of `make load` and `make soak` (bench/load.py, bench/soak.py) against a real
uvicorn server: nothing but 200s, documented 4xx and documented 503s, and /healthz answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, out: Path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    result = out / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--json", str(result)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.exists(), proc.stdout + proc.stderr
    return json.loads(result.read_text()), proc


def test_load_at_8_clients_has_no_errors_and_healthz_stays_fast(tmp_path):
    # the bound is loose: this machine's few cores also run the other tests
    args = ["--clients", "8", "--duration", "6", "--healthz-limit-ms", "500"]
    result, proc = run_bench("load.py", tmp_path, *args, "--out", str(tmp_path))
    (row,) = result["rows"]
    assert row["served"] >= 12, proc.stdout
    assert row["errors"] == 0, row["error_examples"]
    assert row["server_5xx"] == 0, row["server_statuses"]
    assert row["server_log_problems"] == []
    assert row["healthz_failures"] == []
    assert row["healthz_probes"] >= 30
    assert row["healthz_p99_ms"] < 500
    assert proc.returncode == 0, proc.stdout


def test_soak_of_120_requests_gets_only_expected_statuses(tmp_path):
    args = ["--requests", "120", "--warmup", "60", "--checkpoint", "60", "--max-growth", "50"]
    result, proc = run_bench("soak.py", tmp_path, *args)
    assert result["unexpected_count"] == 0, result["unexpected"]
    assert result["server_log_problems"] == []
    assert result["server_statuses"].keys() <= {"200", "400", "404", "413", "422"}
    assert result["threads_max_after_warmup"] <= result["threads_max_warmup"] + 4
    assert result["rss_growth_percent"] < 50
    assert proc.returncode == 0, proc.stdout
