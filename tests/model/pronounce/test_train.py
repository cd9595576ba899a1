"""Training: the CLI's smoke mode, determinism, and resuming."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import load_file

from attnviz.model.pronounce.pronouncer import Pronouncer
from attnviz.model.pronounce.train import TrainConfig, lr_at, train

TINY = dict(d_model=32, n_heads=4, n_layers=1, n_decoder_layers=1, d_ff=64)


def test_cli_smoke_run_writes_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "run"
    command = ["attnviz", "train", "pronounce", "--out", str(out), "--steps", "10"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnviz.app.cli",
            *command[1:],
            "--eval-every",
            "5",
            "--eval-n",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=280,  # below pytest's own limit, so the run's output is shown
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "step 5: loss" in result.stdout and "step 10: loss" in result.stdout
    assert "done: zh acc" in result.stdout
    log = json.loads((out / "train_log.json").read_text())
    assert [e["step"] for e in log] == [5, 10]
    assert log[-1]["loss"] < 7.0  # from ln(2213) = 7.7 at the start
    pronouncer = Pronouncer.load(out)
    assert pronouncer.model.config.d_model == 256
    assert load_file(out / "model.safetensors")["output.weight"].dtype == torch.float16


def test_training_is_deterministic_and_resumes_exactly(tmp_path):
    tc = TrainConfig(steps=12, warmup=3, eval_every=100, eval_n=2, save_every=4, model=TINY)
    assert train(tmp_path / "a", tc, progress=False, until=6) is None  # stopped, state saved
    train(tmp_path / "a", tc, progress=False)  # resumes at step 6
    train(tmp_path / "b", tc, progress=False)  # straight through
    state = json.loads((tmp_path / "a/train_state/state.json").read_text())
    assert state["step"] == 12 and state["segments"] == [[0, 6], [6, 12]]
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(tmp_path / "a/train_state" / name)
        b = load_file(tmp_path / "b/train_state" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_resuming_with_other_settings_is_refused(tmp_path):
    tc = TrainConfig(steps=12, warmup=3, eval_every=100, eval_n=2, save_every=2, model=TINY)
    train(tmp_path, tc, progress=False, until=2)
    with pytest.raises(ValueError, match="trained with other settings"):
        train(tmp_path, TrainConfig(**{**asdict(tc), "steps": 20}), progress=False)


def test_learning_rate_warms_up_then_decays():
    tc = TrainConfig(steps=1000, warmup=100, lr=1e-3, min_lr_ratio=0.05)
    assert lr_at(0, tc) == 1e-5 and lr_at(99, tc) == 1e-3
    assert lr_at(550, tc) < 1e-3 and abs(lr_at(1000, tc) - 5e-5) < 1e-12
