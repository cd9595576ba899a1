"""Where a model is placed (model/placement.py), resolved on this machine: the devices it
may name, what a dtype of `auto` reads from a checkpoint, which of a server-wide
`max_memory` a model placed on one device may use, and the tolerances of checks that
recompute a model's sums."""

from __future__ import annotations

import pytest
import torch

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.placement import Placement, Where, relative_tolerance, stored_dtype


def test_auto_is_the_cpu_here_and_a_device_torch_does_not_see_is_refused():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert Placement().where() == Where("cpu")
    assert Placement("cpu").where().on_cpu
    with pytest.raises(CheckpointError, match="the device cuda:1 was asked for, and torch sees"):
        Placement("cuda:1").where()
    with pytest.raises(ValueError, match="none of auto, cpu, cuda, cuda:N, mps"):
        Placement("gpu")
    with pytest.raises(ValueError, match="none of auto, bfloat16"):
        Placement(dtype="half")


def test_a_max_memory_is_kept_to_the_devices_a_placement_may_use():
    memory = {"0": "70GiB", "1": "70GiB", "cpu": "20GiB", "disk": "1TiB"}
    placed = Placement("cpu", max_memory=memory)
    assert placed.memory_for("cpu") == {"cpu": "20GiB", "disk": "1TiB"}
    assert placed.where() == Where("cpu", "auto")  # (spread: the CPU, then the disk)
    assert placed.memory_for("cuda:1") == {1: "70GiB", "cpu": "20GiB", "disk": "1TiB"}
    assert placed.memory_for("cuda") == {0: "70GiB", 1: "70GiB", "cpu": "20GiB", "disk": "1TiB"}
    gpus_only = Placement("cpu", max_memory={"0": "70GiB"})
    assert gpus_only.where() == Where("cpu")  # (nothing it may use: not spread)


def test_auto_is_the_checkpoints_own_float_dtype():
    assert Placement().torch_dtype(torch.bfloat16) == torch.bfloat16
    assert Placement().torch_dtype(None) == torch.float32  # (a GGUF's: dequantized)
    assert Placement(dtype="float16").torch_dtype(torch.bfloat16) == torch.float16
    assert stored_dtype({"torch_dtype": "bfloat16"}) == torch.bfloat16
    assert stored_dtype({"text_config": {"dtype": "float16"}}) == torch.float16
    assert stored_dtype({}, {"BF16"}) == torch.bfloat16  # (the headers' one float dtype)
    assert stored_dtype({}, {"BF16", "F32"}) is None  # (several: float32, said so)


def test_checks_allow_what_the_dtype_rounds():
    assert relative_tolerance(torch.float32) == 1e-4
    assert relative_tolerance(torch.bfloat16) == 4 * 2**-7
    assert relative_tolerance(torch.float16) == 4 * 2**-10
