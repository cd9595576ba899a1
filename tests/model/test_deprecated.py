"""The names of the earlier release still work, with a DeprecationWarning, for one more
(the README's "Deprecated names"); and what model/ does not implement is refused."""

from __future__ import annotations

import shutil

import pytest
import torch

from model.config import ModelConfig
from model.layers import FeedForward
from model.pretrained import MiniLM
from model.pronounce.pronouncer import SHIPPED, Pronouncer, Transcription
from model.runner import RunResult
from model.transformer import Transformer


def test_the_config_reads_the_old_vocabulary_size_names():
    with pytest.warns(DeprecationWarning) as warned:
        config = ModelConfig(src_vocab_size=11, tgt_vocab_size=12)
    assert [str(w.message) for w in warned] == [
        "src_vocab_size is deprecated: use source_vocab_size",
        "tgt_vocab_size is deprecated: use target_vocab_size",
    ]
    assert (config.source_vocab_size, config.target_vocab_size) == (11, 12)
    with pytest.warns(DeprecationWarning, match="tgt_vocab_size is deprecated"):
        assert config.tgt_vocab_size == 12
    old_file = {"src_vocab_size": 11, "tgt_vocab_size": 12}  # a config.json of the last release
    assert ModelConfig.from_dict(old_file) == config
    assert "src_vocab_size" not in config.to_dict()  # saved under the new names


@pytest.mark.parametrize(
    "field, value, message",
    [("activation", "tanh", "activation must be one of"), ("norm", "batchnorm", "norm must be")],
)
def test_what_model_does_not_implement_is_refused_not_replaced(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{field: value})
    with pytest.raises(ValueError, match="activation 'tanh' is not implemented"):
        FeedForward(8, 16, activation="tanh")  # never quietly another activation


def test_a_checkpoint_with_the_old_vocabulary_file_names_loads(tmp_path):
    old = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, old)
    (old / "source_vocab.json").rename(old / "src_vocab.json")
    (old / "target_vocab.json").rename(old / "tgt_vocab.json")
    loaded = Pronouncer.load(old)
    assert loaded.run("猫追狗", capture=False).output_tokens == ["mao1", "zhui1", "gou3"]


def test_the_runners_old_names():
    pronouncer = Pronouncer.load()
    with pytest.warns(DeprecationWarning, match="transcribe is deprecated"):
        result = pronouncer.transcribe("猫追狗", capture=False)
    assert Transcription is RunResult and isinstance(result, Transcription)
    with pytest.warns(DeprecationWarning, match="decoder_tokens is deprecated"):
        assert result.decoder_tokens == result.target_tokens == ["<bos>", "mao1", "zhui1", "gou3"]
    with pytest.warns(DeprecationWarning, match="max_source_tokens is deprecated"):
        assert pronouncer.max_source_tokens == pronouncer.max_tokens == 128
    with pytest.warns(DeprecationWarning, match="MiniLM.directory, trained. is deprecated"):
        twin = MiniLM(trained=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the twin's weights, as the earlier release made them
        expected = Transformer(twin.model.config)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            twin.model.state_dict().values(), expected.state_dict().values(), strict=True
        )
    )
