"""A model folder is untrusted input (issue 43): its config never runs code of its own
(transformers is told so, never asked on a terminal), and its shard index never reaches a
file outside the folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from attnviz.model.checkpoints import CheckpointError
from attnviz.model.pretrained.hf import read_weights
from attnviz.model.pretrained.sources import load_origin


def test_a_config_that_asks_for_its_own_code_is_refused_and_its_code_never_runs(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "custom-x",
                "architectures": ["XModel"],
                "auto_map": {"AutoConfig": "configuration_x.XConfig"},
            }
        )
    )
    ran = tmp_path / "ran"
    (tmp_path / "configuration_x.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    # (in a process of its own, with no terminal to ask on: a prompt would hang or fail)
    script = (
        "import sys; from pathlib import Path\n"
        "from attnviz.model.hf.loading import hf_config\n"
        "from attnviz.model.checkpoints import CheckpointError\n"
        "try:\n"
        "    hf_config(Path(sys.argv[1]))\n"
        "except CheckpointError as exc:\n"
        "    print(exc)\n"
    )
    said = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "contains custom code which must be executed" in said.stdout, said.stderr[-2000:]
    assert not ran.exists()


@pytest.mark.parametrize(
    "shard", ["../outside/model.safetensors", "/etc/hostname", "a/b.safetensors"]
)
def test_a_shard_named_outside_the_folder_is_refused_unread(tmp_path, shard):
    outside = tmp_path / "outside"
    outside.mkdir()
    save_file({"secret": torch.zeros(2)}, str(outside / "model.safetensors"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": shard}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    said = f"names the shard {shard!r}: a shard is a file of the model's own folder"
    with pytest.raises(
        CheckpointError, match="a shard is a file of the model's own folder"
    ) as refused:
        read_weights(folder)
    assert said in str(refused.value)
    with pytest.raises(CheckpointError, match="a shard is a file of the model's own folder"):
        load_origin(folder, max_bytes=10**9)  # (its size counted before anything is read)
