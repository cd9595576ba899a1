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


def test_a_tokenizer_whose_regex_backtracks_is_refused_in_seconds(tmp_path):
    """A Split pre-tokenizer of `(\\s*\\w)*$` takes quadratic time on "aaa...!" (5 s at
    32,768 characters), and `(a+)+$` panics past Oniguruma's retry limit: probed in a
    process of its own before the model is served, each is refused within the bound."""
    import time

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    from attnviz.model.pretrained.tokenizer_probe import PROBE_SECONDS, probe_tokenizer

    for pattern, said in ((r"(\s*\w)*$", "took over 5 s"), ("(a+)+$", "retry-limit-in-match")):
        made = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
        made.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        made.save(str(tmp_path / "tokenizer.json"))
        began = time.monotonic()
        with pytest.raises(
            CheckpointError, match="a pre-tokenizer regex that backtracks"
        ) as refused:
            probe_tokenizer(tmp_path / "tokenizer.json")
        assert said in str(refused.value)
        assert time.monotonic() - began < PROBE_SECONDS + 2
    # a tokenizer as transformers' models have (byte-level BPE, GPT-2's regex) passes
    from harness.checkpoints import tokenizer

    tokenizer().save(str(tmp_path / "plain.json"))
    began = time.monotonic()
    probe_tokenizer(tmp_path / "plain.json")
    assert time.monotonic() - began < 2
