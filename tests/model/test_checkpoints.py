"""Checkpoints: config.json beside model.safetensors, checked against each other on load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from model import load_checkpoint, save_checkpoint
from model.checkpoints import CheckpointError

from .conftest import ARCH_CONFIGS, build


@pytest.mark.parametrize("arch", ARCH_CONFIGS)
def test_a_saved_model_loads_and_computes_the_same(tmp_path, arch):
    model = build(**ARCH_CONFIGS[arch])
    save_checkpoint(model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_checkpoint(tmp_path)
    assert loaded.config == model.config and not loaded.training
    ids = torch.randint(3, 40, (2, 6))
    args = (ids, ids[:, :3]) if arch == "encoder-decoder" else (ids,)
    assert torch.equal(loaded(*args), model(*args))


def test_float16_weights_load_as_float32_within_half_precision(tmp_path):
    model = build()
    save_checkpoint(model, tmp_path, dtype=torch.float16)
    assert load_file(tmp_path / "model.safetensors")["output.weight"].dtype == torch.float16
    loaded = load_checkpoint(tmp_path)
    assert loaded.output.weight.dtype == torch.float32
    assert (loaded.output.weight - model.output.weight).abs().max() <= 1e-3


def test_the_sinusoidal_table_is_not_stored(tmp_path):
    save_checkpoint(build(), tmp_path)
    assert not any("pe" in name.split(".") for name in load_file(tmp_path / "model.safetensors"))


def test_weights_that_do_not_fit_the_config_are_a_clear_error(tmp_path):
    save_checkpoint(build(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["tgt_vocab_size"] = 41
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"output.weight has shape \(40, 32\)"):
        load_checkpoint(tmp_path)


def test_missing_and_extra_tensors_are_named(tmp_path):
    save_checkpoint(build(), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state.pop("output.bias")
    state["surplus"] = torch.zeros(1)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors \['output.bias'\].*surplus"):
        load_checkpoint(tmp_path)


def test_a_folder_without_weights_is_a_clear_error(tmp_path):
    build().config.save(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=r"has no model\.safetensors"):
        load_checkpoint(tmp_path)
